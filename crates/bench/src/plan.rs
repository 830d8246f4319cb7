//! How much to measure: the full run (`just bench`, under 20 minutes on a
//! 2-core machine, build included) or the smoke run (`--smoke`, for CI: tiny
//! sizes, one run each, seconds in all, no assertion on any figure).

/// Sizes, lengths and repetitions of every section.
#[derive(Debug, Clone)]
pub struct Plan {
    pub smoke: bool,
    /// Runs of each scenario (interleaved, so drift on a busy machine hits all alike).
    pub runs: usize,

    /// Hung executors beside the host loop (0 = Overseer with no executor).
    pub loop_hung: Vec<usize>,
    pub loop_warmup_s: f64,
    pub loop_seconds: f64,

    /// Executors polled every second.
    pub scale_executors: Vec<usize>,
    pub scale_warmup_s: f64,
    pub scale_seconds: f64,

    /// Broker kills per poll setting: (poll interval s, kills).
    pub detection: Vec<(u64, usize)>,
    /// `celery inspect ping` runs against a dead broker.
    pub inspect_dead_runs: usize,

    /// wrk connection counts, seconds per wrk run, and warm-up seconds.
    pub http_connections: Vec<u32>,
    pub http_seconds: u32,
    pub http_warmup: u32,
    /// Whether Airflow's API server is measured (when its venv exists).
    pub airflow: bool,
    /// How long the SSE clients that never read stay, and how long after they
    /// closed the memory is read again.
    pub sse_hold_s: u64,
    pub sse_after_s: u64,

    /// How long the workers' heartbeat stream runs before a window is
    /// measured, and each window.
    pub events_warmup_s: f64,
    pub events_seconds: f64,
    /// How long the flood of forged workers lasts, per broker, and how many
    /// new names it sends a second.
    pub flood_seconds: f64,
    pub flood_rate: u64,

    /// Samples of Overseer's check (pooled, fresh), of the check with a worker
    /// ping (each waits the 1 s ping window), and of each Python command.
    pub celery_samples: usize,
    pub celery_ping_samples: usize,
    pub python_runs: usize,

    /// The check pool beside tokio's own runners: runs of each case; hung
    /// executors, healthy ones beside them, and seconds from the start; executors
    /// waiting on a timer, warm-up and measured seconds.
    pub pool_runs: usize,
    pub pool_hung: usize,
    pub pool_healthy: usize,
    pub pool_hung_seconds: f64,
    pub pool_timer_executors: usize,
    pub pool_timer_warmup_s: f64,
    pub pool_timer_seconds: f64,
}

impl Plan {
    pub fn full() -> Self {
        Self {
            smoke: false,
            runs: 3,
            loop_hung: vec![0, 10, 100, 1000],
            loop_warmup_s: 0.5,
            loop_seconds: 4.0,
            scale_executors: vec![10, 100, 1_000, 10_000, 50_000],
            scale_warmup_s: 2.0,
            scale_seconds: 6.0,
            detection: vec![(1, 7), (10, 5)],
            inspect_dead_runs: 3,
            http_connections: vec![32, 256],
            http_seconds: 4,
            http_warmup: 2,
            airflow: true,
            sse_hold_s: 20,
            sse_after_s: 5,
            events_warmup_s: 8.0,
            events_seconds: 20.0,
            flood_seconds: 60.0,
            flood_rate: 20_000,
            celery_samples: 20,
            celery_ping_samples: 5,
            python_runs: 5,
            pool_runs: 2,
            pool_hung: 1_000,
            pool_healthy: 10,
            pool_hung_seconds: 90.0,
            pool_timer_executors: 10_000,
            pool_timer_warmup_s: 3.0,
            pool_timer_seconds: 10.0,
        }
    }

    pub fn smoke() -> Self {
        Self {
            smoke: true,
            runs: 1,
            loop_hung: vec![0, 10],
            loop_warmup_s: 0.2,
            loop_seconds: 1.0,
            scale_executors: vec![10, 100],
            scale_warmup_s: 1.0,
            scale_seconds: 2.0,
            detection: vec![(1, 1)],
            inspect_dead_runs: 1,
            http_connections: vec![8],
            http_seconds: 1,
            http_warmup: 1,
            airflow: false,
            sse_hold_s: 3,
            sse_after_s: 1,
            events_warmup_s: 2.0,
            events_seconds: 1.0,
            flood_seconds: 14.0,
            flood_rate: 2_000,
            celery_samples: 3,
            celery_ping_samples: 1,
            python_runs: 1,
            pool_runs: 1,
            pool_hung: 20,
            pool_healthy: 2,
            pool_hung_seconds: 12.0,
            pool_timer_executors: 100,
            pool_timer_warmup_s: 1.0,
            pool_timer_seconds: 2.0,
        }
    }
}
