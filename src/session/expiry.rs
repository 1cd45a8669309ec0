//! When the sweeps look at a session. Each open session is due once, at the time it may next
//! have been idle for its TTL (or reach the end of its lifetime); the idle sweep takes only the
//! sessions due, ends those that are over and puts the others back at their next time. A
//! session with requests in flight is listed for the request-deadline sweep until one finds it
//! with none. So a sweep costs what it finds due or busy, not what is open: with a million idle
//! sessions, a tick with nothing due is one look at the top of a heap.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::state::State;
use super::Session;

/// The sessions due for a look, and those busy with requests.
#[derive(Debug, Default)]
pub(crate) struct Sweeps {
    due: Mutex<BinaryHeap<Due>>,
    /// Sessions that had a request in flight since the last deadline sweep (each once: its
    /// `Calls::listed` says whether it is here).
    busy: Mutex<Vec<Weak<Session>>>,
}

/// A session's next look, by its id (a session ended meanwhile is simply not found then).
#[derive(Debug)]
struct Due {
    at: Instant,
    id: Arc<str>,
}

impl Sweeps {
    /// Session `id` is looked at again from `at` on.
    pub(crate) fn schedule(&self, id: Arc<str>, at: Instant) {
        lock(&self.due).push(Due { at, id });
    }

    /// The ids of the sessions due at `now`, taken out (whoever looks at them schedules them
    /// again).
    pub(crate) fn take_due(&self, now: Instant) -> Vec<Arc<str>> {
        let mut due = lock(&self.due);
        let mut ids = Vec::new();
        while due.peek().is_some_and(|next| next.at <= now) {
            if let Some(next) = due.pop() {
                ids.push(next.id);
            }
        }
        ids
    }

    /// How many looks are scheduled (sessions open, and ended ones not yet due).
    pub(crate) fn scheduled(&self) -> usize {
        lock(&self.due).len()
    }

    /// Keeps only the looks `open` says are of open sessions: after many sessions ended before
    /// they were due, so what the heap holds stays in proportion to what is open.
    pub(crate) fn prune(&self, open: impl Fn(&str) -> bool) {
        lock(&self.due).retain(|due| open(&due.id));
    }

    /// The busy sessions, taken out (the sweep lists again those still busy).
    pub(crate) fn take_busy(&self) -> Vec<Weak<Session>> {
        std::mem::take(&mut *lock(&self.busy))
    }

    pub(crate) fn list_busy(&self, sessions: impl IntoIterator<Item = Weak<Session>>) {
        lock(&self.busy).extend(sessions);
    }
}

impl Session {
    /// A request went in flight (under the session's lock): the deadline sweep looks at this
    /// session until it finds it with none. A view's requests are its owner's to time out.
    pub(super) fn note_busy(&self, state: &mut State) {
        if !state.calls.listed && !state.replica.view {
            state.calls.listed = true;
            self.sweeps.list_busy([self.this.clone()]);
        }
    }

    /// Whether the deadline sweep should look at this session again (it has requests in
    /// flight); if not, it is off the list until its next request.
    pub(super) fn still_busy(&self, state: &mut State) -> bool {
        state.calls.listed = !state.calls.inflight.is_empty();
        state.calls.listed
    }

    /// When this session may next be over, seen at `now`: `None` if it is over now (idle for
    /// `idle_ttl`, or for a session named in messages its own TTL, or past its lifetime). A
    /// session in use (a stream attached, a request in flight) is looked at again after
    /// `in_use`.
    pub(in crate::session) fn next_expiry(
        &self,
        now: Instant,
        idle_ttl: Duration,
        in_use: Duration,
    ) -> Option<Instant> {
        let state = self.lock();
        let unused = state.reading.unread() && state.calls.inflight.is_empty();
        let (idle_ttl, lifetime) = match &state.layer {
            None => (idle_ttl, None),
            Some(layer) => (layer.idle_ttl, Some(layer.deadline)),
        };
        let idle_until = match unused {
            true => crate::base::clock::deadline(state.last_active, idle_ttl),
            false => crate::base::clock::deadline(now, in_use),
        };
        let next = lifetime.map_or(idle_until, |end| end.min(idle_until));
        (next > now).then_some(next)
    }
}

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The heap's top is the earliest look.
impl Ord for Due {
    fn cmp(&self, other: &Due) -> Ordering {
        other.at.cmp(&self.at)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_come_out_in_the_order_they_are_due_and_only_once_due() {
        let sweeps = Sweeps::default();
        let start = Instant::now();
        let at = |s| start + Duration::from_secs(s);
        for (id, s) in [("c", 30), ("a", 10), ("b", 20), ("d", 40)] {
            sweeps.schedule(id.into(), at(s));
        }
        assert!(sweeps.take_due(at(5)).is_empty());
        let due: Vec<String> = sweeps
            .take_due(at(20))
            .iter()
            .map(|i| i.to_string())
            .collect();
        assert_eq!(due, ["a", "b"]);
        assert_eq!(sweeps.scheduled(), 2);
        sweeps.prune(|id| id != "c");
        assert_eq!(sweeps.scheduled(), 1);
        let due: Vec<String> = sweeps
            .take_due(at(60))
            .iter()
            .map(|i| i.to_string())
            .collect();
        assert_eq!(due, ["d"]);
    }
}
