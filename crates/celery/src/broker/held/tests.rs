//! The life of a held connection (a broker's watch, its events subscription)
//! as a table: one row per case a past fix met, each a script of what the
//! broker does to the connection attempts and when polls reach it, and the
//! trace a user would see: each attempt to connect, each ring for a poll.
//! Time is paused, so every row runs in no time and its trace is exact.
//!
//! The rows named "issue 37" were known gaps of the loops before the driver
//! (their traces then are in the commit that wrote the table).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

use super::{Answers, Ended, Link, Listener, Refusal, Retry, Woken, drive};
use crate::events::WorkerEvents;
use overseer_core::check::Alarm;

/// What one connection attempt comes to.
#[derive(Debug, Clone, Copy)]
enum Attempt {
    /// No connection, after this many milliseconds (a timeout takes some).
    Fails(u64),
    /// A connection, held this many milliseconds, then lost.
    Holds(u64),
    /// A connection whose command the broker refuses at once (an ACL
    /// without `BLPOP`, a demoted master's `READONLY`).
    Refused,
}

use Attempt::{Fails, Holds, Refused};

/// Held for longer than any row runs.
const EVER: u64 = u64::MAX / 4;

/// One case.
struct Row {
    case: &'static str,
    /// The attempts in order; the last repeats.
    attempts: &'static [Attempt],
    /// When a poll reaches the broker (ms since the start), besides those rung for.
    answers: &'static [u64],
    /// Whether each poll rung for reaches the broker (10 ms after the ring).
    rung_polls_answer: bool,
    /// How long the row runs (ms).
    until: u64,
    /// What a user sees, in order: `<ms> attempt` and `<ms> ring`.
    expect: &'static str,
    /// How many warnings the log shows, when the row says.
    warnings: Option<usize>,
}

/// What a row says when it says nothing else.
const ROW: Row = Row {
    case: "",
    attempts: &[],
    answers: &[],
    rung_polls_answer: false,
    until: 20_000,
    expect: "",
    warnings: None,
};

const TABLE: &[Row] = &[
    Row {
        case: "a held connection lost rings at once; the first connection rings nothing, \
               a return found by the back-off rings",
        attempts: &[Holds(1000), Fails(0), Fails(0), Holds(EVER)],
        expect: "0 attempt, 1000 ring, 1500 attempt, 2500 attempt, 4500 attempt, \
                 4500 ring",
        warnings: Some(0),
        ..ROW
    },
    Row {
        case: "07feb20: a poll that reaches the broker ends a long reconnect wait at once, \
               and the return it saw is no news",
        attempts: &[Holds(1000), Fails(0), Fails(0), Fails(0), Holds(EVER)],
        answers: &[6000],
        expect: "0 attempt, 1000 ring, 1500 attempt, 2500 attempt, 4500 attempt, \
                 6000 attempt",
        ..ROW
    },
    Row {
        case: "07feb20: polls answered while the connection held are old news once it is lost",
        attempts: &[Fails(0), Fails(0), Fails(0), Holds(2000), Holds(EVER)],
        answers: &[4000, 5000],
        expect: "0 attempt, 500 attempt, 1500 attempt, 3500 attempt, 3500 ring, \
                 5500 ring, 9500 attempt, 9500 ring",
        ..ROW
    },
    Row {
        case: "07feb20: a poll answered during a failed attempt is news: the wait after it \
               ends at its first step",
        attempts: &[Holds(1000), Fails(0), Fails(3000), Holds(EVER)],
        answers: &[3000],
        expect: "0 attempt, 1000 ring, 1500 attempt, 2500 attempt, 6000 attempt",
        ..ROW
    },
    Row {
        case: "07feb20: an attempt a poll's answer brought that fails rings (the broker died \
               again in between: that poll's healthy is stale)",
        attempts: &[Holds(1000), Fails(0), Fails(0), Fails(0), Holds(EVER)],
        answers: &[3000],
        expect: "0 attempt, 1000 ring, 1500 attempt, 2500 attempt, 3000 attempt, \
                 3000 ring, 7000 attempt, 7000 ring",
        ..ROW
    },
    Row {
        case: "5a3a1d6: an answer ends a reconnect wait no sooner than half a second after \
               it began",
        attempts: &[Holds(1000), Fails(0), Fails(0), Holds(EVER)],
        answers: &[2600],
        expect: "0 attempt, 1000 ring, 1500 attempt, 2500 attempt, 3000 attempt",
        ..ROW
    },
    Row {
        case: "b65ea7a, 5a3a1d6: a broker that answers every poll but takes no watch \
               connection (a full maxclients) costs one extra poll, not a poll per poll",
        attempts: &[Holds(1000), Fails(0)],
        rung_polls_answer: true,
        until: 10_000,
        expect: "0 attempt, 1000 ring, 1500 attempt, 1500 ring, 2000 attempt, \
                 4000 attempt, 8000 attempt",
        ..ROW
    },
    Row {
        case: "5a3a1d6: a refused command rings at once and waits out the back-off: no \
               poll's answer hastens it, and the next connection is no return",
        attempts: &[Refused],
        rung_polls_answer: true,
        until: 8000,
        expect: "0 attempt, 0 ring, 500 attempt, 500 ring, 1500 attempt, 1500 ring, \
                 3500 attempt, 3500 ring, 7500 attempt, 7500 ring",
        ..ROW
    },
    Row {
        case: "a connection that held 10 s starts the back-off again",
        attempts: &[
            Fails(0),
            Fails(0),
            Fails(0),
            Holds(10_000),
            Fails(0),
            Holds(EVER),
        ],
        until: 30_000,
        expect: "0 attempt, 500 attempt, 1500 attempt, 3500 attempt, 3500 ring, \
                 13500 ring, 14000 attempt, 15000 attempt, 15000 ring",
        ..ROW
    },
    Row {
        case: "issue 37: a second kill before the watch reconnects rings: the ring for a failed \
               attempt is not repeated while polls bring attempts, but a wait that runs its \
               back-off out makes the next one news",
        attempts: &[Holds(1000), Fails(0)],
        answers: &[3000, 9000],
        expect: "0 attempt, 1000 ring, 1500 attempt, 2500 attempt, 3000 attempt, \
                 3000 ring, 7000 attempt, 9000 attempt, 9000 ring",
        ..ROW
    },
    Row {
        case: "issue 37: a refused command is warned once, until a connection holds",
        attempts: &[Refused, Refused, Holds(2000), Refused, Holds(EVER)],
        until: 12_000,
        expect: "0 attempt, 0 ring, 500 attempt, 500 ring, 1500 attempt, 3500 ring, \
                 5500 attempt, 5500 ring, 5500 ring, 9500 attempt",
        warnings: Some(2),
        ..ROW
    },
];

