//! What a command may be, and where its credentials are: the argument vector
//! checked before anything runs ([`check_argv`]), and the values of options
//! whose names say they are credentials, masked wherever the command is shown
//! ([`redacted_argv`]) and in reasons and logs ([`scrubbing_credentials`]).

use std::path::Path;

use overseer_core::secret::{MASK, Scrubber};

use crate::error::{Error, Result};

/// What an option's name holds when its value is a credential (`--api-token`,
/// `--password`, `--secret-key`, `--auth`), compared without case.
const CREDENTIAL_WORDS: [&str; 7] = [
    "password",
    "passwd",
    "secret",
    "token",
    "key",
    "auth",
    "credential",
];

/// The shortest credential masked in free text (reasons, log lines): masking
/// every `1` because some `--key 1` was given would hide more than it protects.
/// Where the command itself is shown, every credential value is masked.
pub const MIN_MASKED_IN_REASONS: usize = 4;

/// Whether `argv` can be run: a program first, no NUL character anywhere, and
/// no whole command line written as one string. The program need not exist yet
/// (a missing one is a verdict: `not found`).
pub fn check_argv(argv: &[String]) -> Result<()> {
    let Some(program) = argv.first() else {
        return Err(Error::NoProgram);
    };
    if let Some(index) = argv.iter().position(|a| a.contains('\0')) {
        return Err(Error::Nul(index));
    }
    if program.trim().is_empty() {
        return Err(Error::NoProgram);
    }
    if program.contains(char::is_whitespace) && !Path::new(program).exists() {
        return Err(Error::CommandLine);
    }
    Ok(())
}

/// Whether an option (`--api-token`, `-password`) names a credential.
fn names_credential(option: &str) -> bool {
    let name = option.trim_start_matches('-').to_ascii_lowercase();
    option.starts_with('-') && CREDENTIAL_WORDS.iter().any(|word| name.contains(word))
}

/// Where the credentials of `argv` are: `(index, start)`, the argument at
/// `index` from byte `start` on (after the `=` of `--password=s3cret`, or 0 for
/// the whole value after `--token`).
fn credential_spans(argv: &[String]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut index = 1;
    while let Some(arg) = argv.get(index) {
        match arg.split_once('=') {
            Some((option, _)) if names_credential(option) => spans.push((index, option.len() + 1)),
            // The value follows the option, unless another option does.
            None if names_credential(arg)
                && argv
                    .get(index + 1)
                    .is_some_and(|next| !next.starts_with('-')) =>
            {
                index += 1;
                spans.push((index, 0));
            }
            _ => {}
        }
        index += 1;
    }
    spans
}

/// The arguments of `argv` that are credentials: the value after an option
/// whose name says so (`--token s3cret`), or after its `=` (`--password=s3cret`).
/// A rule of thumb, not a guarantee: a token passed any other way is not found.
pub fn credential_arguments(argv: &[String]) -> Vec<&str> {
    credential_spans(argv)
        .into_iter()
        .map(|(index, start)| &argv[index][start..])
        .collect()
}

/// `argv` as it may be shown (`overseer config`): each [`credential_arguments`]
/// value masked, and every URL's password.
pub fn redacted_argv(argv: &[String]) -> Vec<String> {
    let mut shown: Vec<String> = argv
        .iter()
        .map(|arg| overseer_core::secret::scrub(arg))
        .collect();
    for (index, start) in credential_spans(argv) {
        shown[index] = format!("{}{MASK}", &argv[index][..start]);
    }
    shown
}

/// `scrubber`, also masking the [`credential_arguments`] of `argv` in free
/// text (the shortest excepted, see [`MIN_MASKED_IN_REASONS`]): for a check's
/// reasons, and for the log writer.
pub fn scrubbing_credentials(scrubber: Scrubber, argv: &[String]) -> Scrubber {
    credential_arguments(argv)
        .into_iter()
        .filter(|secret| secret.chars().count() >= MIN_MASKED_IN_REASONS)
        .fold(scrubber, Scrubber::with_secret)
}
