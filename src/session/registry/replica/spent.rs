//! Tokens good for one use (the `requestState` of a retry): the first to spend one wins,
//! atomically, on this replica, or across replicas with a shared store (Redis `SET NX`, kept
//! as long as the token lives).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::lookup::unavailable;
use crate::session::{Registry, SessionError};

/// Below this many tokens the local set is never swept.
const SWEEP_FLOOR: usize = 1024;

/// The tokens spent here, until they expire (with the memory store).
#[derive(Debug, Default)]
pub struct Spent {
    tokens: Mutex<SpentTokens>,
}

#[derive(Debug, Default)]
struct SpentTokens {
    until: HashMap<String, Instant>,
    /// How many were kept at the last sweep: the next comes when that doubles.
    swept_at: usize,
}

impl Spent {
    /// Whether `token` was unspent (and now is spent until `now + ttl`).
    fn spend(&self, token: &str, ttl: Duration, now: Instant) -> bool {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if tokens.until.len() >= SWEEP_FLOOR.max(tokens.swept_at * 2) {
            tokens.until.retain(|_, until| *until > now);
            tokens.swept_at = tokens.until.len();
        }
        match tokens.until.get(token) {
            Some(until) if *until > now => false,
            _ => {
                let until = now.checked_add(ttl).unwrap_or(now);
                tokens.until.insert(token.to_owned(), until);
                true
            }
        }
    }
}

impl Registry {
    /// Spends one-use `token`, good for `ttl`: true the first time, on any replica.
    pub async fn spend_once(&self, token: &str, ttl: Duration) -> Result<bool, SessionError> {
        match self.store.redis() {
            Some(redis) => redis
                .spend(&self.server, token, ttl)
                .await
                .map_err(|e| unavailable(&e)),
            None => Ok(self.spent.spend(token, ttl, Instant::now())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_spent_once_until_it_expires_and_expired_ones_are_swept() {
        let spent = Spent::default();
        let now = Instant::now();
        let ttl = Duration::from_secs(60);
        assert!(spent.spend("a", ttl, now));
        assert!(!spent.spend("a", ttl, now + Duration::from_secs(59)));
        assert!(spent.spend("b", ttl, now));
        for n in 0..SWEEP_FLOOR * 3 {
            spent.spend(&n.to_string(), ttl, now + Duration::from_secs(120));
        }
        let kept = spent.tokens.lock().unwrap().until.len();
        assert!(
            kept < SWEEP_FLOOR * 3 + 2,
            "the first ones were swept: {kept}"
        );
        assert!(spent.spend("a", ttl, now + Duration::from_secs(200)));
    }
}