#[tokio::test(start_paused = true)]
async fn the_life_of_a_held_connection() {
    let mut failed = Vec::new();
    for row in TABLE {
        let (trace, warnings) = run(row, Listener::Watch(Alarm::new())).await;
        let trace = trace.join(", ");
        if trace != row.expect || row.warnings.is_some_and(|w| w != warnings) {
            failed.push(format!(
                "{}:\n  saw {trace}, {warnings} warnings\n  not {}, {:?}",
                row.case, row.expect, row.warnings
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A subscription is told as the watch rings: up at each connection, down
/// at its end, refused at each refusal (with the note the verdict shows),
/// warned once a run; and it never rings.
#[tokio::test(start_paused = true)]
async fn a_subscription_is_told_what_the_watch_would_ring_for() {
    let events = Arc::new(WorkerEvents::default());
    let row = Row {
        case: "a subscription",
        attempts: &[Holds(1000), Refused, Refused, Holds(EVER)],
        until: 1200,
        ..ROW
    };
    let subscription = || Listener::Events {
        index: 0,
        events: Arc::clone(&events),
    };
    let state = || events.subscriptions()[0].state;
    // Each run starts the script again, on the same record. Up, then lost at
    // 1 s.
    let (trace, _) = run(&row, subscription()).await;
    assert_eq!(trace, ["0 attempt"], "no ring");
    assert_eq!(state(), "down");
    // Refused at once on the next connection (1.5 s): warned, and noted.
    let row = Row { until: 1600, ..row };
    let (trace, warnings) = run(&row, subscription()).await;
    assert_eq!(trace, ["0 attempt", "1500 attempt"]);
    assert_eq!((state(), warnings), ("refused", 1));
    assert_eq!(events.unheard().as_deref(), Some("the note"));
    // Refused again at 2.5 s, unwarned; up again at 4.5 s.
    let row = Row { until: 5000, ..row };
    let (_, warnings) = run(&row, subscription()).await;
    assert_eq!((state(), warnings), ("listening", 1));
}

/// What a row's run showed: its trace, and how many warnings were logged.
async fn run(row: &Row, listener: Listener) -> (Vec<String>, usize) {
    let start = Instant::now();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let _log = tracing::subscriber::set_default(tracing_subscriber::registry().with(Log {
        start,
        seen: Arc::clone(&seen),
    }));
    let answers = Answers::new();
    let polls = {
        let answers = answers.clone();
        let times = row.answers;
        tokio::spawn(async move {
            for &at in times {
                tokio::time::sleep_until(start + Duration::from_millis(at)).await;
                answers.answered();
            }
        })
    };
    let rung = {
        let answers = answers.clone();
        let seen = Arc::clone(&seen);
        let answering = row.rung_polls_answer;
        tokio::spawn(async move {
            if !answering {
                return;
            }
            let mut taken = 0;
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let rings = seen.lock().unwrap().rings.len();
                for _ in taken..rings {
                    let answers = answers.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(9)).await;
                        answers.answered();
                    });
                }
                taken = rings;
            }
        })
    };
    let script = drive(
        Script {
            row,
            next: 0,
            start,
            seen: Arc::clone(&seen),
        },
        listener,
        "redis://broker:6379/0",
        &answers,
    );
    let _ = tokio::time::timeout_at(start + Duration::from_millis(row.until), script).await;
    polls.abort();
    rung.abort();
    let seen = seen.lock().unwrap();
    (seen.trace.clone(), seen.warnings)
}

/// A row's attempts, as a transport would make them.
struct Script<'a> {
    row: &'a Row,
    next: usize,
    start: Instant,
    seen: Arc<Mutex<Seen>>,
}

