//! Times as Airflow's JSON writes them: the one formatter the report, the
//! detail and the history serialise with.

use chrono::{DateTime, Utc};

/// A timestamp as Python's `datetime.isoformat()` writes an aware UTC one, which is
/// what Airflow's JSON carries: `2026-11-29T19:48:48.365305+00:00`, and no
/// fraction at all when the microseconds are zero.
///
/// Written field by field: a report of 50,000 instances writes several of these
/// each, and chrono's `format` parses its pattern again at every call (it was
/// an eighth of the actors' thread at that size).
pub fn airflow_timestamp(at: DateTime<Utc>) -> String {
    use chrono::{Datelike, Timelike};
    use std::fmt::Write;
    let (date, time) = (at.date_naive(), at.time());
    let mut text = String::with_capacity(32);
    let _ = write!(
        text,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        date.year(),
        date.month(),
        date.day(),
        time.hour(),
        time.minute(),
        time.second()
    );
    let micros = at.timestamp_subsec_micros();
    if micros != 0 {
        let _ = write!(text, ".{micros:06}");
    }
    text.push_str("+00:00");
    text
}
