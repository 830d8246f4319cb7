//! One URL cut into its pieces as kombu's `url_to_parts` cuts it (Python's
//! `urlparse` under HTTP rules, stated in [`super`]'s header).

use percent_encoding::percent_decode_str;

use crate::error::{BrokerUrlError, Position, Result};

/// The pieces of one URL, as `urlparse("http://" + rest)` cuts them.
pub(super) struct Parts<'a> {
    /// `host[:port]` as written (no user information): part of the identity.
    pub(super) hostinfo: &'a str,
    pub(super) host: Option<String>,
    pub(super) port: Option<u16>,
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    /// The path as written, for the identity.
    pub(super) raw_path: &'a str,
    /// The path less one leading `/`, decoded; `None` when empty.
    pub(super) path: Option<String>,
    /// The query's `key=value` pairs, decoded, blank values dropped (`parse_qsl`).
    pub(super) query: Vec<(String, String)>,
}

impl Parts<'_> {
    /// The last value of a query key (Python's `dict(parse_qsl(...))`).
    pub(super) fn query(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// RFC 3986 scheme characters, as Python's `urlparse` accepts them.
pub(super) fn is_scheme(scheme: &str) -> bool {
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Cuts `rest` (what follows `scheme://`) as `urlparse("http://" + rest)` does.
pub(super) fn split<'a>(rest: &'a str, at: &Position) -> Result<Parts<'a>> {
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(authority_end);
    let after = after.split_once('#').map_or(after, |(before, _)| before);
    let (raw_path, query) = after.split_once('?').unwrap_or((after, ""));

    let (userinfo, hostinfo) = match authority.rsplit_once('@') {
        Some((userinfo, hostinfo)) => (Some(userinfo), hostinfo),
        None => (None, authority),
    };
    let (username, password) = match userinfo {
        Some(info) => match info.split_once(':') {
            Some((user, password)) => (non_empty(unquote(user)), non_empty(unquote(password))),
            None => (non_empty(unquote(info)), None),
        },
        None => (None, None),
    };

    let (host, port) = if let Some(bracketed) = hostinfo.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err(BrokerUrlError::InvalidHost { at: at.clone() });
        };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return Err(BrokerUrlError::InvalidHost { at: at.clone() }),
            },
        };
        (host, port)
    } else {
        if hostinfo.contains(']') {
            return Err(BrokerUrlError::InvalidHost { at: at.clone() });
        }
        match hostinfo.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostinfo, None),
        }
    };
    let port = match port.filter(|p| !p.is_empty()) {
        None => None,
        Some(port) if port.bytes().all(|b| b.is_ascii_digit()) => Some(
            port.parse::<u16>()
                .map_err(|_| BrokerUrlError::InvalidPort { at: at.clone() })?,
        ),
        Some(_) => return Err(BrokerUrlError::InvalidPort { at: at.clone() }),
    };

    let path = raw_path.strip_prefix('/').unwrap_or(raw_path);
    Ok(Parts {
        hostinfo,
        host: non_empty(unquote(&host.to_lowercase())),
        port,
        username,
        password,
        raw_path,
        path: non_empty(unquote(path)),
        query: parse_qsl(query),
    })
}

/// Python's `unquote`: `%XX` decoded, invalid UTF-8 replaced.
fn unquote(text: &str) -> String {
    percent_decode_str(text).decode_utf8_lossy().into_owned()
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

/// Python's `parse_qsl(query)`: `&`-separated, `+` is a space, blank values dropped.
fn parse_qsl(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(_, value)| !value.is_empty())
        .map(|(key, value)| {
            (
                unquote(&key.replace('+', " ")),
                unquote(&value.replace('+', " ")),
            )
        })
        .collect()
}
