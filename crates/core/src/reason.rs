//! The one rule for a verdict's reason, whichever check gives it (Celery,
//! Edge, a command, a URL): one line, a bounded length, no credential.
//!
//! A reason is someone else's text as often as ours: a probe's output, a
//! server's status line, a worker's or a queue's name read from a table any
//! client can write. It is written to `job.executor_health_reason`, shown in
//! the report's JSON and on the dashboard, and logged, so:
//!
//! | what | the rule | why |
//! | --- | --- | --- |
//! | credentials | every URL's password masked ([`crate::secret::scrub`]), and the secrets a check knows ([`Scrubber`]); **before** the text is cut | a cut through a password would leave a prefix no scrubber recognises |
//! | control characters (`\n`, `\r`, `\t`, `\x1b`, DEL, C1), line and paragraph separators (U+2028, U+2029), bidirectional overrides | each run becomes one space (none beside a space already there); white space at either end is trimmed | a newline forges a log line in the plain log format; an escape recolours a terminal; an override reverses what an operator reads |
//! | length | at most [`MAX_CHARS`] characters, the last one `…` when cut | see below |
//! | lists of names | at most [`MAX_NAMED`] items and [`MAX_LIST_CHARS`] characters, each item of several at most [`MAX_ITEM_CHARS`], then `and N more` ([`list`]); a list of one keeps it whole | the count survives the cut; one broker's long error is not cut short |
//!
//! # The cap
//! The column is `TEXT` on every backend. PostgreSQL's and SQLite's hold a
//! gigabyte; MariaDB's and MySQL's hold [`MARIADB_TEXT_BYTES`] **bytes** and cut
//! anything longer without an error under a non-strict `sql_mode`, while the
//! JSON would go on showing the whole. The smallest limit is MariaDB's, so
//! the cap is counted so that it holds in bytes: [`MAX_CHARS`] characters of
//! at most 4 bytes each in UTF-8 (`…` included) are at most 960 bytes, far
//! inside 65,535 (checked at compile time). 240 characters is also what a
//! dashboard card and a log line can show: a sentence and a URL. One cap for
//! the column, the JSON and the logs, so all three say the same.
//!
//! # One type, cleaned where it is made
//! A verdict's reason is a [`Reason`], and a [`Reason`] can only be made by
//! this rule: [`Reason::new`] (or `From<&str>`/`From<String>`) for text that
//! holds no secret of a check's own, [`Reason::scrubbed`] where the check
//! knows its secrets (a command's token argument, a password given apart
//! from its URL). From there the reason stays typed through the actors,
//! the row writer and the report; it becomes a string only in the column and
//! the JSON. Nothing downstream cleans it again, because nothing downstream
//! can hold an unclean one.
//!
//! Every function here is idempotent: a sanitised text sanitised again is
//! unchanged (a reason read back from its column is the same reason).

use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize};

use crate::secret::Scrubber;

/// The most characters a reason has, the `…` of a cut included.
pub const MAX_CHARS: usize = 240;

/// What MariaDB's and MySQL's `TEXT` hold, in bytes: the smallest limit of
/// the `executor_health_reason` column over the supported backends.
pub const MARIADB_TEXT_BYTES: usize = 65_535;

/// The most bytes a character takes in UTF-8.
const MAX_UTF8_BYTES: usize = 4;

// A reason of [`MAX_CHARS`] characters always fits MariaDB's column.
const _: () = assert!(MAX_CHARS * MAX_UTF8_BYTES <= MARIADB_TEXT_BYTES);

/// The most items a [`list`] names before `and N more`: enough to see a
/// pattern, few enough that the rest of the reason still shows.
pub const MAX_NAMED: usize = 5;

/// The most characters a [`list`] takes before `and N more` (about half a
/// reason), so a reason with a list still has room for what the list is
/// about; two items of [`MAX_ITEM_CHARS`] fit.
pub const MAX_LIST_CHARS: usize = 128;

/// The most characters one item of a [`list`] keeps.
pub const MAX_ITEM_CHARS: usize = 60;

/// The most characters a name (a worker, a queue) keeps inside a reason
/// ([`name`]): a Celery worker's `celery@host` or a queue name fits; a name
/// of kilobytes does not crowd out everything else.
pub const MAX_NAME_CHARS: usize = 40;

/// What ends a cut text.
pub const ELLIPSIS: char = '…';

/// A verdict's reason (or a healthy verdict's note): one line, at most
/// [`MAX_CHARS`] characters, no credential. It can only be made sanitised,
/// so whoever holds one may show it, log it and store it as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Reason(String);

