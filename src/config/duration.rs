//! Durations in configuration, written as people write them: `10s`, `500ms`, `1m 30s`.

use std::time::Duration;

use serde::{Deserializer, Serializer, de};

/// Parses `10s`, `500ms`, `2m`; a bare number (no unit) is refused, being ambiguous.
pub fn parse(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    // `humantime` takes a bare `0` as zero; every other bare number it refuses.
    if trimmed.parse::<f64>().is_ok() {
        return Err(DurationVisitor::unitless_text(trimmed));
    }
    humantime::parse_duration(trimmed).map_err(|_| {
        format!("invalid duration {text:?}: expected a number and a unit, such as 10s or 500ms")
    })
}

/// Shows a duration the way it is written in configuration (`10s`, `1s 500ms`).
pub fn format(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format(*duration))
}

pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    deserializer.deserialize_any(DurationVisitor)
}

struct DurationVisitor;

impl DurationVisitor {
    fn unitless<E: de::Error>(n: impl std::fmt::Display) -> E {
        E::custom(Self::unitless_text(n))
    }

    fn unitless_text(n: impl std::fmt::Display) -> String {
        format!("invalid duration {n}: a unit is needed, such as {n}s or {n}ms")
    }
}

impl de::Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a duration such as 10s or 500ms")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        parse(text).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Duration, E> {
        Err(Self::unitless(n))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Duration, E> {
        Err(Self::unitless(n))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Duration, E> {
        Err(Self::unitless(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_their_units() {
        assert_eq!(parse("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("1m 30s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse("ten").unwrap_err(),
            r#"invalid duration "ten": expected a number and a unit, such as 10s or 500ms"#
        );
        assert!(parse("10").is_err());
        assert_eq!(
            parse("0").unwrap_err(),
            "invalid duration 0: a unit is needed, such as 0s or 0ms"
        );
        assert_eq!(format(Duration::from_millis(1500)), "1s 500ms");
    }
}

/// An optional duration: absent when unset.
pub mod option {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        duration: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match duration {
            Some(duration) => super::serialize(duration, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped(#[serde(deserialize_with = "super::deserialize")] Duration);
        Option::<Wrapped>::deserialize(deserializer).map(|w| w.map(|Wrapped(d)| d))
    }
}
