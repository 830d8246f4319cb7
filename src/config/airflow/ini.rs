//! `airflow.cfg` read as Airflow reads it: Python's `configparser.ConfigParser`
//! with its defaults (strict, `=` or `:` between key and value, `#` and `;`
//! comment lines, indented continuation lines, a `[DEFAULT]` section every
//! section sees) and `BasicInterpolation` (`%%` is `%`, `%(key)s` another
//! option of the section), keys case-preserving as Airflow's parser keeps them.
//!
//! Lines end as Python's text files end them (universal newlines): `\n`,
//! `\r\n`, or a lone `\r` (a file written on classic Mac OS, or by a tool
//! that writes `\r` alone: Python reads it, and so must this).
//!
//! Errors name the line, never the value on it: a line of `airflow.cfg` may
//! hold a password.

use std::collections::BTreeMap;

/// The section every other section inherits options from.
const DEFAULT_SECTION: &str = "DEFAULT";
/// How deep `%(key)s` may nest, as `configparser.MAX_INTERPOLATION_DEPTH`.
const MAX_INTERPOLATION_DEPTH: usize = 10;
/// How long a value may grow by `%(key)s` references. Depth alone does not
/// bound it: ten levels of options that each name twelve others is 12^10
/// expansions, which Python would grind through for hours. No Airflow
/// option comes near this.
const MAX_INTERPOLATED: usize = 64 * 1024;

/// A parsed `airflow.cfg`: sections of raw (not yet interpolated) values.
#[derive(Debug, Default, Clone)]
pub struct Ini {
    sections: BTreeMap<String, BTreeMap<String, String>>,
    defaults: BTreeMap<String, String>,
}

/// An option being read: its key and the lines of its value so far.
struct Open {
    section: String,
    key: String,
    indent: usize,
    lines: Vec<String>,
}

impl Ini {
    /// Parses the text of a file; an error is one line naming the line number.
    pub fn parse(text: &str) -> Result<Self, String> {
        // Universal newlines, as Python's `open` in text mode.
        let text = if text.contains('\r') {
            std::borrow::Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n"))
        } else {
            std::borrow::Cow::Borrowed(text)
        };
        let mut ini = Self::default();
        let mut section: Option<String> = None;
        let mut open: Option<Open> = None;
        for (index, raw) in text.lines().enumerate() {
            let number = index + 1;
            let line = raw.trim_end_matches('\r');
            let stripped = line.trim();
            let comment = stripped.starts_with('#') || stripped.starts_with(';');
            if comment {
                continue;
            }
            let indent = line.len() - line.trim_start().len();
            if stripped.is_empty() {
                // Blank lines may belong to a multi-line value (trimmed at its end).
                if let Some(open) = &mut open {
                    open.lines.push(String::new());
                }
                continue;
            }
            if let Some(current) = &mut open
                && indent > current.indent
            {
                current.lines.push(stripped.to_owned());
                continue;
            }
            if let Some(done) = open.take() {
                ini.close(done);
            }
            if let Some(header) = section_header(stripped) {
                if header == DEFAULT_SECTION {
                    section = Some(header);
                    continue;
                }
                if ini.sections.contains_key(&header) {
                    return Err(format!("line {number}: section [{header}] appears twice"));
                }
                ini.sections.insert(header.clone(), BTreeMap::new());
                section = Some(header);
                continue;
            }
            let Some(current) = &section else {
                return Err(format!(
                    "line {number}: an option before any [section] header"
                ));
            };
            let Some((key, value)) = split_option(stripped) else {
                return Err(format!(
                    "line {number}: neither a [section], an option (key = value) nor a comment"
                ));
            };
            if key.is_empty() {
                return Err(format!(
                    "line {number}: an option with no name before its '='"
                ));
            }
            let exists = if current == DEFAULT_SECTION {
                ini.defaults.contains_key(key)
            } else {
                ini.sections[current].contains_key(key)
            };
            if exists {
                return Err(format!(
                    "line {number}: option {key:?} appears twice in section [{current}]"
                ));
            }
            // Reserve the key now, so that a duplicate is found even before it closes.
            ini.insert(current, key, String::new());
            open = Some(Open {
                section: current.clone(),
                key: key.to_owned(),
                indent,
                lines: vec![value.to_owned()],
            });
        }
        if let Some(done) = open.take() {
            ini.close(done);
        }
        Ok(ini)
    }

    fn close(&mut self, mut open: Open) {
        while open.lines.last().is_some_and(String::is_empty) && open.lines.len() > 1 {
            open.lines.pop();
        }
        let value = open.lines.join("\n");
        self.insert(&open.section, &open.key, value);
    }

    fn insert(&mut self, section: &str, key: &str, value: String) {
        if section == DEFAULT_SECTION {
            self.defaults.insert(key.to_owned(), value);
        } else if let Some(options) = self.sections.get_mut(section) {
            options.insert(key.to_owned(), value);
        }
    }

