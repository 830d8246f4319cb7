//! URLs that carry credentials, and keeping those credentials out of sight.
//!
//! A [`SecretUrl`] holds a URL (a broker, a database) with its password. It shows
//! itself (`Display`, `Debug`, `Serialize`) only redacted; the real value comes
//! out through [`SecretUrl::expose_secret`] alone, called where a connection is
//! made. There is no way back from the redacted form: deserializing one gives a
//! URL whose password is `***`, so configuration layering must hand figment the
//! text it read, never a serialized `SecretUrl` (see the `overseer` crate's
//! configuration loader).
//!
//! [`redact`] is the one redaction rule of the workspace; everything else here
//! (and every scrubber elsewhere) calls it. It reads a URL the way kombu and
//! libpq-style drivers do, but errs on the side of hiding:
//!
//! | part | what is hidden | example |
//! | --- | --- | --- |
//! | user information | the password: after the first `:` up to the *last* `@` of the URL | `redis://:p@ss#w@h/0` → `redis://:***@h/0` |
//! | query parameters | the value of `password`, `passwd`, `pwd`, `pass`, `secret`, `token`, `*password`, `*secret*`, `*token*`, `*_key` (not `*file`, a path) | `postgres://u@h/db?password=x` → `...?password=***` |
//! | `;` lists | each URL of a failover or sentinel list on its own | `sentinel://:a@s1;sentinel://:a@s2` |
//!
//! Unencoded special characters (a space, `@`, `:`, `#`, `/`) in a password are
//! covered: the user information runs to the last `@`, wherever the URL
//! parsers would have stopped. Free text (a driver's error message) is scrubbed
//! by [`scrub`], which finds each `scheme://` in it and redacts that token; a
//! [`SecretUrl`] also masks its own password wherever it appears bare
//! ([`SecretUrl::scrub`]), raw and percent-decoded.

use std::fmt;

use percent_encoding::percent_decode_str;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a password is replaced with wherever it would be shown.
pub const MASK: &str = "***";

/// A URL whose credentials are never shown.
///
/// The redacted form is computed once, when the value is made; the real one is
/// only reachable through [`Self::expose_secret`].
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl {
    secret: String,
    redacted: String,
}

impl SecretUrl {
    /// Wraps a URL (or a `;`-separated list of URLs).
    pub fn new(url: impl Into<String>) -> Self {
        let secret = url.into();
        let redacted = redact(&secret);
        Self { secret, redacted }
    }

    /// The URL with its credentials: only for the call that connects.
    pub fn expose_secret(&self) -> &str {
        &self.secret
    }

    /// The URL with its credentials masked, for showing to people.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// Whether the URL carries anything [`redact`] hides.
    pub fn has_credentials(&self) -> bool {
        self.secret != self.redacted
    }

    /// `text` (a driver's error, say) with every URL's credentials masked, and this
    /// URL's own credentials masked wherever they appear bare.
    pub fn scrub(&self, text: &str) -> String {
        Scrubber::default().with_url(self).scrub(text)
    }

    /// Every credential in this URL, as written: the user information's
    /// password and the values of credential query parameters.
    fn credentials(&self) -> impl Iterator<Item = &str> {
        self.secret.split(';').flat_map(|entry| {
            let parts = Parts::of(entry);
            parts
                .password
                .into_iter()
                .chain(parts.secret_values)
                .map(move |(start, end)| &entry[start..end])
        })
    }
}

/// Masks known secrets in text, besides every URL's credentials: for a check
/// that holds a broker's password apart from its URL, or for the log writer,
/// which knows every configured URL.
///
/// Each secret is masked as written, percent-decoded, and escaped as in JSON
/// (a log line may be JSON), longest first, so a secret that holds another is
/// masked whole.
#[derive(Debug, Clone, Default)]
pub struct Scrubber {
    secrets: Vec<String>,
}

impl Scrubber {
    /// Also masks `url`'s credentials wherever they appear bare.
    pub fn with_url(self, url: &SecretUrl) -> Self {
        url.credentials()
            .fold(self, |scrubber, secret| scrubber.with_secret(secret))
    }

