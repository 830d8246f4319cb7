//! [`ConfigError`], the one line a bad configuration gets, and the translation of
//! figment's errors into it.
//!
//! Whatever went wrong (a TOML syntax error, an unknown key, a value of the wrong
//! type, a check of [`super::validate`]), the operator reads one line naming the key,
//! where its value came from, and what is wrong; never a credential, never a source
//! excerpt that could show one.

use std::fmt;

use super::layers::describe;
use crate::secret::scrub;

/// A configuration that cannot be used: one line naming the key, where its value
/// came from, and what is wrong. Never carries a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key, as `section.key` or `executors[1].name`; empty for file-level problems.
    pub key: String,
    /// Where the value came from: a file, an environment variable, a flag.
    pub origin: String,
    /// What is wrong.
    pub problem: String,
}

impl ConfigError {
    pub fn new(
        key: impl Into<String>,
        origin: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        Self {
            key: key.into(),
            origin: origin.into(),
            problem: one_line(&scrub(&problem.into())),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.key.is_empty(), self.origin.is_empty()) {
            (true, _) => write!(
                f,
                "invalid configuration in {}: {}",
                self.origin, self.problem
            ),
            (false, true) => write!(f, "invalid configuration: {}: {}", self.key, self.problem),
            (false, false) => write!(
                f,
                "invalid configuration: {} (from {}): {}",
                self.key, self.origin, self.problem
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Turns figment's error into ours: the first problem, on one line.
pub(super) fn from_figment(error: figment::Error) -> ConfigError {
    let keys: Vec<&str> = error.path.iter().map(String::as_str).collect();
    let origin = error
        .metadata
        .as_ref()
        .map(|md| describe(md, &keys))
        .unwrap_or_default();
    let key = keys
        .iter()
        .map(|k| match k.parse::<usize>() {
            Ok(i) => format!("[{i}]"),
            Err(_) => format!(".{k}"),
        })
        .collect::<String>()
        .trim_start_matches('.')
        .to_owned();
    let problem = match &error.kind {
        figment::error::Kind::UnknownField(_, expected) => {
            return ConfigError::new(
                key,
                origin,
                format!("unknown key (expected one of: {})", expected.join(", ")),
            );
        }
        figment::error::Kind::Message(message) => toml_message(message),
        other => other.to_string(),
    };
    ConfigError::new(key, origin, problem)
}

/// A TOML parse error spans several lines with a source excerpt; keep the
/// position and the explanation, drop the excerpt (it may show a secret).
fn toml_message(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.contains('|') && !line.starts_with('^'))
        .collect::<Vec<_>>()
        .join(": ")
}

/// Collapses any line breaks so an error stays one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