impl Link for Script<'_> {
    /// How long it holds, or `None` for a refusal at once.
    type Conn = Option<u64>;

    async fn connect(&mut self) -> Result<Self::Conn, Ended> {
        let attempts = self.row.attempts;
        let attempt = attempts[self.next.min(attempts.len() - 1)];
        self.next += 1;
        self.seen.lock().unwrap().attempt(self.start);
        match attempt {
            Fails(ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Err(Ended::Gone(None))
            }
            Holds(ms) => Ok(Some(ms)),
            Refused => Ok(None),
        }
    }

    async fn hold(&mut self, conn: Self::Conn) -> Ended {
        match conn {
            Some(ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ended::Gone(None)
            }
            None => Ended::Refused(Refusal {
                reason: "broker redis://broker:6379/0 refused the command: the user lacks the \
                         permission (NOPERM)"
                    .into(),
                warning: "the broker refuses the watch's command",
                note: "the note".into(),
            }),
        }
    }
}

/// What a row's run showed so far.
#[derive(Default)]
struct Seen {
    trace: Vec<String>,
    rings: Vec<u64>,
    warnings: usize,
}

impl Seen {
    fn attempt(&mut self, start: Instant) {
        let at = start.elapsed().as_millis();
        self.trace.push(format!("{at} attempt"));
    }
}

/// Reads the rings and warnings off the log: a ring is a line that says it
/// polls at once.
struct Log {
    start: Instant,
    seen: Arc<Mutex<Seen>>,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Log {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        let mut seen = self.seen.lock().unwrap();
        if *event.metadata().level() == tracing::Level::WARN {
            seen.warnings += 1;
        }
        if message.0.ends_with("polling at once") {
            let at = self.start.elapsed().as_millis();
            seen.rings.push(at as u64);
            seen.trace.push(format!("{at} ring"));
        }
    }
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

// Retry's own cases, beneath the table's.

#[tokio::test(start_paused = true)]
async fn a_poll_that_reaches_the_broker_ends_a_reconnect_wait_after_at_least_the_first_step() {
    let answers = Answers::new();
    let mut retry = Retry::new(&answers);
    // The back-off grows while attempts fail: 0.5 s, 1 s, 2 s, then 4 s.
    for _ in 0..3 {
        assert_eq!(retry.wait(Duration::ZERO).await, Woken::Waited);
    }
    let poll = answers.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        poll.answered();
        tokio::time::sleep(Duration::from_secs(1)).await;
        poll.answered();
    });
    // Answered at 0.2 s: the attempt comes at 0.5 s, not at 4 s.
    let waiting = Instant::now();
    assert_eq!(retry.wait(Duration::ZERO).await, Woken::Answered);
    assert_eq!(waiting.elapsed(), Retry::FIRST);
    // Answered 0.7 s into the next wait: at once, and the back-off
    // (8 s now) is not shortened by the answers.
    let waiting = Instant::now();
    assert_eq!(retry.wait(Duration::ZERO).await, Woken::Answered);
    assert_eq!(waiting.elapsed(), Duration::from_millis(700));
    let waiting = Instant::now();
    assert_eq!(retry.wait(Duration::ZERO).await, Woken::Waited);
    assert_eq!(waiting.elapsed(), Duration::from_secs(16));
}

#[tokio::test(start_paused = true)]
async fn polls_while_a_connection_was_held_are_old_news_those_during_an_attempt_are_not() {
    let answers = Answers::new();
    let mut retry = Retry::new(&answers);
    // Polls answered while the connection held; then it was lost.
    answers.answered();
    answers.answered();
    let waiting = Instant::now();
    assert_eq!(retry.wait(Duration::from_secs(1)).await, Woken::Waited);
    assert_eq!(waiting.elapsed(), Retry::FIRST);
    // A poll answered while the next attempt failed: the broker is back
    // since it began, so the wait after it (1 s) ends at the first step.
    answers.answered();
    let waiting = Instant::now();
    assert_eq!(retry.wait(Duration::ZERO).await, Woken::Answered);
    assert_eq!(waiting.elapsed(), Retry::FIRST);
}