    /// Also masks `secret` wherever it appears.
    pub fn with_secret(mut self, secret: &str) -> Self {
        let decoded = percent_decode_str(secret).decode_utf8_lossy().into_owned();
        // As bytes, the secret prints as a list (`[0, 104, 117, ...]`): how the
        // AMQP client traces the SASL response it sends, `\0user\0password`.
        let listed: Vec<String> = decoded.bytes().map(|b| b.to_string()).collect();
        self.secrets.push(listed.join(", "));
        for form in [secret.to_owned(), decoded] {
            let json = serde_json::to_string(&form).unwrap_or_default();
            let json = json.trim_matches('"').to_owned();
            self.secrets.extend([form, json]);
        }
        self.secrets.retain(|s| !s.is_empty() && s != MASK);
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        self.secrets.dedup();
        self
    }

    /// `text` with every URL's credentials ([`scrub`]) and every known secret masked.
    pub fn scrub(&self, text: &str) -> String {
        self.secrets.iter().fold(scrub(text), |text, secret| {
            text.replace(secret.as_str(), MASK)
        })
    }
}

/// `text` with every URL's credentials masked ([`scrub`]) and every one of
/// `secrets` masked wherever it appears (see [`Scrubber`]).
pub fn scrub_with(text: &str, secrets: &[&str]) -> String {
    secrets
        .iter()
        .fold(Scrubber::default(), |scrubber, secret| {
            scrubber.with_secret(secret)
        })
        .scrub(text)
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretUrl({:?})", self.redacted)
    }
}

/// Serializes the redacted form: for showing (`overseer config`), never for
/// building a configuration.
impl Serialize for SecretUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.redacted)
    }
}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

/// The one redaction rule: a URL, or a `;`-separated list of them, with every
/// password and credential query value replaced by `***` (see the module doc).
pub fn redact(url: &str) -> String {
    url.split(';').map(redact_one).collect::<Vec<_>>().join(";")
}

/// Masks the credentials of every `scheme://...` in free text. A URL in text
/// ends at white space, a quote, `;`, `,` or a closing bracket.
pub fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    while let Some(found) = text[rest..].find("://") {
        let sep = rest + found;
        // The scheme: the letters, digits, `+`, `-`, `.` just before `://`.
        let start = text[..sep]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1)
            .max(rest);
        let end = text[sep + 3..]
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '"' | '\'' | ';' | ',' | ')' | ']' | '>' | '`')
            })
            .map_or(text.len(), |i| sep + 3 + i);
        out.push_str(&text[rest..start]);
        out.push_str(&redact_one(&text[start..end]));
        rest = end;
    }
    out.push_str(&text[rest..]);
    out
}

/// One URL, redacted.
fn redact_one(url: &str) -> String {
    let parts = Parts::of(url);
    let mut spans: Vec<(usize, usize)> = parts.password.into_iter().collect();
    spans.extend(parts.secret_values);
    spans.sort_unstable();
    let mut out = String::with_capacity(url.len());
    let mut rest = 0;
    for (start, end) in spans {
        if start < rest {
            continue;
        }
        out.push_str(&url[rest..start]);
        out.push_str(MASK);
        rest = end;
    }
    out.push_str(&url[rest..]);
    out
}

/// Where the secrets of one URL are, as byte ranges.
struct Parts {
    /// The password of the user information, if any (may be empty).
    password: Option<(usize, usize)>,
    /// The values of credential query parameters.
    secret_values: Vec<(usize, usize)>,
}

impl Parts {
    fn of(url: &str) -> Self {
        let authority_start = url.find("://").map(|i| i + 3);
        // The user information ends at the last '@' (a password may hold '@',
        // '/', '#', '?' or a space when it is not percent-encoded).
        let at = authority_start.and_then(|s| url[s..].rfind('@').map(|i| s + i));
        let password = match (authority_start, at) {
            (Some(start), Some(at)) => url[start..at]
                .find(':')
                .map(|colon| (start + colon + 1, at))
                .filter(|(s, e)| s < e),
            _ => None,
        };
        let after_userinfo = at.map_or(authority_start.unwrap_or(0), |at| at + 1);
        let mut secret_values = Vec::new();
        if let Some(q) = url[after_userinfo..].find('?') {
            let query_start = after_userinfo + q + 1;
            let query_end = url[query_start..]
                .find('#')
                .map_or(url.len(), |i| query_start + i);
            let mut offset = query_start;
            for pair in url[query_start..query_end].split('&') {
                if let Some((key, value)) = pair.split_once('=') {
                    let key = percent_decode_str(key).decode_utf8_lossy();
                    if is_credential_key(&key) && !value.is_empty() {
                        let value_start = offset + key_len(pair);
                        secret_values.push((value_start, value_start + value.len()));
                    }
                }
                offset += pair.len() + 1;
            }
        }
        Self {
            password,
            secret_values,
        }
    }
}

