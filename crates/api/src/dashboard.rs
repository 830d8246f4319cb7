//! `GET /`: a page for people. Self-contained (no CDN: it works offline) and
//! embedded in the binary; it follows the SSE stream, so verdict changes show
//! without a reload. At its top, one line says the worst state, what has it
//! and since when; the tab's title and favicon (an SVG drawn in the page) follow
//! that state, so a tab in the background still tells. Each executor instance
//! says how long it has been in its state and what it was before (`since`,
//! `previous`), and draws its last 24 hours from
//! `GET /api/v2/monitor/health/history`, asked when the page opens and when a
//! state begins anew; without that route the strip shows the current state.
//!
//! Who may show it inside a frame of theirs is [`FrameAncestors`]: the page's
//! own origin always, and the origins configured (`[api] frame_ancestors`),
//! such as the Airflow UI's, whose navigation opens the page in an iframe
//! through Overseer's Airflow plugin (`integrations/airflow`). Any other site
//! framing it gets a blank frame: a page that can be framed anywhere can be
//! dressed up to mislead (clickjacking).

use actix_web::HttpResponse;
use actix_web::http::header;
use actix_web::web::Data;

use crate::ApiState;

/// The page, as it ships.
pub const PAGE: &str = include_str!("../assets/dashboard.html");

/// What the page may load and run: its own script and style, allowed by
/// their SHA-256 (so a script injected into the page, inline or not, never
/// runs), its favicon (a `data:` SVG it draws), and requests to its own
/// origin (the report, its stream, the history); nothing else.
/// `frame-ancestors` follows, from [`FrameAncestors`].
fn policy() -> &'static str {
    static POLICY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "default-src 'none'; script-src {}; style-src {}; img-src data:; \
             connect-src 'self'; base-uri 'none'; form-action 'none'",
            hash_of(inline(PAGE, "script")),
            hash_of(inline(PAGE, "style")),
        )
    });
    &POLICY
}

/// The text of the page's one `<tag>` element, as the browser hashes it.
fn inline<'a>(page: &'a str, tag: &str) -> &'a str {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = page
        .find(&open)
        .map(|at| at + open.len())
        .unwrap_or_else(|| panic!("the dashboard has no <{tag}>"));
    let end = page[start..]
        .find(&close)
        .map(|len| start + len)
        .unwrap_or_else(|| panic!("the dashboard's <{tag}> is not closed"));
    &page[start..end]
}

/// A CSP source that allows exactly `text`: `'sha256-<base64>'`.
fn hash_of(text: &str) -> String {
    use base64::Engine as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
    )
}

/// The origins allowed to frame the dashboard, besides its own: the page's
/// `Content-Security-Policy` ends with `frame-ancestors 'self'` and them.
/// Built from text by [`FrameAncestors::new`], which accepts origins only
/// (`scheme://host[:port]`), so nothing configured can add to the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameAncestors {
    /// The origins, as [`origin`] wrote them.
    origins: Vec<String>,
    /// The whole `Content-Security-Policy` value, built once.
    policy: String,
}

impl Default for FrameAncestors {
    /// Only the page's own origin.
    fn default() -> Self {
        Self::from_origins(Vec::new())
    }
}

impl FrameAncestors {
    /// The origins of `texts` ([`origin`] each), or the first one that is not
    /// an origin, said why.
    pub fn new<S: AsRef<str>>(texts: impl IntoIterator<Item = S>) -> Result<Self, String> {
        let mut origins: Vec<String> = Vec::new();
        for text in texts {
            let origin = origin(text.as_ref())?;
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        Ok(Self::from_origins(origins))
    }

    fn from_origins(origins: Vec<String>) -> Self {
        let mut policy = format!("{}; frame-ancestors 'self'", policy());
        for origin in &origins {
            policy.push(' ');
            policy.push_str(origin);
        }
        Self { origins, policy }
    }

    /// The origins, besides the page's own, that may frame it.
    pub fn origins(&self) -> &[String] {
        &self.origins
    }

    /// The page's `Content-Security-Policy`.
    pub fn policy(&self) -> &str {
        &self.policy
    }
}

/// `text` as an origin of a `frame-ancestors` directive: `http` or `https`, a
/// host (a leading `*.` for any subdomain, as CSP allows), an optional port,
/// and nothing after it but a `/`. Written as browsers compare origins:
/// lower case, punycode, no default port (`https://Airflow.example.com:443/`
/// is `https://airflow.example.com`). The error says what is wrong.
pub fn origin(text: &str) -> Result<String, String> {
    const EXPECTED: &str = "expected scheme://host[:port], such as https://airflow.example.com";
    let text = text.trim();
    let url = url::Url::parse(text)
        .map_err(|e| format!("{text:?} is not an origin ({e}): {EXPECTED}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{text:?} is not an origin: its scheme must be http or https"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("an origin holds no user name or password".into());
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "{text:?} has a path, query or fragment, which an origin does not: {EXPECTED}"
        ));
    }
    let host_is_plain = match url.host() {
        Some(url::Host::Domain(domain)) => {
            let name = domain.strip_prefix("*.").unwrap_or(domain);
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        }
        Some(url::Host::Ipv4(_) | url::Host::Ipv6(_)) => true,
        None => false,
    };
    if !host_is_plain {
        return Err(format!(
            "{text:?} is not an origin: its host may hold letters, digits, '-' and '.' only"
        ));
    }
    // The serialization keeps a `*.` wildcard and drops a default port.
    Ok(url.origin().ascii_serialization())
}