impl Reason {
    /// `text` as a reason: URL credentials masked, one line, capped.
    pub fn new(text: &str) -> Self {
        Self(sanitise(text))
    }

    /// `text` as a reason, also masking what `scrubber` knows (a command's
    /// token arguments, a broker's password given apart from its URL).
    pub fn scrubbed(scrubber: &Scrubber, text: &str) -> Self {
        Self(sanitise_with(scrubber, text))
    }

    /// The reason's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The reason's text, owned: for the column and the JSON.
    pub fn into_string(self) -> String {
        self.0
    }

    /// This reason, then `more` after `separator`, within the cap: a check's
    /// cause with the rules' findings beside it.
    #[must_use]
    pub fn join(&self, separator: &str, more: &str) -> Self {
        Self::new(&format!("{}{separator}{more}", self.0))
    }
}

impl Deref for Reason {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Reason {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Reason {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl From<&String> for Reason {
    fn from(text: &String) -> Self {
        Self::new(text)
    }
}

impl From<String> for Reason {
    fn from(text: String) -> Self {
        Self::new(&text)
    }
}

impl From<Reason> for String {
    fn from(reason: Reason) -> Self {
        reason.0
    }
}

impl PartialEq<str> for Reason {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for Reason {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<Reason> for str {
    fn eq(&self, other: &Reason) -> bool {
        self == other.0
    }
}

impl PartialEq<Reason> for &str {
    fn eq(&self, other: &Reason) -> bool {
        *self == other.0
    }
}

impl<'de> Deserialize<'de> for Reason {
    /// Read text is someone else's: sanitised as any other.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::from)
    }
}

/// `text` as a reason: URL credentials masked, one line, at most [`MAX_CHARS`].
pub fn sanitise(text: &str) -> String {
    sanitise_with(&Scrubber::default(), text)
}

/// `text` as a reason, also masking what `scrubber` knows (a command's token
/// arguments, a broker's password given apart from its URL).
pub fn sanitise_with(scrubber: &Scrubber, text: &str) -> String {
    clip_with(scrubber, text, MAX_CHARS)
}

/// `text` as part of a reason: credentials masked, one line, at most
/// `max_chars` characters (the last one `…` when cut).
pub fn clip(text: &str, max_chars: usize) -> String {
    clip_with(&Scrubber::default(), text, max_chars)
}

/// A name (a worker's, a queue's) inside a reason: [`clip`] to [`MAX_NAME_CHARS`].
pub fn name(text: &str) -> String {
    clip(text, MAX_NAME_CHARS)
}

/// Items separated by `, `: at most [`MAX_NAMED`] of them in at most
/// [`MAX_LIST_CHARS`] characters (the first always), each cut to
/// [`MAX_ITEM_CHARS`], then `, and N more`. A list of one item is that item,
/// one line, uncut: the reason's own cap is its bound.
pub fn list<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    list_with(items, ", ")
}

/// [`list`] with another separator (`; ` between sentences).
pub fn list_with<S: AsRef<str>>(items: impl IntoIterator<Item = S>, separator: &str) -> String {
    let items: Vec<S> = items.into_iter().collect();
    if let [only] = items.as_slice() {
        return clip(only.as_ref(), usize::MAX);
    }
    let mut shown = String::new();
    let (mut named, mut chars, mut more) = (0, 0, 0usize);
    for item in items {
        if more > 0 || named == MAX_NAMED {
            more += 1;
            continue;
        }
        let item = clip(item.as_ref(), MAX_ITEM_CHARS);
        let width = item.chars().count() + if named > 0 { separator.len() } else { 0 };
        if named > 0 && chars + width > MAX_LIST_CHARS {
            more += 1;
            continue;
        }
        if named > 0 {
            shown.push_str(separator);
        }
        shown.push_str(&item);
        named += 1;
        chars += width;
    }
    if more > 0 {
        shown.push_str(&format!("{separator}and {more} more"));
    }
    shown
}

/// The first line of `output` (a probe's, lossily UTF-8) that holds anything
/// once sanitised, as it is: the caller sanitises it with the scrubber it
/// knows. `None` when there is none.
pub fn first_line(output: &[u8]) -> Option<String> {
    String::from_utf8_lossy(output)
        .lines()
        .find(|line| !one_line(line).is_empty())
        .map(str::to_owned)
}

/// Whether `c` may not appear in a reason: a control character (C0, DEL, C1:
/// `\n`, `\r`, `\t`, `\x1b`, ...), a line or paragraph separator, or a
/// bidirectional embedding, override or isolate.
fn forbidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every run of [`forbidden`] characters replaced by one space
/// (none beside white space already there), trimmed.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(4 * MAX_CHARS));
    let mut gap = false;
    for c in text.chars() {
        if forbidden(c) {
            gap = true;
            continue;
        }
        if gap && !c.is_whitespace() && !out.ends_with(char::is_whitespace) && !out.is_empty() {
            out.push(' ');
        }
        gap = false;
        out.push(c);
    }
    out.trim().to_owned()
}

fn clip_with(scrubber: &Scrubber, text: &str, max_chars: usize) -> String {
    let clean = one_line(&scrubber.scrub(text));
    match clean.char_indices().nth(max_chars) {
        None => clean,
        Some(_) => {
            // Room for the ellipsis: the cut text is `max_chars` long in all.
            let end = clean
                .char_indices()
                .nth(max_chars.saturating_sub(1))
                .map_or(clean.len(), |(end, _)| end);
            let mut cut = clean[..end].trim_end().to_owned();
            cut.push(ELLIPSIS);
            cut
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_one_line_whatever_it_was_given() {
        let cases = [
            ("plain", "plain"),
            ("two\nlines", "two lines"),
            ("windows\r\nline", "windows line"),
            ("a\ttab", "a tab"),
            ("\x1b[31mred\x1b[0m", "[31mred [0m"),
            ("bell\x07 and del\x7f", "bell and del"),
            ("c1\u{85}next line", "c1 next line"),
            ("unicode\u{2028}line\u{2029}para", "unicode line para"),
            ("bidi \u{202e}desrever\u{202c} text", "bidi desrever text"),
            ("isolate\u{2066}x\u{2069}", "isolate x"),
            ("  \n trimmed \r\n ", "trimmed"),
            ("\n\n\n", ""),
            ("", ""),
            (
                "forged\n2026-12-01T00:00:00Z  INFO all good",
                "forged 2026-12-01T00:00:00Z  INFO all good",
            ),
            ("ünïcödé 名前", "ünïcödé 名前"),
        ];
        for (given, expected) in cases {
            assert_eq!(sanitise(given), expected, "{given:?}");
        }
    }

    #[test]
    fn a_reason_is_cut_at_the_cap_on_a_character_boundary() {
        let exact = "x".repeat(MAX_CHARS);
        assert_eq!(sanitise(&exact), exact, "exactly the cap is not cut");
        let over = "x".repeat(MAX_CHARS + 1);
        let cut = sanitise(&over);
        assert_eq!(cut.chars().count(), MAX_CHARS);
        assert_eq!(cut, format!("{}…", "x".repeat(MAX_CHARS - 1)));
        // Multi-byte characters (2, 3 and 4 bytes), the cut falling on each.
        for wide in ["é", "名", "🦀"] {
            for pad in 0..3 {
                let text = format!("{}{}", "x".repeat(pad), wide.repeat(MAX_CHARS + 1));
                let cut = sanitise(&text);
                assert_eq!(cut.chars().count(), MAX_CHARS, "{wide} after {pad}");
                assert!(cut.ends_with(ELLIPSIS));
                assert!(cut.len() <= MAX_CHARS * 4, "{} bytes", cut.len());
            }
        }
        // The worst case in bytes fits MariaDB's TEXT with room to spare.
        let widest = sanitise(&"🦀".repeat(100_000));
        assert!(widest.len() <= MARIADB_TEXT_BYTES, "{}", widest.len());
        // White space before the cut is not kept before the ellipsis.
        let spaced = format!("{} {}", "x".repeat(MAX_CHARS - 2), "y".repeat(10));
        assert_eq!(sanitise(&spaced), format!("{}…", "x".repeat(MAX_CHARS - 2)));
    }

    #[test]
    fn credentials_are_masked_before_the_cut() {
        assert_eq!(
            sanitise("cannot reach redis://:hunter2@broker:6379/0"),
            "cannot reach redis://:***@broker:6379/0"
        );
        let token = "s3cretTOKENvalue";
        let scrubber = Scrubber::default().with_secret(token);
        // The cut would fall inside the token: what is left of it is masked too.
        let text = format!("{} {token} tail", "x".repeat(MAX_CHARS - 8));
        let reason = sanitise_with(&scrubber, &text);
        assert!(!reason.contains("s3cr"), "{reason}");
        let url = format!(
            "{} redis://:hunter2@broker:6379/0",
            "x".repeat(MAX_CHARS - 12)
        );
        assert!(!sanitise(&url).contains("hunt"));
    }

    #[test]
    fn sanitising_twice_changes_nothing() {
        for text in [
            "x".repeat(1000),
            "名\n".repeat(500),
            "redis://:hunter2@b:6379/0 down".to_owned(),
            format!("{}\u{1b}tail", "é".repeat(MAX_CHARS)),
        ] {
            let once = sanitise(&text);
            assert_eq!(sanitise(&once), once);
        }
    }

    #[test]
    fn a_long_list_names_a_few_then_counts_the_rest() {
        assert_eq!(list(["a", "b", "c"]), "a, b, c");
        assert_eq!(list(Vec::<String>::new()), "");
        assert_eq!(
            list(["w1", "w2", "w3", "w4", "w5", "w6", "w7"]),
            "w1, w2, w3, w4, w5, and 2 more"
        );
        assert_eq!(list_with(["x", "y"], "; "), "x; y");
        // Huge names with newlines: each cut, the list cut by length, counted.
        let huge: Vec<String> = (0..10)
            .map(|i| format!("worker{i}\n{}", "z".repeat(10_000)))
            .collect();
        let shown = list(&huge);
        assert!(!shown.contains('\n'));
        assert!(shown.chars().count() <= MAX_LIST_CHARS + ", and 10 more".len());
        assert!(shown.starts_with("worker0 zzz"), "{shown}");
        assert!(shown.ends_with(", and 8 more"), "{shown}");
        // The first item is always named, however long; alone, it is whole.
        let first = list(["q".repeat(500), "r".repeat(500), "s".repeat(500)]);
        let cut = |c: &str| format!("{}…", c.repeat(MAX_ITEM_CHARS - 1));
        assert_eq!(first, format!("{}, {}, and 1 more", cut("q"), cut("r")));
        let one = list([format!("{}\n", "q".repeat(500))]);
        assert_eq!(one, "q".repeat(500));
    }

    #[test]
    fn a_name_is_one_short_line() {
        assert_eq!(name("celery@host-1"), "celery@host-1");
        let long = name(&format!("new\nline{}", "n".repeat(100)));
        assert_eq!(long.chars().count(), MAX_NAME_CHARS);
        assert!(long.starts_with("new line"));
    }

    #[test]
    fn the_first_line_with_something_on_it_is_kept_whole() {
        assert_eq!(
            first_line(b"\n  \n\x1b\x07\n  queue stuck\r\nsecond line\n").as_deref(),
            Some("  queue stuck")
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
    fn a_reason_can_only_be_made_sanitised_wherever_it_comes_from() {
        use crate::detail::Observation;
        use crate::job::ExecutorHealth;
        let hostile = format!("a\nb {}", "c".repeat(1000));
        let ExecutorHealth::Unhealthy { reason } = ExecutorHealth::unhealthy(&hostile) else {
            panic!("still unhealthy");
        };
        assert!(reason.starts_with("a b ccc") && reason.chars().count() == MAX_CHARS);
        assert_eq!(ExecutorHealth::unknown("x\ny").reason(), Some("x y"));
        let observed = Observation::from(ExecutorHealth::Healthy).with_note(hostile.clone());
        assert_eq!(observed.note.unwrap().chars().count(), MAX_CHARS);
        // Read back (a report, a row another writer left): sanitised as it enters.
        let read: Reason = serde_json::from_str("\"one\\ntwo\"").unwrap();
        assert_eq!(read, "one two");
        // A credential in a URL never survives.
        let url = Reason::new("broker redis://:hunter2@h:6379/0 refused");
        assert!(!url.contains("hunter2"), "{url}");
        // Joined to more, still within the cap.
        let joined = Reason::new(&"x".repeat(200)).join("; ", &"y".repeat(200));
        assert_eq!(joined.chars().count(), MAX_CHARS);
        assert!(joined.starts_with("xxx") && joined.ends_with(ELLIPSIS));
    }

    #[test]
    fn a_check_s_own_secret_is_masked_before_the_cut_not_after() {
        let secret = "s3cr3t-token-value";
        let scrubber = Scrubber::default().with_secret(secret);
        // The secret straddles the cap: a cut first would leave `s3cr3t-`.
        let text = format!("{} {secret} and more", "x".repeat(MAX_CHARS - 10));
        let made = Reason::scrubbed(&scrubber, &text);
        assert!(!made.contains("s3cr"), "{made}");
        assert!(made.chars().count() <= MAX_CHARS && made.ends_with(ELLIPSIS));
    }
}
