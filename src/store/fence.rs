//! An owner's hold on one session in the shared store: the owner epoch every write it makes is
//! conditional on (a takeover changes the epoch in the same script that changes the owner, so a
//! deposed owner's writes are refused), and the lease term in which it last knew it still owned
//! the session (after a lapse of its heartbeat it confirms again before acting).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The epoch a session has when it is created: every claim of it adds one.
pub const FIRST_EPOCH: u64 = 1;

/// What an owner holds of one session's ownership. Shared by the session's mirror and the
/// writer, which reads the epoch when it writes (not when the op was queued).
#[derive(Debug)]
pub struct Fence {
    epoch: AtomicU64,
    /// The lease term (`RedisStore`'s count of renewed heartbeats) in which ownership was last
    /// known to hold: a lapse of the lease after it means it must be confirmed again.
    confirmed_in: AtomicU64,
    /// Set once its writes are known to be refused (another replica took the session over) or
    /// once it was handed over: a refused write is then no news.
    retired: AtomicBool,
}

impl Fence {
    /// A hold on a session at `epoch`, known to be held in lease term `term`.
    pub fn new(epoch: u64, term: u64) -> Arc<Fence> {
        Arc::new(Fence {
            epoch: AtomicU64::new(epoch),
            confirmed_in: AtomicU64::new(term),
            retired: AtomicBool::new(false),
        })
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub(crate) fn confirmed_in(&self) -> u64 {
        self.confirmed_in.load(Ordering::Acquire)
    }

    /// Ownership was confirmed in lease term `term`.
    pub(crate) fn confirm(&self, term: u64) {
        self.confirmed_in.fetch_max(term, Ordering::AcqRel);
    }

    /// Marks the hold as given up; true the first time.
    pub fn retire(&self) -> bool {
        !self.retired.swap(true, Ordering::AcqRel)
    }

    /// Undoes `retire` (a handover that did not happen).
    pub fn reinstate(&self) {
        self.retired.store(false, Ordering::Release);
    }

    pub fn retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }
}

/// A session whose write the store refused for a stale epoch: another replica took it over.
#[derive(Debug, Clone)]
pub struct Deposed {
    pub session: Arc<str>,
    /// The hold that was refused (the session held here now may be a newer one).
    pub fence: Arc<Fence>,
}
