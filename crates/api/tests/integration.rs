//! overseer-api's integration tests, as modules of one test binary (one link
//! instead of one per file); nextest still runs each test in a process of its
//! own. Filter a file's tests by its module: `-E 'test(/^history::/)'`.

mod support;

mod fleet;
mod history;
mod metrics;
mod openapi;
mod routes;
