//! Tokens already verified, kept by digest until they expire so that a client reusing its token
//! costs a digest and one map read, not a signature check. Bounded: past the bound, expired
//! entries are dropped, and if none is, a new token is verified each time instead of kept.

use std::sync::Arc;

use dashmap::DashMap;

use super::digest::TokenDigest;
use super::Verified;

/// Tokens kept at most.
pub const MAX_TOKENS: usize = 10_000;

pub struct TokenCache {
    verified: DashMap<TokenDigest, Arc<Verified>>,
    capacity: usize,
}

impl Default for TokenCache {
    fn default() -> Self {
        TokenCache::with_capacity(MAX_TOKENS)
    }
}

impl TokenCache {
    pub fn with_capacity(capacity: usize) -> TokenCache {
        TokenCache {
            verified: DashMap::new(),
            capacity,
        }
    }

    /// `token`, verified, unless it expired by `now` (seconds since the epoch).
    pub fn get(&self, token: &TokenDigest, now: f64) -> Option<Arc<Verified>> {
        let found = self.verified.get(token)?.clone();
        if found.kept_until > now {
            return Some(found);
        }
        self.verified.remove(token);
        None
    }

    /// Keeps `token`, verified, if there is room (made by dropping expired ones).
    pub fn keep(&self, token: TokenDigest, verified: Arc<Verified>, now: f64) {
        if self.verified.len() >= self.capacity {
            self.verified.retain(|_, kept| kept.kept_until > now);
            if self.verified.len() >= self.capacity {
                return;
            }
        }
        self.verified.insert(token, verified);
    }

    pub fn len(&self) -> usize {
        self.verified.len()
    }

    pub fn is_empty(&self) -> bool {
        self.verified.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn until(kept_until: f64) -> Arc<Verified> {
        Arc::new(Verified {
            kept_until,
            ..Verified::default()
        })
    }

    #[test]
    fn the_bound_holds_and_expired_tokens_make_room() {
        let digests = super::super::digest::Digests::default();
        let [a, b, c] = ["a", "b", "c"].map(|token| digests.of_token(token));
        let cache = TokenCache::with_capacity(2);
        cache.keep(a, until(10.0), 0.0);
        cache.keep(b, until(20.0), 0.0);
        cache.keep(c, until(30.0), 0.0);
        assert_eq!(cache.len(), 2);
        assert!(cache.get(&c, 0.0).is_none(), "no room");
        cache.keep(c, until(30.0), 15.0);
        assert!(cache.get(&c, 15.0).is_some());
        assert!(cache.get(&a, 15.0).is_none(), "expired");
        assert!(cache.get(&b, 25.0).is_none(), "expired on read");
    }
}
