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

use tokio_util::sync::CancellationToken;

use super::Registry;
use crate::session::EndReason;
use crate::session::Session;

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

impl Registry {
    /// How often a session in use is looked at again by the idle sweep (and, with a shared
    /// store, told alive there), and how often views are kept: a few times per idle TTL.
    pub(in crate::session) fn in_use_period(&self) -> Duration {
        (self.settings().idle_ttl / 4).clamp(Duration::from_millis(100), Duration::from_secs(30))
    }

    /// Ends every session due whose idle TTL (or lifetime) has passed, and schedules the others
    /// again; returns how many ended. Looks only at the sessions due, not at every one open.
    pub(in crate::session) fn expire_idle(&self, now: Instant) -> usize {
        let started = std::time::Instant::now();
        let (ttl, in_use) = (self.settings().idle_ttl, self.in_use_period());
        let shared = self.store.redis().is_some();
        let due = self.sweeps.take_due(now);
        self.metrics.idle_sweep_looks_total.inc_by(due.len() as u64);
        let mut count = 0;
        for id in due {
            // A look scheduled for a session since ended, or replaced (taken over anew), lapses.
            let Some(session) = self.sessions.get(&id).map(|s| s.value().clone()) else {
                continue;
            };
            if !Arc::ptr_eq(session.shared_id(), &id) {
                continue;
            }
            match session.next_expiry(now, ttl, in_use) {
                Some(next) => {
                    if shared {
                        // Its record outlives it as long as it is here (a session that logs
                        // nothing while in use writes nothing that would keep it).
                        session.touch_store();
                    }
                    self.sweeps.schedule(id, next);
                }
                None if self.end(&id, EndReason::Idle) => {
                    self.metrics.sessions_expired_total.inc();
                    count += 1;
                }
                None => {}
            }
        }
        // Sessions ended before they were due leave their looks behind: pruned once they
        // outnumber the sessions open, which keeps the heap in proportion to what is open.
        if self.sweeps.scheduled() > 2 * self.sessions.len() + 1024 {
            self.sweeps.prune(|id| self.sessions.contains_key(id));
        }
        // Many sessions gone (or the last of them): their memory goes back to the system.
        if count >= crate::base::memory::RELEASE_AFTER || (count > 0 && self.sessions.is_empty()) {
            self.sessions.shrink_to_fit();
            self.views.shrink_to_fit();
            crate::base::memory::release();
        }
        self.metrics
            .idle_sweep_seconds
            .set(started.elapsed().as_secs_f64());
        count
    }

    /// Fails the requests whose server stayed silent too long, of the sessions that had
    /// requests in flight since the last sweep (those still busy are looked at again).
    pub(in crate::session) fn expire_requests(&self, now: Instant) {
        let busy = self.sweeps.take_busy();
        self.metrics
            .deadline_sweep_looks_total
            .inc_by(busy.len() as u64);
        let mut timed_out = 0;
        let still_busy: Vec<_> = busy
            .into_iter()
            .filter(|session| {
                let Some(session) = session.upgrade() else {
                    return false;
                };
                let (failed, busy) = session.expire_requests(now);
                timed_out += failed;
                busy
            })
            .collect();
        self.sweeps.list_busy(still_busy);
        self.metrics
            .requests_timed_out_total
            .inc_by(timed_out as u64);
    }

    /// Expires idle sessions until `shutdown` (each at most a second late), keeps views a few
    /// times per TTL, and fails requests past their deadline.
    pub async fn run_expiry(self: Arc<Self>, shutdown: CancellationToken) {
        let period = self.in_use_period();
        let mut ticks = tokio::time::interval(period.min(Duration::from_secs(1)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut views = tokio::time::interval(period);
        views.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // With replicas: how often views check that their owner is alive.
        let beat = self
            .store
            .redis()
            .map_or(Duration::from_secs(3600), |redis| redis.heartbeat);
        let mut beats = tokio::time::interval(beat);
        beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Requests whose server stayed silent too long fail a little after their deadline.
        let sweep = (self.settings().request_timeout / 8)
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut deadlines = tokio::time::interval(sweep);
        deadlines.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut recoveries = match self.store.redis() {
            Some(redis) => redis.recoveries(),
            None => tokio::sync::watch::channel(0).1,
        };
        // Sessions whose writes were refused: another replica took them over.
        let mut deposals = match self.store.redis() {
            Some(redis) => redis.deposals(&self.server),
            None => tokio::sync::mpsc::unbounded_channel().1,
        };
        loop {
            tokio::select! {
                _ = ticks.tick() => { self.expire_idle(Instant::now()); }
                _ = views.tick(), if self.store.redis().is_some() => self.keep_views(Instant::now()),
                _ = deadlines.tick() => self.expire_requests(Instant::now()),
                _ = beats.tick(), if self.store.redis().is_some() => self.check_views().await,
                Ok(()) = recoveries.changed() => self.after_outage().await,
                Some(deposed) = deposals.recv() => self.deposed(&deposed),
                () = shutdown.cancelled() => return,
            }
        }
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
