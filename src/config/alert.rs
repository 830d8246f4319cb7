//! An alert target's settings: [`WebhookUrl`], where alerts are posted, shown
//! without its secret, and [`AlertFormat`], how their bodies are written.
//!
//! A webhook's URL is its password. Slack's (`https://hooks.slack.com/services/
//! T000/B000/XXXX`) carries its token in the path, others in the query
//! (`?token=`) or the user information; [`SecretUrl`]'s rule masks the last two
//! but not a path. So a webhook is shown as its origin alone, the rest masked
//! whole: `https://hooks.slack.com/***`. That is what `overseer config`, the
//! logs and `/metrics` (the `target` label, unless the entry has a `name`) say;
//! only the HTTP client that posts sees [`WebhookUrl::expose_secret`].

use std::fmt;

use overseer_core::secret::{MASK, Scrubber, SecretUrl};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A webhook URL, shown as its origin and `/***`.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookUrl {
    /// The URL as configured, credentials and all.
    secret: SecretUrl,
    /// `scheme://host[:port]/***` (or `/` when the URL has no path or query).
    shown: String,
}

impl WebhookUrl {
    /// Wraps a URL as configured.
    pub fn new(url: impl Into<String>) -> Self {
        let secret = SecretUrl::new(url);
        let shown = shown(secret.expose_secret());
        Self { secret, shown }
    }

    /// The URL with its token: only for the request that posts an alert.
    pub fn expose_secret(&self) -> &str {
        self.secret.expose_secret()
    }

    /// The origin and `/***`: for people, logs and metrics.
    pub fn redacted(&self) -> &str {
        &self.shown
    }

    /// `scrubber`, also masking every part of this URL that may be a secret
    /// wherever it appears: the password and credential query values (as any
    /// [`SecretUrl`]), the path and the query, whole.
    pub fn scrubbing(&self, scrubber: Scrubber) -> Scrubber {
        let scrubber = scrubber.with_url(&self.secret);
        let Ok(parsed) = url::Url::parse(self.expose_secret()) else {
            // Not a URL (loading refuses it): mask it whole.
            return scrubber.with_secret(self.expose_secret());
        };
        let mut scrubber = scrubber;
        // A path of one character ("/") is no secret, and masking it would mask
        // every slash of every log line.
        if parsed.path().len() > 1 {
            scrubber = scrubber.with_secret(parsed.path());
        }
        if let Some(query) = parsed.query().filter(|q| !q.is_empty()) {
            scrubber = scrubber.with_secret(query);
        }
        scrubber
    }
}

/// `scheme://host[:port]/***`; a URL that does not parse is masked whole.
fn shown(url: &str) -> String {
    let Ok(parsed) = url::Url::parse(url) else {
        return MASK.to_owned();
    };
    let host = parsed.host_str().unwrap_or_default();
    let port = parsed.port().map(|p| format!(":{p}")).unwrap_or_default();
    let bare = parsed.path() == "/" && parsed.query().is_none() && parsed.fragment().is_none();
    let rest = if bare { "/" } else { "/***" };
    format!("{}://{host}{port}{rest}", parsed.scheme())
}

impl fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WebhookUrl({:?})", self.shown)
    }
}

/// Serializes the redacted form: for showing (`overseer config`), never for
/// building a configuration.
impl Serialize for WebhookUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.shown)
    }
}

impl<'de> Deserialize<'de> for WebhookUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

/// How an alert's body is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertFormat {
    /// Overseer's own JSON object (the README's "Alerts").
    #[default]
    Json,
    /// `{"text": "..."}`, as Slack's (and Mattermost's, Rocket.Chat's)
    /// incoming webhooks take it.
    Slack,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_is_shown_as_its_origin_alone() {
        for (url, shown) in [
            (
                "https://hooks.slack.com/services/T000/B000/XXXXXXXX",
                "https://hooks.slack.com/***",
            ),
            (
                "http://ops:hunter2@pager.internal:8443/hook?token=t0k",
                "http://pager.internal:8443/***",
            ),
            ("http://127.0.0.1:9000/", "http://127.0.0.1:9000/"),
            ("http://127.0.0.1:9000", "http://127.0.0.1:9000/"),
            ("not a url s3cret", "***"),
        ] {
            let webhook = WebhookUrl::new(url);
            assert_eq!(webhook.to_string(), shown, "{url}");
            assert_eq!(format!("{webhook:?}"), format!("WebhookUrl({shown:?})"));
            assert_eq!(
                serde_json::to_string(&webhook).unwrap(),
                format!("{shown:?}")
            );
            assert_eq!(webhook.expose_secret(), url);
        }
    }

    #[test]
    fn the_scrubber_masks_the_path_query_and_password_wherever_they_appear() {
        let webhook =
            WebhookUrl::new("https://u:pw@hooks.example.com/services/T0/B0/s3cret?sig=abc");
        let scrubber = webhook.scrubbing(Scrubber::default());
        let line = "POST https://u:pw@hooks.example.com/services/T0/B0/s3cret?sig=abc failed; \
                    path /services/T0/B0/s3cret, sig=abc, pw";
        let scrubbed = scrubber.scrub(line);
        for secret in ["s3cret", "sig=abc", ":pw@"] {
            assert!(!scrubbed.contains(secret), "{scrubbed}");
        }
        // A bare origin masks nothing else.
        let plain = WebhookUrl::new("http://127.0.0.1:9000/").scrubbing(Scrubber::default());
        assert_eq!(plain.scrub("a /b/c line"), "a /b/c line");
    }
}
