//! overseer-core's integration tests, as modules of one test binary (one link
//! instead of one per file); nextest still runs each test in a process of its
//! own. Filter a file's tests by its module: `-E 'test(/^alarm::/)'`.

mod support;

mod alarm;
mod busy_host;
mod canary;
mod connect;
mod cost;
mod entry_cases;
mod evidence;
mod flush_statements;
mod history;
mod lifecycle;
mod queued_tasks;
mod storage;
mod supervision;
