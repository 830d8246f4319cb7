//! An executor's alarm: how a check that holds a connection to what it watches
//! (a Celery broker) tells the supervisor at once that the connection closed or
//! stopped answering, instead of waiting for the next tick.
//!
//! The check rings its [`Alarm`]; the supervisor polls that executor now, out
//! of turn, unless a poll of it is already in flight (the in-flight guard
//! holds: a ring never adds a second poll). The verdict is the poll's, so an
//! alarm never judges anything itself: a broker that closed one connection but
//! answers the next poll stays healthy.
//!
//! Rings wait on a board shared by every executor of one [`crate::Overseer`]:
//! one `Notify` and the indices rung, so the supervisor holds one future for
//! all of them (not one per executor), and a ring while the supervisor is
//! being restarted is kept for the next one.

use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::Notify;

/// What a check rings (a clone of the executor's), before or after the
/// executor is supervised: rings before that are ignored, there being no
/// supervisor to poll.
#[derive(Debug, Clone, Default)]
pub struct Alarm {
    attached: Arc<OnceLock<(Arc<AlarmBoard>, usize)>>,
}

impl Alarm {
    /// A new alarm, not yet attached to a supervisor.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks for a poll of this executor now.
    pub fn ring(&self) {
        if let Some((board, index)) = self.attached.get() {
            board.ring(*index);
        }
    }

    /// Attaches the alarm to `board` as executor `index` (once: later calls
    /// are ignored, an executor being supervised by one Overseer).
    pub(crate) fn attach(&self, board: Arc<AlarmBoard>, index: usize) {
        let _ = self.attached.set((board, index));
    }
}

/// The executors rung and not yet polled, and the one wake-up for them all.
#[derive(Debug, Default)]
pub(crate) struct AlarmBoard {
    rung: Mutex<Vec<usize>>,
    notify: Notify,
}

impl AlarmBoard {
    fn ring(&self, index: usize) {
        let mut rung = self.rung.lock().unwrap_or_else(|e| e.into_inner());
        if !rung.contains(&index) {
            rung.push(index);
        }
        drop(rung);
        // A permit is kept when nobody waits: no ring is lost between waits.
        self.notify.notify_one();
    }

    /// Waits for a ring, and takes every executor rung since the last take.
    pub(crate) async fn rung(&self) -> Vec<usize> {
        loop {
            let taken = std::mem::take(&mut *self.rung.lock().unwrap_or_else(|e| e.into_inner()));
            if !taken.is_empty() {
                return taken;
            }
            self.notify.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rings_are_kept_until_taken_each_executor_once() {
        let board = Arc::new(AlarmBoard::default());
        let (a, b) = (Alarm::new(), Alarm::new());
        a.ring(); // not attached yet: nobody to tell
        a.attach(board.clone(), 0);
        b.attach(board.clone(), 3);
        a.ring();
        b.ring();
        a.ring();
        assert_eq!(board.rung().await, vec![0, 3]);
        b.ring();
        assert_eq!(board.rung().await, vec![3]);
    }
}
