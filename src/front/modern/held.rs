//! How many calls each principal has waiting for its input (`input_required`): bounded, so a
//! client that asks and never answers cannot pile up held requests on the servers.

use std::collections::HashSet;

use dashmap::DashMap;
use prometheus_client::metrics::gauge::Gauge;

use super::state::HeldRequest;

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

    /// Counts `held` against its principal; false if the principal is at its limit.
    pub fn hold(&self, held: &HeldRequest) -> bool {
        let mut calls = self.by_principal.entry(held.principal.clone()).or_default();
        if calls.len() >= self.limit {
            return false;
        }
        if calls.insert(tag(held)) {
            self.held.inc();
        }
        true
    }

    /// `held` no longer waits (its retry came, or it was released); idempotent.
    pub fn release(&self, held: &HeldRequest) {
        let emptied = match self.by_principal.get_mut(&held.principal) {
            Some(mut calls) => {
                if calls.remove(&tag(held)) {
                    self.held.dec();
                }
                calls.is_empty()
            }
            None => false,
        };
        if emptied {
            self.by_principal
                .remove_if(&held.principal, |_, calls| calls.is_empty());
        }
    }
}

impl Default for HeldCalls {
    fn default() -> HeldCalls {
        HeldCalls::new(DEFAULT_LIMIT, Gauge::default())
    }
}

pub use crate::session::settings::MAX_HELD_PER_PRINCIPAL as DEFAULT_LIMIT;

/// One round of one held call: its session and the server requests it waits on.
fn tag(held: &HeldRequest) -> String {
    format!(
        "{} {}",
        held.session,
        serde_json::to_string(&held.waiting).unwrap_or_default()
    )
}