/// The length of `key=` in a `key=value` pair.
fn key_len(pair: &str) -> usize {
    pair.find('=').map_or(pair.len(), |i| i + 1)
}

/// Query parameters that carry a credential in the cloud providers' signed
/// and keyed URLs, lowercase, beside any name holding `password`, `secret`,
/// `token`, `signature` or `credential`: Azure's SAS signature (`sig`) and
/// Functions key (`code`), S3's legacy query authentication
/// (`AWSAccessKeyId`, `Signature`) and SigV4 presigned URLs
/// (`X-Amz-Signature`, `X-Amz-Credential`, `X-Amz-Security-Token`), Google
/// Cloud Storage's signed URLs (`X-Goog-Signature`, `X-Goog-Credential`,
/// `GoogleAccessId`), and the common `api_key`, `apikey`, `access_token`,
/// `client_secret`, `jwt`.
pub const CREDENTIAL_QUERY_KEYS: [&str; 10] = [
    "password",
    "passwd",
    "pwd",
    "pass",
    "auth",
    "key",
    "sig",
    "code",
    "jwt",
    "googleaccessid",
];

/// Does a query parameter of this name carry a credential? Paths to key and
/// certificate files (`ssl_keyfile`, `sslkey`) do not; their contents stay on disk.
fn is_credential_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    if key.ends_with("file") || key.ends_with("path") || key == "sslkey" || key == "sslcert" {
        return false;
    }
    CREDENTIAL_QUERY_KEYS.contains(&key.as_str())
        || key.contains("password")
        || key.contains("signature")
        || key.contains("credential")
        || key.contains("accesskeyid")
        || key.contains("secret")
        || key.contains("token")
        || key.ends_with("_key")
        || key.ends_with("apikey")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_wherever_a_url_is_shown() {
        let url =
            SecretUrl::new("postgres://airflow:s3cr@t@db.internal:5432/airflow?sslmode=require");
        let shown = "postgres://airflow:***@db.internal:5432/airflow?sslmode=require";
        assert_eq!(url.to_string(), shown);
        assert_eq!(format!("{url:?}"), format!("SecretUrl({shown:?})"));
        assert_eq!(serde_json::to_string(&url).unwrap(), format!("{shown:?}"));
        assert_eq!(
            url.expose_secret(),
            "postgres://airflow:s3cr@t@db.internal:5432/airflow?sslmode=require"
        );
        assert!(url.has_credentials());
    }

    #[test]
    fn every_password_form_is_redacted() {
        for (url, shown) in [
            ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
            ("redis://user:pw@h:6379/0", "redis://user:***@h:6379/0"),
            ("amqp://guest:guest@h:5672//", "amqp://guest:***@h:5672//"),
            // Unencoded special characters.
            ("redis://:p w@h/0", "redis://:***@h/0"),
            ("redis://:p@ss@h/0", "redis://:***@h/0"),
            ("redis://:p:w@h/0", "redis://:***@h/0"),
            ("redis://:p#w@h/0", "redis://:***@h/0"),
            ("redis://:a/b+c==@h/0", "redis://:***@h/0"),
            ("redis://:p?w@h/0", "redis://:***@h/0"),
            // Percent-encoded ones.
            ("redis://:p%40ss%23w@h/0", "redis://:***@h/0"),
            // Query parameters.
            (
                "postgres://u@h/db?password=x&sslmode=require",
                "postgres://u@h/db?password=***&sslmode=require",
            ),
            (
                "postgres://u@h/db?sslmode=require&PASSWORD=x%26y",
                "postgres://u@h/db?sslmode=require&PASSWORD=***",
            ),
            (
                "sqs://h?aws_secret_access_key=k&region=eu&access_token=t",
                "sqs://h?aws_secret_access_key=***&region=eu&access_token=***",
            ),
            (
                "rediss://:pw@h:6380/0?ssl_keyfile=/k.pem&ssl_cert_reqs=required",
                "rediss://:***@h:6380/0?ssl_keyfile=/k.pem&ssl_cert_reqs=required",
            ),
            // Lists: failover and sentinel.
            (
                "amqp://a:pw1@r1//;amqp://b:pw2@r2//",
                "amqp://a:***@r1//;amqp://b:***@r2//",
            ),
            (
                "sentinel://:pw@s1:26379;sentinel://:pw@s2:26379/0?master_name=m",
                "sentinel://:***@s1:26379;sentinel://:***@s2:26379/0?master_name=m",
            ),
        ] {
            assert_eq!(redact(url), shown, "{url}");
            let secret = SecretUrl::new(url);
            assert_eq!(secret.to_string(), shown);
            assert_eq!(secret.expose_secret(), url);
        }
    }

    /// Each credential parameter of the cloud providers' signed and keyed
    /// URLs, one by one, in the case each provider writes it.
    #[test]
    fn the_cloud_providers_credential_parameters_are_masked_one_by_one() {
        for key in [
            "sig",
            "code",
            "AWSAccessKeyId",
            "Signature",
            "X-Amz-Signature",
            "X-Amz-Credential",
            "X-Amz-Security-Token",
            "X-Goog-Signature",
            "X-Goog-Credential",
            "GoogleAccessId",
            "api_key",
            "apikey",
            "access_token",
            "client_secret",
            "jwt",
            "auth",
            "key",
        ] {
            let url = format!("https://probe.example/health?{key}=Zq9Pw&sv=2022-11-02");
            let shown = format!("https://probe.example/health?{key}=***&sv=2022-11-02");
            assert_eq!(redact(&url), shown, "{key}");
            assert_eq!(SecretUrl::new(&url).to_string(), shown, "{key}");
        }
        // What is not a credential stays readable.
        let plain = "https://probe.example/health?sv=2022-11-02&X-Amz-Expires=60&region=eu";
        assert_eq!(redact(plain), plain);
    }

    #[test]
    fn urls_without_credentials_are_shown_as_they_are() {
        for text in [
            "sqlite://overseer.db?mode=rwc",
            "sqlite::memory:",
            "mysql://root@127.0.0.1:3306/test",
            "redis://broker:6379/0",
            "redis://user@broker:6379/0",
            "amqp://h//?heartbeat=30",
        ] {
            assert_eq!(SecretUrl::new(text).to_string(), text);
            assert!(!SecretUrl::new(text).has_credentials());
        }
    }

    #[test]
    fn the_real_value_survives_a_round_trip_through_its_text() {
        // What configuration layering must do: carry the text, not the display.
        let url = SecretUrl::new("redis://:***@h/0");
        let again: SecretUrl =
            serde_json::from_value(serde_json::json!("redis://:Zq9Pw@h/0")).unwrap();
        assert_ne!(url, again);
        assert_eq!(again.expose_secret(), "redis://:Zq9Pw@h/0");
    }

    #[test]
    fn scrub_masks_every_url_in_a_message_and_the_bare_password_too() {
        let text = "failed: amqp://guest:guest@rabbit:5672// then redis://:pw@r:6379/0, and 'sentinel://u:p@s1:26379;sentinel://u:p@s2:26379'";
        assert_eq!(
            scrub(text),
            "failed: amqp://guest:***@rabbit:5672// then redis://:***@r:6379/0, and 'sentinel://u:***@s1:26379;sentinel://u:***@s2:26379'"
        );
        let url = SecretUrl::new("postgres://u:hunter%402@h/db?sslpassword=k3y");
        assert_eq!(
            url.scrub("password hunter@2 or hunter%402 rejected, key k3y"),
            "password *** or *** rejected, key ***"
        );
        assert_eq!(
            scrub_with("AUTH s3 failed for s3", &["s3"]),
            "AUTH *** failed for ***"
        );
        // `\0u\0hunter2` as lapin traces the SASL response it sends.
        assert_eq!(
            scrub_with(
                "response: LongString([0, 117, 0, 104, 117, 110, 116, 101, 114, 50])",
                &["hunter2"]
            ),
            "response: LongString([0, 117, 0, ***])"
        );
    }
}
