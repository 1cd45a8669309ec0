//! Shutting down without losing what was taken: new sessions are refused (503, retry
//! elsewhere), the requests in flight are answered (within a bound), and only then are the
//! sessions ended here; with a shared store each is handed to another replica as soon as nothing
//! is in flight on it (`replica::handover`), and new requests for it follow it there.

use crate::session::EndReason;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Registry;

/// How often a drain looks again at what is still in flight.
const DRAIN_CHECK: Duration = Duration::from_millis(10);

impl Registry {
    /// From now on: no new sessions, no sessions taken over, and (with the memory store) no
    /// new requests; with a shared store, a request for a session of this replica's waits until
    /// it is handed over and follows it. Answers to the server, notifications and reads go on.
    pub fn leave(&self) {
        self.leaving.store(true, Ordering::Release);
    }

    pub(in crate::session) fn is_leaving(&self) -> bool {
        self.leaving.load(Ordering::Acquire)
    }

    /// Waits until no session here has a request in flight, at most until `deadline`; returns
    /// how many were still in flight then (they get the gap rule's error wherever the session
    /// goes on, or end with it). With a shared store, meanwhile, each session with nothing in
    /// flight is handed to another replica.
    pub async fn drain(&self, deadline: Instant) -> usize {
        let mut handing_over = self.store.redis().is_some();
        loop {
            if handing_over {
                handing_over = self.hand_over(false).await;
            }
            let pending: usize = self.sessions.iter().map(|s| s.value().in_flight()).sum();
            if pending == 0 || Instant::now() >= deadline {
                return pending;
            }
            tokio::time::sleep(DRAIN_CHECK).await;
        }
    }

    /// Ends every session (shutdown) and waits until their upstreams are released. With a
    /// shared store the sessions stay there: each is handed to another replica, or left for
    /// the others to take over once this one has left. Views stay: a request that followed a
    /// session handed over to its new owner is answered until its connection closes.
    pub async fn end_all(&self) {
        self.hand_over(true).await;
        let ids: Vec<Arc<str>> = self.sessions.iter().map(|e| e.key().clone()).collect();
        let forget = self.store.redis().is_none();
        for id in ids {
            self.close(&id, forget, EndReason::Shutdown);
        }
        self.upstreams.release_all().await;
    }
}
