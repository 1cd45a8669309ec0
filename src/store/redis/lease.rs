//! This replica's lease on the sessions it owns: no other replica takes one over while the
//! replica's heartbeat key lives, so for `span` after a heartbeat was sent (and taken) it may act
//! on what it owns without asking. A lease that may have lapsed (the process was paused, or
//! starved, or Redis was slow to take a heartbeat) makes every hold confirmed before it stale:
//! each session confirms it still owns it in Redis before it acts again.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

pub(super) struct Lease {
    /// How long after a heartbeat was sent no other replica may think this one dead.
    span: Duration,
    state: Mutex<Terms>,
}

#[derive(Default)]
struct Terms {
    /// When the newest heartbeat Redis took was sent.
    renewed: Option<Instant>,
    /// Heartbeats Redis took so far: each begins a term.
    term: u64,
    /// A hold last confirmed in a term before this one must be confirmed again.
    lapsed_before: u64,
}

impl Lease {
    pub(super) fn new(span: Duration) -> Lease {
        Lease {
            span,
            state: Mutex::new(Terms::default()),
        }
    }

    fn terms(&self) -> std::sync::MutexGuard<'_, Terms> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A heartbeat sent at `sent` was taken: a new term, which it returns. If the one taken
    /// before it was sent longer than the span before this one, the lease lapsed in between.
    pub(super) fn renewed(&self, sent: Instant) -> u64 {
        let mut terms = self.terms();
        if let Some(before) = terms.renewed {
            if sent.saturating_duration_since(before) > self.span {
                terms.lapsed_before = terms.term + 1;
            }
        }
        if terms.renewed.is_none_or(|before| sent > before) {
            terms.renewed = Some(sent);
        }
        terms.term += 1;
        terms.term
    }

    /// The current term.
    pub(super) fn term(&self) -> u64 {
        self.terms().term
    }

    /// Whether a hold confirmed in term `confirmed_in` may be acted on without asking Redis:
    /// the lease holds now and has not lapsed since. A lease found lapsed now is marked so.
    pub(super) fn holds(&self, confirmed_in: u64) -> bool {
        let mut terms = self.terms();
        let fresh = terms
            .renewed
            .is_some_and(|renewed| renewed.elapsed() <= self.span);
        if !fresh {
            terms.lapsed_before = terms.term + 1;
        }
        confirmed_in >= terms.lapsed_before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lapse_makes_every_hold_confirmed_before_it_stale() {
        let lease = Lease::new(Duration::from_millis(150));
        let first = lease.renewed(Instant::now());
        assert!(lease.holds(first), "just renewed");
        tokio::time::advance(Duration::from_millis(100)).await;
        let second = lease.renewed(Instant::now());
        assert!(lease.holds(first) && lease.holds(second), "renewed in time");

        // Paused past the span: found lapsed by a request before the next heartbeat.
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(!lease.holds(second));
        let third = lease.renewed(Instant::now());
        assert!(
            !lease.holds(second),
            "confirmed before the lapse: ask again"
        );
        assert!(lease.holds(third), "confirmed after it");

        // Found lapsed by the heartbeat first: the same.
        tokio::time::advance(Duration::from_millis(500)).await;
        let fourth = lease.renewed(Instant::now());
        assert!(!lease.holds(third));
        assert!(lease.holds(fourth));
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_sent_before_a_pause_does_not_renew_the_lease_after_it() {
        let lease = Lease::new(Duration::from_millis(150));
        let first = lease.renewed(Instant::now());
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(5)).await;
        // Its answer is read only now: the lease counts from when it was sent.
        let term = lease.renewed(sent);
        assert!(!lease.holds(first) && !lease.holds(term));
    }
}
