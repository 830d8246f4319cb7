//! What may be shown of a broker: its identity (the URL without credentials),
//! told apart from a repeat by its place in the list; and its password, which
//! never prints.

use std::fmt;

use super::Broker;

/// A password: it never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(pub(super) String);

impl Password {
    /// The password itself, only for handing to a driver.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(***)")
    }
}

/// The brokers, each identity distinct: a broker whose identity an earlier
/// one has (the list names one server twice, differing only in credentials or
/// options) is told apart by its place in the list,
/// `redis://broker:6379/0 (broker URL 2 of 2)`, so that its reasons, its
/// detail and its series on `/metrics` are its own, never merged with the
/// other's, and no credential is shown to tell them apart.
pub(super) fn told_apart(mut brokers: Vec<Broker>) -> Vec<Broker> {
    let of = brokers.len();
    for i in 1..brokers.len() {
        let (earlier, rest) = brokers.split_at_mut(i);
        if earlier.iter().any(|b| b.identity == rest[0].identity) {
            rest[0].identity = format!("{} (broker URL {} of {of})", rest[0].identity, i + 1);
        }
    }
    brokers
}
