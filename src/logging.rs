//! Logging: `tracing` to stderr, filtered by `RUST_LOG` (or `OVERSEER_LOG`).
//!
//! What an operator reads at the default level is Overseer's own account: one
//! line when the service starts or stops, one line when an executor's verdict
//! changes state (`WARN` when it turns unhealthy, with the reason; `INFO` when it
//! is healthy again), one line per database outage. Nothing is written per poll
//! or per request.
//!
//! Two libraries say, at their own level, what that account already says or what
//! is no fault of this service; [`Demote`] writes their lines at `DEBUG` instead:
//!
//! | target | lines | why they are `DEBUG` here |
//! | --- | --- | --- |
//! | `lapin` (the AMQP client) | `INFO` and above | a broker's refusals and dropped connections, three `ERROR` lines per poll for a bad password; the verdict names the broker and the reason once per change |
//! | `actix_http::h1::dispatcher` | `ERROR` `stream error: ...` | a client sent a malformed request (it got its `400`) or dropped its connection: the client's mistake |
//!
//! A demoted line keeps its text, and its library's name as target (`lapin`,
//! `actix_http::h1::dispatcher`), so `OVERSEER_LOG=info,lapin=debug` shows those
//! again (as `DEBUG`); `OVERSEER_LOG=debug` shows everything.

use std::fmt::Write as _;
use std::io::IsTerminal;

use clap::ValueEnum;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

mod scrubbed;
pub use scrubbed::register as register_secrets;

/// What is logged when neither `OVERSEER_LOG` nor `RUST_LOG` says otherwise:
/// Overseer's own events, and only warnings from the database drivers.
pub const DEFAULT_FILTER: &str = "info,sqlx=warn,sea_orm=warn,sea_orm_migration=warn";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Plain,
    /// One JSON object per event, for log shippers.
    Json,
}

/// Installs the global subscriber. Call once, early.
pub fn init(format: LogFormat) {
    let filter = std::env::var("OVERSEER_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .ok()
        .and_then(|directives| EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(scrubbed::ScrubbedStderr)
        .with_ansi(std::io::stderr().is_terminal());
    // `Demote` is the outermost layer: it sees an event before the filter and the
    // writer do, and the line it writes instead goes through both.
    match format {
        LogFormat::Plain => builder.finish().with(Demote).init(),
        LogFormat::Json => builder.json().finish().with(Demote).init(),
    }
}

/// The AMQP client's target, and every module under it.
const LAPIN: &str = "lapin";

/// Where actix-http logs a connection it dropped.
const ACTIX_DISPATCHER: &str = "actix_http::h1::dispatcher";

/// How actix-http begins the line for a request it could not parse or a
/// connection the client broke (`stream error: request parse error: ...`).
const CLIENT_MISTAKE: &str = "stream error: ";

/// Which library a demoted line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Demoted {
    Lapin,
    ActixDispatcher,
}

/// Whether an event is one of the table's (see the module doc), from what its
/// callsite says; a dispatcher line is demoted only if its text is a client's mistake.
fn demoted(target: &str, level: Level) -> Option<Demoted> {
    if (target == LAPIN || target.starts_with("lapin::")) && level <= Level::INFO {
        Some(Demoted::Lapin)
    } else if target == ACTIX_DISPATCHER && level == Level::ERROR {
        Some(Demoted::ActixDispatcher)
    } else {
        None
    }
}

/// Writes the lines of the module doc's table at `DEBUG`, with their target and
/// text, and drops the originals.
struct Demote;

impl<S: Subscriber> Layer<S> for Demote {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        let metadata = event.metadata();
        let Some(library) = demoted(metadata.target(), *metadata.level()) else {
            return true;
        };
        let mut text = Text::default();
        event.record(&mut text);
        let line = text.line();
        // The global dispatcher takes a nested event (the scoped one, in tests,
        // would drop it): the line below goes through the filter as any other.
        match library {
            Demoted::Lapin => tracing::debug!(target: "lapin", "{line}"),
            Demoted::ActixDispatcher if line.starts_with(CLIENT_MISTAKE) => {
                tracing::debug!(target: "actix_http::h1::dispatcher", "{line}");
            }
            Demoted::ActixDispatcher => return true,
        }
        false
    }
}

/// An event's message and fields as one line of text: `message key=value ...`.
#[derive(Debug, Default)]
struct Text {
    message: String,
    fields: String,
}

impl Text {
    fn line(self) -> String {
        match (self.message.is_empty(), self.fields.is_empty()) {
            (_, true) => self.message,
            (true, false) => self.fields,
            (false, false) => format!("{} {}", self.message, self.fields),
        }
    }
}

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            if !self.fields.is_empty() {
                self.fields.push(' ');
            }
            let _ = write!(self.fields, "{}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_lapin_at_info_and_above_and_the_dispatchers_errors() {
        assert_eq!(
            demoted("lapin::channels", Level::ERROR),
            Some(Demoted::Lapin)
        );
        assert_eq!(demoted("lapin", Level::INFO), Some(Demoted::Lapin));
        assert_eq!(demoted("lapin::io_loop", Level::DEBUG), None);
        assert_eq!(demoted("lapinx", Level::ERROR), None);
        assert_eq!(
            demoted(ACTIX_DISPATCHER, Level::ERROR),
            Some(Demoted::ActixDispatcher)
        );
        assert_eq!(demoted(ACTIX_DISPATCHER, Level::WARN), None);
        assert_eq!(demoted("actix_http::h2::dispatcher", Level::ERROR), None);
        assert_eq!(
            demoted("overseer_core::actors::supervisor", Level::WARN),
            None
        );
    }

    #[test]
    fn a_demoted_line_keeps_the_message_first_and_every_field() {
        let text = Text {
            message: "Connection error".into(),
            fields: "error=protocol error".into(),
        };
        assert_eq!(text.line(), "Connection error error=protocol error");
        let bare = Text {
            message: String::new(),
            fields: "channel=0".into(),
        };
        assert_eq!(bare.line(), "channel=0");
    }
}
