//! One module per section of the report, in the report's order. Each runs its
//! scenarios (with warm-ups, several runs, interleaved), draws its charts and
//! returns its Markdown.

pub mod celery;
pub mod detection;
pub mod events;
pub mod flood;
pub mod http;
pub mod lost;
pub mod main_loop;
pub mod plugin;
pub mod pool;
pub mod probe;
pub mod reads;
pub mod scale;
