//! URLs that may carry credentials, and keeping those credentials out of sight.
//!
//! A [`SecretUrl`] prints (`Display`, `Debug`, `Serialize`) with its password
//! replaced by `***`; only [`SecretUrl::expose`] gives the real string, for the
//! one call that connects. [`scrub`] removes credentials from any text (a driver's
//! error message, say) before it reaches a log line or the terminal.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a password is replaced with wherever it would be shown.
pub const MASK: &str = "***";

/// A URL whose password is never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps a URL.
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL with its password: only for handing to a driver.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with its password masked, for showing to people.
    pub fn redacted(&self) -> String {
        scrub(&self.0)
    }

    /// The password, if the URL has one, so that it can be masked in text that
    /// does not carry the whole URL (a driver error quoting it, say).
    pub fn password(&self) -> Option<&str> {
        credentials_span(&self.0, 0).and_then(|(start, end)| {
            let userinfo = &self.0[start..end];
            userinfo
                .split_once(':')
                .map(|(_, password)| password)
                .filter(|p| !p.is_empty())
        })
    }

    /// Masks this URL's password anywhere in `text`, and any other URL credentials.
    pub fn scrub_from(&self, text: &str) -> String {
        let text = scrub(text);
        match self.password() {
            Some(password) if password != MASK => text.replace(password, MASK),
            _ => text,
        }
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretUrl({:?})", self.redacted())
    }
}

impl Serialize for SecretUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.redacted())
    }
}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self)
    }
}

/// The byte range of the userinfo (`user:password`) of the first URL in `text`
/// at or after `from`, if that URL has one.
fn credentials_span(text: &str, from: usize) -> Option<(usize, usize)> {
    let scheme_end = text[from..].find("://")? + from + 3;
    // The authority ends at the first '/', '?', '#' or whitespace; userinfo ends at
    // its last '@' (a password may itself hold '@', if not percent-encoded).
    let authority_end = text[scheme_end..]
        .find(|c: char| {
            c == '/' || c == '?' || c == '#' || c.is_whitespace() || c == '"' || c == '\''
        })
        .map_or(text.len(), |i| i + scheme_end);
    let at = text[scheme_end..authority_end].rfind('@')? + scheme_end;
    Some((scheme_end, at))
}

/// The URL (or `;`-separated list of URLs) with user and password removed:
/// the identity of a broker as an instance (`redis://broker:6379/0`).
pub fn without_credentials(text: &str) -> String {
    text.split(';')
        .map(|part| {
            let part = part.trim();
            match credentials_span(part, 0) {
                Some((start, at)) => format!("{}{}", &part[..start], &part[at + 1..]),
                None => part.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// Masks the password of every `scheme://user:password@host` in `text`.
pub fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    let mut search = 0;
    while let Some(scheme_end) = text[search..].find("://").map(|i| i + search + 3) {
        if let Some((start, at)) = credentials_span(text, search) {
            if let Some(colon) = text[start..at].find(':') {
                let password_start = start + colon + 1;
                if password_start < at {
                    out.push_str(&text[rest..password_start]);
                    out.push_str(MASK);
                    rest = at;
                }
            }
        }
        search = scheme_end;
    }
    out.push_str(&text[rest..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_wherever_a_url_is_shown() {
        let url =
            SecretUrl::new("postgres://airflow:s3cr@t@db.internal:5432/airflow?sslmode=require");
        assert_eq!(
            url.to_string(),
            "postgres://airflow:***@db.internal:5432/airflow?sslmode=require"
        );
        assert_eq!(
            format!("{url:?}"),
            r#"SecretUrl("postgres://airflow:***@db.internal:5432/airflow?sslmode=require")"#
        );
        assert_eq!(
            serde_json::to_string(&url).unwrap(),
            r#""postgres://airflow:***@db.internal:5432/airflow?sslmode=require""#
        );
        assert_eq!(url.password(), Some("s3cr@t"));
        assert!(url.expose().contains("s3cr@t"));
    }

    #[test]
    fn urls_without_a_password_are_shown_as_they_are() {
        for text in [
            "sqlite://overseer.db?mode=rwc",
            "sqlite::memory:",
            "mysql://root@127.0.0.1:3306/test",
            "redis://broker:6379/0",
        ] {
            assert_eq!(SecretUrl::new(text).to_string(), text);
            assert_eq!(SecretUrl::new(text).password(), None);
        }
    }

    #[test]
    fn an_instance_identity_carries_no_credentials() {
        assert_eq!(
            without_credentials("redis://:hunter2@broker:6379/0"),
            "redis://broker:6379/0"
        );
        assert_eq!(
            without_credentials(
                "amqp://guest:guest@rabbit-1:5672//;amqp://guest:guest@rabbit-2:5672//"
            ),
            "amqp://rabbit-1:5672//;amqp://rabbit-2:5672//"
        );
        assert_eq!(
            without_credentials("redis://broker:6379/0"),
            "redis://broker:6379/0"
        );
    }

    #[test]
    fn scrub_masks_every_url_in_a_message_and_the_bare_password_too() {
        let text = "failed: amqp://guest:guest@rabbit:5672// then redis://:pw@r:6379/0 and sentinel://u:p@s1:26379;sentinel://u:p@s2:26379";
        assert_eq!(
            scrub(text),
            "failed: amqp://guest:***@rabbit:5672// then redis://:***@r:6379/0 and sentinel://u:***@s1:26379;sentinel://u:***@s2:26379"
        );
        let url = SecretUrl::new("postgres://u:hunter2@h/db");
        assert_eq!(
            url.scrub_from("password hunter2 rejected"),
            "password *** rejected"
        );
    }
}
