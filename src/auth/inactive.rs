//! Opaque tokens the issuer's introspection called inactive (unknown, revoked, expired),
//! remembered by digest for a short while, so the same token sent again is refused without
//! asking the issuer again. Bounded: past the bound, the ones remembered longest are dropped,
//! and if none is due, a new one is not remembered (the introspection budget still bounds
//! what it costs).

use dashmap::DashMap;

use super::digest::TokenDigest;

/// Inactive tokens remembered at most.
pub const MAX_INACTIVE: usize = 10_000;
/// How long an inactive token is remembered, in seconds.
pub const INACTIVE_KEPT: f64 = 30.0;

pub struct InactiveTokens {
    /// Token → until when (seconds since the epoch) it is taken as inactive.
    until: DashMap<TokenDigest, f64>,
    capacity: usize,
}

impl Default for InactiveTokens {
    fn default() -> Self {
        InactiveTokens::with_capacity(MAX_INACTIVE)
    }
}

impl InactiveTokens {
    pub fn with_capacity(capacity: usize) -> InactiveTokens {
        InactiveTokens {
            until: DashMap::new(),
            capacity,
        }
    }

    /// Whether `token` was found inactive less than [`INACTIVE_KEPT`] before `now`.
    pub fn contains(&self, token: &TokenDigest, now: f64) -> bool {
        let Some(until) = self.until.get(token).map(|until| *until) else {
            return false;
        };
        if until > now {
            return true;
        }
        self.until.remove(token);
        false
    }

    /// Remembers `token` as inactive from `now`, if there is room (made by dropping the ones
    /// due).
    pub fn remember(&self, token: TokenDigest, now: f64) {
        if self.until.len() >= self.capacity {
            self.until.retain(|_, until| *until > now);
            if self.until.len() >= self.capacity {
                return;
            }
        }
        self.until.insert(token, now + INACTIVE_KEPT);
    }

    pub fn len(&self) -> usize {
        self.until.len()
    }

    pub fn is_empty(&self) -> bool {
        self.until.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::digest::Digests;

    #[test]
    fn remembered_for_a_while_and_bounded() {
        let digests = Digests::default();
        let [a, b, c] = ["a", "b", "c"].map(|token| digests.of_token(token));
        let inactive = InactiveTokens::with_capacity(2);
        inactive.remember(a, 0.0);
        inactive.remember(b, 10.0);
        assert!(inactive.contains(&a, 29.0));
        assert!(!inactive.contains(&c, 29.0));
        inactive.remember(c, 20.0);
        assert_eq!(inactive.len(), 2, "no room");
        assert!(!inactive.contains(&c, 20.0));
        inactive.remember(c, 31.0);
        assert!(inactive.contains(&c, 31.0), "a due one made room");
        assert!(!inactive.contains(&a, 31.0));
        assert!(!inactive.contains(&b, 40.0), "forgotten after 30 s");
    }
}