/// `GET /`.
pub async fn page(state: Data<ApiState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            state.frame_ancestors.policy(),
        ))
        .body(PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_pages_own_origin_frames_it_by_default() {
        assert_eq!(
            FrameAncestors::default().policy(),
            format!("{}; frame-ancestors 'self'", policy())
        );
        assert!(FrameAncestors::default().origins().is_empty());
    }

    /// No inline script or style runs but the page's own, each allowed by its
    /// hash (the browser tests load the page under this policy: its script
    /// running is what they see).
    #[test]
    fn only_the_pages_own_script_and_style_may_run() {
        let policy = policy();
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        assert!(!policy.contains("unsafe-eval"), "{policy}");
        let script = inline(PAGE, "script");
        assert!(
            script.contains("EventSource"),
            "the page's script: {script:.80}"
        );
        assert!(
            policy.contains(&format!("script-src {};", hash_of(script))),
            "{policy}"
        );
        assert!(policy.contains(&format!("style-src {};", hash_of(inline(PAGE, "style")))));
        // SHA-256 of "" as every CSP implementation writes it.
        assert_eq!(
            hash_of(""),
            "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"
        );
    }

    #[test]
    fn origins_are_written_as_browsers_compare_them() {
        let ancestors = FrameAncestors::new([
            "https://Airflow.Example.com:443/",
            "http://127.0.0.1:8080",
            "http://[::1]:28080",
            "https://*.airflow.example.com",
            "https://airflow.example.com",
        ])
        .unwrap();
        assert_eq!(
            ancestors.origins(),
            [
                "https://airflow.example.com",
                "http://127.0.0.1:8080",
                "http://[::1]:28080",
                "https://*.airflow.example.com",
            ]
        );
        assert!(ancestors.policy().ends_with(
            "; frame-ancestors 'self' https://airflow.example.com http://127.0.0.1:8080 http://[::1]:28080 https://*.airflow.example.com"
        ));
    }

    #[test]
    fn anything_but_an_origin_is_refused_and_said_why() {
        for (text, problem) in [
            (
                "airflow.example.com",
                "\"airflow.example.com\" is not an origin (relative URL without a base): expected scheme://host[:port], such as https://airflow.example.com",
            ),
            (
                "https://airflow.example.com/home",
                "\"https://airflow.example.com/home\" has a path, query or fragment, which an origin does not: expected scheme://host[:port], such as https://airflow.example.com",
            ),
            (
                "https://airflow.example.com/?x=1",
                "\"https://airflow.example.com/?x=1\" has a path, query or fragment, which an origin does not: expected scheme://host[:port], such as https://airflow.example.com",
            ),
            (
                "ftp://airflow.example.com",
                "\"ftp://airflow.example.com\" is not an origin: its scheme must be http or https",
            ),
            (
                "https://admin:hunter2@airflow.example.com",
                "an origin holds no user name or password",
            ),
            (
                "https://a;script-src",
                "\"https://a;script-src\" is not an origin: its host may hold letters, digits, '-' and '.' only",
            ),
            (
                "https://a,b",
                "\"https://a,b\" is not an origin: its host may hold letters, digits, '-' and '.' only",
            ),
            (
                "'self'",
                "\"'self'\" is not an origin (relative URL without a base): expected scheme://host[:port], such as https://airflow.example.com",
            ),
        ] {
            assert_eq!(
                FrameAncestors::new([text]),
                Err(problem.to_owned()),
                "{text}"
            );
        }
    }
}
