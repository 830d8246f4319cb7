//! This crate's one error type: a check that cannot be built from what it was
//! given. Everything that goes wrong *at run time* (a probe that is missing or
//! hangs, a server that refuses) is a verdict, not an error.
//!
//! No message quotes the command or the URL: an argument, a query parameter or
//! a malformed URL's "port" may hold a token. The configuration prints each
//! message after the key it is about (`executors[0].check_url: {this}`).

/// A `check_command` or `check_url` that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The command is empty, or its program is.
    #[error(
        "names no program: give the program, then each argument, as in [\"/usr/local/bin/probe\", \"--fast\"]"
    )]
    NoProgram,
    /// The program's name has white space and no such file exists: most likely
    /// a whole command line written as one string, for a shell that never runs.
    #[error(
        "the program has a space in its name and no such file exists: no shell splits it, so give the program and each argument as separate elements, as in [\"/usr/local/bin/probe\", \"--fast\"]"
    )]
    CommandLine,
    /// An element holds a NUL character, which no program argument can carry.
    #[error("element {0} holds a NUL character, which no program or argument can carry")]
    Nul(usize),
    /// The URL does not parse.
    #[error("is not a URL: {0}")]
    Url(#[from] url::ParseError),
    /// The URL is not `http://` or `https://`.
    #[error("must be an http:// or https:// URL, not {0}://")]
    Scheme(String),
    /// The URL names no host.
    #[error("must name a host, as in http://probe:8080/health")]
    NoHost,
    /// The CA bundle for an `https://` URL cannot be used.
    #[error("{0}: {1}")]
    CaFile(String, String),
}

/// This crate's `Result`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
