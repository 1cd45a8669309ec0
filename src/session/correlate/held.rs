//! How many calls each principal has waiting for its input (`input_required`): bounded, so a
//! client that asks and never answers cannot pile up held requests on the servers.

use std::collections::HashSet;

use dashmap::DashMap;
use prometheus_client::metrics::gauge::Gauge;

/// The calls each principal has waiting for input.
pub struct HeldCalls {
    by_principal: DashMap<String, HashSet<String>>,
    limit: usize,
    /// How many are held, all principals together (`mcp_proxy_input_required_held`).
    held: Gauge,
}

impl HeldCalls {
    pub fn new(limit: usize, held: Gauge) -> HeldCalls {
        HeldCalls {
            by_principal: DashMap::new(),
            limit,
            held,
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Counts `round` (one round of one held call, however the caller names it) against its
    /// principal; false if the principal is at its limit.
    pub fn hold(&self, principal: &str, round: String) -> bool {
        let mut calls = self.by_principal.entry(principal.to_owned()).or_default();
        if calls.len() >= self.limit {
            return false;
        }
        if calls.insert(round) {
            self.held.inc();
        }
        true
    }

    /// `round` no longer waits (its retry came, or it was released); idempotent.
    pub fn release(&self, principal: &str, round: &str) {
        let emptied = match self.by_principal.get_mut(principal) {
            Some(mut calls) => {
                if calls.remove(round) {
                    self.held.dec();
                }
                calls.is_empty()
            }
            None => false,
        };
        if emptied {
            self.by_principal
                .remove_if(principal, |_, calls| calls.is_empty());
        }
    }
}

impl Default for HeldCalls {
    fn default() -> HeldCalls {
        HeldCalls::new(DEFAULT_LIMIT, Gauge::default())
    }
}

/// Calls one principal may have waiting for input by default.
pub const DEFAULT_LIMIT: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_holds_up_to_its_limit_and_others_are_not_counted_against_it() {
        let gauge = Gauge::default();
        let held = HeldCalls::new(2, gauge.clone());
        assert!(held.hold("alice", "s1 a".into()));
        assert!(
            held.hold("alice", "s1 a".into()),
            "the same round again is no new hold"
        );
        assert!(held.hold("alice", "s2 b".into()));
        assert!(!held.hold("alice", "s3 c".into()), "over the limit");
        assert!(
            held.hold("bob", "s4 d".into()),
            "another principal's own limit"
        );
        assert_eq!(gauge.get(), 3);
    }

    #[test]
    fn a_release_frees_a_place_once_and_forgets_an_emptied_principal() {
        let gauge = Gauge::default();
        let held = HeldCalls::new(1, gauge.clone());
        assert!(held.hold("alice", "s1 a".into()));
        held.release("alice", "s1 a");
        held.release("alice", "s1 a");
        held.release("nobody", "s9 z");
        assert_eq!(gauge.get(), 0, "idempotent");
        assert!(held.by_principal.is_empty());
        assert!(held.hold("alice", "s2 b".into()));
    }
}
