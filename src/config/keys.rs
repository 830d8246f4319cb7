//! Every key a layer may set, as the configuration's own types declare them:
//! the fields serde would accept, read from `Deserialize` itself, so that an
//! optional key (`api.tls_cert`, `None` by default) is as known as any other.
//! Listing them by serialising the defaults, as this once did, skipped every
//! `None`, and made those keys unreachable from the environment.

use serde::de::{self, Deserialize, Deserializer, Visitor};

use super::{ApiConfig, DatabaseConfig, HistoryConfig, SupervisorConfig, ThresholdsConfig};

/// The fields `T`'s derived `Deserialize` asks for, in its order.
pub(super) fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut asked = FieldsAsked(&[]);
    // The deserializer answers nothing: only what was asked is wanted.
    let _ = T::deserialize(&mut asked);
    asked.0
}

/// Every key of each `[section]`, as `section__key` (the environment's
/// spelling, lower case), with the sections and the arrays set whole.
pub(super) fn known_env_keys() -> Vec<String> {
    let sections: [(&str, &[&str]); 5] = [
        ("database", fields_of::<DatabaseConfig>()),
        ("api", fields_of::<ApiConfig>()),
        ("supervisor", fields_of::<SupervisorConfig>()),
        ("thresholds", fields_of::<ThresholdsConfig>()),
        ("history", fields_of::<HistoryConfig>()),
    ];
    let mut known = Vec::new();
    for (section, keys) in sections {
        known.push(section.to_owned());
        known.extend(keys.iter().map(|key| format!("{section}__{key}")));
    }
    known.push("executors".into());
    known.push("alerts".into());
    known
}

/// A deserializer that keeps the fields a struct asks for and answers nothing.
struct FieldsAsked(&'static [&'static str]);

impl<'de> Deserializer<'de> for &mut FieldsAsked {
    type Error = de::value::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0 = fields;
        Err(de::Error::custom("only the fields were asked for"))
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's configuration table names an environment variable for
    /// each key the environment can set: every one of them is a known key,
    /// the optional ones (`OVERSEER_API__TLS_CERT`, `None` by default) too.
    #[test]
    fn every_variable_the_readme_names_is_a_known_key() {
        let readme = include_str!("../../README.md");
        let known = known_env_keys();
        let mut named = Vec::new();
        for row in readme.lines().filter(|l| l.starts_with("| `")) {
            let Some(environment) = row.split(" | ").nth(2) else {
                continue;
            };
            for var in environment
                .split('`')
                .filter(|w| w.starts_with("OVERSEER_"))
            {
                named.push(var.to_owned());
            }
        }
        assert!(named.len() >= 15, "the table was read: {named:?}");
        assert!(
            named.iter().any(|v| v == "OVERSEER_API__TLS_CERT"),
            "{named:?}"
        );
        for var in &named {
            let key = var.strip_prefix("OVERSEER_").unwrap();
            assert!(
                known.iter().any(|k| k.eq_ignore_ascii_case(key)),
                "{var} is in the README but names no key Overseer knows"
            );
        }
    }

    #[test]
    fn optional_keys_are_known() {
        assert!(fields_of::<ApiConfig>().contains(&"tls_cert"));
        assert!(fields_of::<ApiConfig>().contains(&"tls_key"));
        let known = known_env_keys();
        for key in ["api__tls_key", "supervisor__hostname", "database__url"] {
            assert!(known.iter().any(|k| k == key), "{key}: {known:?}");
        }
    }
}
