//! The one error type of `overseer-core`.

/// Everything that can go wrong in the core.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The metadata database refused or failed a statement. The message comes
    /// from the driver and never carries the connection URL.
    #[error("database: {0}")]
    Database(#[from] sea_orm::DbErr),

    /// The embedding program asked for something that cannot work.
    #[error("invalid settings: {0}")]
    Config(String),

    /// A thread or runtime could not be started, or ended early.
    #[error("{0}")]
    Runtime(String),

    /// The Jobs table is not as Overseer needs it.
    #[error("{0}")]
    Schema(String),

    /// A value read from the Jobs table is not one this version understands.
    #[error("job table: {column} has unexpected value {value:?}")]
    UnexpectedValue {
        /// The column the value came from.
        column: &'static str,
        /// The value as stored.
        value: String,
    },
}

/// `Result` with the core's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
