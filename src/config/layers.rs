//! The layers, stacked with figment, later wins: built-in defaults ->
//! `overseer.toml` -> `OVERSEER_*` environment -> Airflow's own environment
//! ([`super::airflow`]) -> command-line flags.
//!
//! Also what the layers know about themselves: which `OVERSEER_*` variables name
//! no key (warned about, then ignored), and where a key's value came from, so
//! that every error can say it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::{Figment, Metadata, Profile, Provider};
use serde::Deserialize;

use super::errors::from_figment;
use super::{
    Config, ConfigError, DEFAULT_CONFIG_FILE, ENV_PREFIX, ExecutorConfig, Overrides, airflow,
};

/// `OVERSEER_*` variables that are not configuration keys: the config file's
/// path and the logging switches, read by the command line.
const ENV_NOT_KEYS: [&str; 3] = ["CONFIG", "LOG", "LOG_FORMAT"];

/// Just the executors of a configuration, to check them before the layers end.
#[derive(Deserialize)]
struct ExecutorsOnly {
    #[serde(default)]
    executors: Vec<ExecutorConfig>,
}

/// How large `overseer.toml` may be: one with a thousand executors is about 200 KiB.
const MAX_CONFIG_FILE: u64 = 4 * 1024 * 1024;

/// Every layer, stacked, reading the process's environment; not yet extracted.
/// With it, each key Airflow's configuration set and where its value came from.
pub(super) fn stack(
    overrides: &Overrides,
) -> Result<(Figment, BTreeMap<String, String>), ConfigError> {
    let config_file = match &overrides.config_file {
        Some(path) if !path.is_file() => {
            return Err(ConfigError::new(
                "",
                path.display().to_string(),
                "the configuration file does not exist or is not a file",
            ));
        }
        Some(path) => Some(path.clone()),
        None => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.is_file()),
    };

    let mut figment = Figment::from(Labelled::new(
        super::BUILT_IN,
        // The defaults may go through `Serialize`: they hold no credential (a
        // test in `super` keeps it so), and a `SecretUrl` serializes redacted.
        Serialized::defaults(Config::default()),
    ));
    if let Some(path) = &config_file {
        // Read once by the one bounded reader, so that what figment reads
        // next is known to be a regular file of a sane size.
        overseer_core::file::read(path, MAX_CONFIG_FILE).map_err(|e| {
            ConfigError::new(
                "",
                path.display().to_string(),
                format!("cannot read it: {e}"),
            )
        })?;
        figment = figment.merge(Toml::file_exact(path));
    }
    let unknown = unknown_env_keys();
    let mut ignored: Vec<&str> = ENV_NOT_KEYS.to_vec();
    ignored.extend(unknown.iter().map(String::as_str));
    figment = figment.merge(Env::prefixed(ENV_PREFIX).ignore(&ignored).split("__"));

    // Airflow's executor list keeps, for each name, what the earlier layers set:
    // checked as typed values, carried on as the text they were read from.
    let _typed: Vec<ExecutorConfig> = figment
        .extract::<ExecutorsOnly>()
        .map_err(from_figment)?
        .executors;
    let earlier: Vec<figment::value::Dict> = match figment.find_value("executors") {
        Ok(figment::value::Value::Array(_, entries)) => {
            entries.into_iter().filter_map(|e| e.into_dict()).collect()
        }
        _ => Vec::new(),
    };
    let conf = airflow::AirflowConf::read(std::env::vars())?;
    let database_set = origin_of(&figment, "database.url") != super::BUILT_IN;
    let airflow = airflow::AirflowEnv::read(
        &conf,
        &airflow::Earlier {
            executors: &earlier,
            database_set,
        },
    )?;
    let airflow_origins = airflow.origins().clone();
    figment = figment.merge(airflow);

    if let Some(bind) = overrides.bind {
        figment = figment.merge(Labelled::new(
            "command-line flag --bind",
            Serialized::default("api.bind", bind.to_string()),
        ));
    }
    Ok((figment, airflow_origins))
}

/// `OVERSEER_*` variables that name no configuration key: each is warned about
/// once and ignored, as other tools may share the prefix (a typo in a key of
/// `overseer.toml`, by contrast, stops start-up).
fn unknown_env_keys() -> Vec<String> {
    let known = super::keys::known_env_keys();
    let mut unknown = Vec::new();
    for (var, _) in std::env::vars() {
        let Some(key) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if ENV_NOT_KEYS.contains(&key) || known.iter().any(|k| k.eq_ignore_ascii_case(key)) {
            continue;
        }
        tracing::warn!("ignoring environment variable {var}: it names no configuration key");
        unknown.push(key.to_owned());
    }
    unknown
}

/// Where the value of `key` (a figment path, `a.b` or `executors.0.name`) came from.
pub(super) fn origin_of(figment: &Figment, key: &str) -> String {
    let keys: Vec<&str> = key.split('.').collect();
    // An array's element carries its provider's metadata on the array itself.
    let metadata = figment
        .find_metadata(key)
        .or_else(|| figment.find_metadata(keys[0]));
    metadata.map_or_else(|| "unknown source".to_owned(), |md| describe(md, &keys))
}

/// Names a provider's source for an error: a file path, an environment variable, a flag.
pub(super) fn describe(metadata: &Metadata, keys: &[&str]) -> String {
    if let Some(figment::Source::File(path)) = &metadata.source {
        return display_path(path);
    }
    if metadata.name.contains(ENV_PREFIX) {
        // A variable sets a key path (an array as a whole), so stop at the first index.
        let path: Vec<String> = keys
            .iter()
            .take_while(|k| k.parse::<usize>().is_err())
            .map(|k| k.to_ascii_uppercase())
            .collect();
        return format!("environment variable {ENV_PREFIX}{}", path.join("__"));
    }
    if metadata.name == airflow::LAYER {
        return metadata.interpolate(&Profile::Default, keys);
    }
    if metadata.name.contains("environment") {
        let var = metadata.interpolate(&Profile::Default, keys);
        return format!("environment variable {var}");
    }
    metadata.name.to_string()
}

fn display_path(path: &Path) -> String {
    path.display().to_string()
}

/// A provider under another name, so errors can say where a value came from.
struct Labelled<P> {
    name: &'static str,
    inner: P,
}

impl<P> Labelled<P> {
    fn new(name: &'static str, inner: P) -> Self {
        Self { name, inner }
    }
}

impl<P: Provider> Provider for Labelled<P> {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name)
    }

    fn data(&self) -> Result<figment::value::Map<Profile, figment::value::Dict>, figment::Error> {
        self.inner.data()
    }
}