    /// Whether `[section]` has `key`, as `ConfigParser.has_option`: the section
    /// must exist, and `[DEFAULT]`'s options count in it.
    pub fn has_option(&self, section: &str, key: &str) -> bool {
        self.sections
            .get(section)
            .is_some_and(|options| options.contains_key(key) || self.defaults.contains_key(key))
    }

    /// The value of `key` in `section`, interpolated; `None` when the option is
    /// not there. An interpolation error names the option, not its value.
    pub fn get(&self, section: &str, key: &str) -> Option<Result<String, String>> {
        let raw = self.raw(section, key)?;
        Some(self.interpolate(section, key, raw, 1))
    }

    fn raw(&self, section: &str, key: &str) -> Option<&str> {
        let options = self.sections.get(section)?;
        options
            .get(key)
            .or_else(|| self.defaults.get(key))
            .map(String::as_str)
    }

    /// `BasicInterpolation.before_get`: `%%` and `%(key)s`, nested at most
    /// [`MAX_INTERPOLATION_DEPTH`] deep.
    fn interpolate(
        &self,
        section: &str,
        key: &str,
        raw: &str,
        depth: usize,
    ) -> Result<String, String> {
        if depth > MAX_INTERPOLATION_DEPTH {
            return Err(format!(
                "[{section}] {key}: '%(...)s' references nest more than {MAX_INTERPOLATION_DEPTH} deep"
            ));
        }
        let mut out = String::with_capacity(raw.len());
        let mut rest = raw;
        while let Some(at) = rest.find('%') {
            out.push_str(&rest[..at]);
            rest = &rest[at..];
            match rest.as_bytes().get(1) {
                Some(b'%') => {
                    out.push('%');
                    rest = &rest[2..];
                }
                Some(b'(') => {
                    let reference = rest[2..]
                        .find(")s")
                        .map(|end| &rest[2..2 + end])
                        .filter(|name| !name.is_empty() && !name.contains(')'));
                    let Some(name) = reference else {
                        return Err(format!(
                            "[{section}] {key}: a '%(' that is not a '%(key)s' reference (write a literal % as %%)"
                        ));
                    };
                    let Some(value) = self.raw(section, name) else {
                        return Err(format!(
                            "[{section}] {key}: '%({name})s' names no option of [{section}] (write a literal % as %%)"
                        ));
                    };
                    // As Python: a value without '%' is taken as it is, at
                    // any depth; only one with references goes a level down.
                    if value.contains('%') {
                        out.push_str(&self.interpolate(section, name, value, depth + 1)?);
                    } else {
                        out.push_str(value);
                    }
                    if out.len() > MAX_INTERPOLATED {
                        return Err(format!(
                            "[{section}] {key}: '%(...)s' references make it longer than {} KiB",
                            MAX_INTERPOLATED / 1024
                        ));
                    }
                    rest = &rest[2 + name.len() + 2..];
                }
                _ => {
                    return Err(format!(
                        "[{section}] {key}: '%' must be followed by '%' or '(' (write a literal % as %%)"
                    ));
                }
            }
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// `[name]` as `ConfigParser.SECTCRE` matches it (the last `]` closes it).
fn section_header(line: &str) -> Option<String> {
    let inner = line.strip_prefix('[')?;
    let end = inner.rfind(']')?;
    let name = &inner[..end];
    (!name.is_empty()).then(|| name.to_owned())
}

/// `key = value` or `key: value`, split at the first `=` or `:`, both sides trimmed.
fn split_option(line: &str) -> Option<(&str, &str)> {
    let at = line.find(['=', ':'])?;
    Some((line[..at].trim(), line[at + 1..].trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_read_as_pythons_configparser_reads_them() {
        let ini = Ini::parse(
            "# Airflow\n\
             [DEFAULT]\n\
             host = db.internal\n\
             \n\
             [core]\n\
             executor = CeleryExecutor\n\
             ; a comment\n\
             empty =\n\
             colon: value: with colon\n\
             CaseKept = yes\n\
             [database]\n\
             sql_alchemy_conn = postgresql://airflow:p%%40ss@%(host)s/airflow\n\
             multi = first\n\
             \x20   second\n\
             \n\
             \x20   third\n\
             \n\
             [celery] # not a comment, part of the header line\n\
             broker_url=redis://x:6379/0\n",
        )
        .unwrap();
        let get = |s: &str, k: &str| ini.get(s, k).map(Result::unwrap);
        assert_eq!(get("core", "executor").as_deref(), Some("CeleryExecutor"));
        assert_eq!(get("core", "empty").as_deref(), Some(""));
        assert_eq!(get("core", "colon").as_deref(), Some("value: with colon"));
        assert_eq!(get("core", "CaseKept").as_deref(), Some("yes"));
        assert_eq!(get("core", "casekept"), None);
        assert_eq!(
            get("database", "sql_alchemy_conn").as_deref(),
            Some("postgresql://airflow:p%40ss@db.internal/airflow")
        );
        assert_eq!(
            get("database", "multi").as_deref(),
            Some("first\nsecond\n\nthird")
        );
        assert_eq!(
            get("celery", "broker_url").as_deref(),
            Some("redis://x:6379/0")
        );
        // [DEFAULT] is seen by every section that exists, and is no section itself.
        assert_eq!(get("celery", "host").as_deref(), Some("db.internal"));
        assert!(!ini.has_option("nosuch", "host"));
        assert!(ini.has_option("core", "host"));
    }

    #[test]
    fn malformed_files_say_which_line_and_never_its_value() {
        for (text, problem) in [
            (
                "executor = x\n",
                "line 1: an option before any [section] header",
            ),
            (
                "[core]\nexecutor = a\nexecutor = b\n",
                "line 3: option \"executor\" appears twice in section [core]",
            ),
            ("[core]\n[core]\n", "line 2: section [core] appears twice"),
            (
                "[core]\nhunter2\n",
                "line 2: neither a [section], an option (key = value) nor a comment",
            ),
            (
                "[core]\n= value\n",
                "line 2: an option with no name before its '='",
            ),
        ] {
            assert_eq!(Ini::parse(text).unwrap_err(), problem, "{text:?}");
        }
    }

    /// Python reads a file whose lines end in a lone `\r` (universal
    /// newlines): so does this, instead of reading one long line.
    #[test]
    fn lines_end_at_cr_lf_or_a_lone_cr_as_python_reads_them() {
        for text in [
            "[core]\rexecutor = CeleryExecutor\r\r[celery]\rbroker_url = redis://b:6379/0\r",
            "[core]\r\nexecutor = CeleryExecutor\r\n[celery]\r\nbroker_url = redis://b:6379/0\r\n",
            "[core]\nexecutor = CeleryExecutor\n[celery]\nbroker_url = redis://b:6379/0",
        ] {
            let ini = Ini::parse(text).unwrap();
            assert_eq!(
                ini.get("core", "executor"),
                Some(Ok("CeleryExecutor".into())),
                "{text:?}"
            );
            assert_eq!(
                ini.get("celery", "broker_url"),
                Some(Ok("redis://b:6379/0".into())),
                "{text:?}"
            );
        }
    }

    /// Ten levels deep, each option naming twelve of the next: 12^10
    /// expansions if followed to the end. Refused once the value outgrows
    /// any real option, long before (the hostile run's file took minutes
    /// and 1.7 GB).
    #[test]
    fn references_that_fan_out_are_refused_not_followed() {
        let mut text = String::from("[database]\nl0 = x\n");
        for level in 1..=10 {
            let refs = format!("%(l{})s", level - 1).repeat(12);
            text.push_str(&format!("l{level} = {refs}\n"));
        }
        let ini = Ini::parse(&text).unwrap();
        assert_eq!(
            ini.get("database", "l10").unwrap().unwrap_err(),
            "[database] l5: '%(...)s' references make it longer than 64 KiB"
        );
        // Within the bound, fan-out is followed as Python follows it.
        assert_eq!(ini.get("database", "l2").unwrap().unwrap().len(), 144);
    }

    /// Python follows ten levels of references and refuses the eleventh; a
    /// plain value at the end of the chain is not a level (configparser:
    /// fan-out 2 gives `l10` 1,024 characters, `l11` an
    /// `InterpolationDepthError`).
    #[test]
    fn ten_levels_of_references_are_followed_as_python_follows_them() {
        let mut text = String::from("[database]\nl0 = x\n");
        for level in 1..=11 {
            let refs = format!("%(l{})s", level - 1).repeat(2);
            text.push_str(&format!("l{level} = {refs}\n"));
        }
        let ini = Ini::parse(&text).unwrap();
        assert_eq!(
            ini.get("database", "l10").unwrap().unwrap(),
            "x".repeat(1024)
        );
        assert_eq!(
            ini.get("database", "l11").unwrap().unwrap_err(),
            "[database] l1: '%(...)s' references nest more than 10 deep"
        );
    }

    #[test]
    fn interpolation_errors_name_the_option() {
        let ini = Ini::parse(
            "[database]\nbad = pass%word\nloop = %(loop)s\nmissing = %(nosuch)s\nopen = %(x\n",
        )
        .unwrap();
        let err = |k: &str| ini.get("database", k).unwrap().unwrap_err();
        assert_eq!(
            err("bad"),
            "[database] bad: '%' must be followed by '%' or '(' (write a literal % as %%)"
        );
        assert!(!err("bad").contains("word"));
        assert_eq!(
            err("loop"),
            "[database] loop: '%(...)s' references nest more than 10 deep"
        );
        assert_eq!(
            err("missing"),
            "[database] missing: '%(nosuch)s' names no option of [database] (write a literal % as %%)"
        );
        assert!(err("open").starts_with("[database] open: a '%(' that is not"));
    }
}
