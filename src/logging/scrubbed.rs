//! The log writer that masks secrets: the last line of defence.
//!
//! Overseer's own lines never carry a credential, but a dependency's may (the
//! database driver traces its connect options, URL and password included). So
//! every formatted line, plain or JSON, at any level, passes through a
//! [`Scrubber`] before it reaches stderr: every URL's credentials are masked,
//! and so is every configured secret wherever it appears bare
//! ([`register`], called once the configuration has loaded).

use std::io::{self, Write};
use std::sync::RwLock;

use overseer_core::secret::Scrubber;
#[cfg(test)]
use overseer_core::secret::SecretUrl;
use tracing_subscriber::fmt::MakeWriter;

/// The secrets of the loaded configuration. A `RwLock`, not a `OnceLock`:
/// tests and embedders may load more than one configuration in a process.
static SCRUBBER: RwLock<Option<Scrubber>> = RwLock::new(None);

/// Masks what `scrubber` knows in every log line from now on.
pub fn register(scrubber: Scrubber) {
    *SCRUBBER.write().unwrap_or_else(|p| p.into_inner()) = Some(scrubber);
}

/// Makes one [`ScrubbedLine`] per event.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScrubbedStderr;

impl<'a> MakeWriter<'a> for ScrubbedStderr {
    type Writer = ScrubbedLine;

    fn make_writer(&'a self) -> Self::Writer {
        ScrubbedLine(Vec::with_capacity(256))
    }
}

/// One event's text, held until the formatter is done with it, then scrubbed and
/// written to stderr in one call (so lines of several threads never interleave).
pub struct ScrubbedLine(Vec<u8>);

impl Write for ScrubbedLine {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for ScrubbedLine {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.0);
        let scrubbed = match &*SCRUBBER.read().unwrap_or_else(|p| p.into_inner()) {
            Some(scrubber) => scrubber.scrub(&text),
            None => overseer_core::secret::scrub(&text),
        };
        // Nowhere to report a failed write to stderr.
        let _ = io::stderr().lock().write_all(scrubbed.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_quoting_a_configured_password_bare_is_masked() {
        register(Scrubber::default().with_url(&SecretUrl::new("postgres://u:Pg%40Secret@h/db")));
        let scrubber = SCRUBBER.read().unwrap().clone().unwrap();
        assert_eq!(
            scrubber.scrub(
                r#"ConnectOptions { url: "postgres://u:Pg%40Secret@h/db", password: "Pg@Secret" }"#
            ),
            r#"ConnectOptions { url: "postgres://u:***@h/db", password: "***" }"#
        );
    }
}
