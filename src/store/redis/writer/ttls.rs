//! When the writer sets the TTLs of a session's keys: with a write that may create a key, and
//! otherwise at most once per a quarter of the TTL.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A session's keys, as a set: those whose TTL a round trip sets.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(super) struct Keys(u8);

impl Keys {
    pub(super) const NONE: Keys = Keys(0);
    pub(super) const RECORD: Keys = Keys(1);
    pub(super) const LOG: Keys = Keys(2);
    pub(super) const INFLIGHT: Keys = Keys(4);
    pub(super) const SUBS: Keys = Keys(8);
    pub(super) const ALL: Keys = Keys(15);

    pub(super) fn contains(self, other: Keys) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOrAssign for Keys {
    fn bitor_assign(&mut self, other: Keys) {
        self.0 |= other.0;
    }
}

/// When each session's keys last had their TTL set. A key a write may have created gets its
/// TTL in the same round trip; the rest of an active session's keys get theirs again at most
/// once per `every`, not at every write.
pub(super) struct Ttls {
    pub(super) millis: u64,
    every: Duration,
    set: HashMap<(Arc<str>, Arc<str>), Instant>,
    /// Entries after the last pruning: the map is pruned of stale ones when it doubles.
    pruned_at: usize,
}

impl Ttls {
    pub(super) fn new(ttl: Duration) -> Ttls {
        Ttls {
            millis: ttl.as_millis() as u64,
            every: (ttl / 4).min(Duration::from_secs(1)),
            set: HashMap::new(),
            pruned_at: 1024,
        }
    }

    /// The keys of `session` whose TTL is set now: those `created` may have made, or all of
    /// them when they were last set longer than `every` ago.
    pub(super) fn due(
        &mut self,
        session: &(Arc<str>, Arc<str>),
        created: Keys,
        now: Instant,
    ) -> Keys {
        if self.set.len() > 2 * self.pruned_at {
            self.set
                .retain(|_, at| now.duration_since(*at) < self.every);
            self.pruned_at = self.set.len().max(1024);
        }
        match self.set.get(session) {
            Some(at) if now.duration_since(*at) < self.every => created,
            _ => {
                self.set.insert(session.clone(), now);
                Keys::ALL
            }
        }
    }

    pub(super) fn forget(&mut self, session: &(Arc<str>, Arc<str>)) {
        self.set.remove(session);
    }

    pub(super) fn clear(&mut self) {
        self.set.clear();
    }
}
