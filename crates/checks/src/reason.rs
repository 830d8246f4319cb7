//! Someone else's text (a probe's output, a server's status line) made fit for a
//! verdict's reason: one line, a bounded length, no credential.
//!
//! A reason is written to `job.executor_health_reason` and shown on every page
//! and log line, so it is never more than [`MAX_REASON_CHARS`] characters, holds
//! no control character (no terminal escape, no second line), and goes through
//! [`overseer_core::secret::scrub`], which masks the password of any URL in it.

use overseer_core::secret::scrub;

/// The most characters a reason taken from outside keeps: enough for a sentence
/// and a URL, short enough for a dashboard card and a log line.
pub(crate) const MAX_REASON_CHARS: usize = 240;

/// The first line of `output` that holds anything but white space, as a reason;
/// `None` when there is none.
pub(crate) fn first_line(output: &[u8]) -> Option<String> {
    String::from_utf8_lossy(output)
        .lines()
        .map(one_line)
        .find(|line| !line.is_empty())
}

/// `text` as one reason: control characters dropped, white space trimmed,
/// bounded, URL credentials masked.
pub(crate) fn one_line(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let clean = clean.trim();
    let bounded = match clean.char_indices().nth(MAX_REASON_CHARS) {
        Some((end, _)) => format!("{}…", clean[..end].trim_end()),
        None => clean.to_owned(),
    };
    scrub(&bounded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_with_something_on_it_is_the_reason() {
        assert_eq!(
            first_line(b"\n  \n  queue stuck\r\nsecond line\n").as_deref(),
            Some("queue stuck")
        );
        assert_eq!(first_line(b" \n\t\n"), None);
        assert_eq!(first_line(b""), None);
        // Not UTF-8: replaced, never refused.
        assert_eq!(
            first_line(b"bad \xff byte").as_deref(),
            Some("bad \u{fffd} byte")
        );
    }

    #[test]
    fn a_reason_is_one_bounded_line_without_credentials() {
        assert_eq!(one_line("\x1b[31mred\x1b[0m"), "[31mred [0m");
        assert_eq!(
            one_line("cannot reach redis://:hunter2@broker:6379/0"),
            "cannot reach redis://:***@broker:6379/0"
        );
        let long = "x".repeat(1000);
        let reason = one_line(&long);
        assert_eq!(reason.chars().count(), MAX_REASON_CHARS + 1);
        assert!(reason.ends_with('…'));
        // Multi-byte characters are cut on a character boundary.
        assert_eq!(
            one_line(&"é".repeat(300)).chars().count(),
            MAX_REASON_CHARS + 1
        );
    }
}
