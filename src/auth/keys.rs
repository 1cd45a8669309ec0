//! The issuer's keys, cached: fetched at first use, again when older than their maximum age,
//! and again when a token names a key the set lacks (the issuer rotated its keys), at most once
//! per refetch interval and once for every request waiting at that moment, so a burst of
//! tokens with an unknown `kid` costs the issuer one request, and a forged `kid` no more.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use super::jwk::{self, Algorithm, PublicKey};

/// The keys known now, and when they were fetched.
#[derive(Default)]
struct Known {
    keys: Arc<Vec<PublicKey>>,
    fetched: Option<Instant>,
}

/// The cache; `fetch` is how a fresh set is had.
pub struct KeyCache {
    known: RwLock<Known>,
    /// Held while fetching: who waits for it reads what it brought.
    fetching: tokio::sync::Mutex<()>,
    refetch_interval: Duration,
    max_age: Duration,
}

/// Why no key verified a token's signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyMiss {
    /// The set holds no key of that `kid` (or none fitting the algorithm).
    Unknown,
    /// The set could not be fetched.
    Unavailable(String),
}

impl KeyCache {
    pub fn new(refetch_interval: Duration, max_age: Duration) -> KeyCache {
        KeyCache {
            known: RwLock::new(Known::default()),
            fetching: tokio::sync::Mutex::new(()),
            refetch_interval,
            max_age,
        }
    }

    /// The key that verifies `signature` over `message`, fetching the set as the rules say.
    /// `fetch` answers the JWK Set document.
    pub async fn verify<F, Fut>(
        &self,
        alg: Algorithm,
        kid: Option<&str>,
        message: &[u8],
        signature: &[u8],
        fetch: F,
    ) -> Result<bool, KeyMiss>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<u8>, String>>,
    {
        let asked = Instant::now();
        let (keys, fresh) = self.current(asked);
        if fresh {
            if let Some(key) = find(&keys, alg, kid) {
                return Ok(key.verifies(alg, message, signature));
            }
        }
        let keys = self.refreshed(asked, fetch).await?;
        find(&keys, alg, kid)
            .map(|key| key.verifies(alg, message, signature))
            .ok_or(KeyMiss::Unknown)
    }

    /// The keys known, and whether they are younger than the maximum age.
    fn current(&self, now: Instant) -> (Arc<Vec<PublicKey>>, bool) {
        let known = self
            .known
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let fresh = known
            .fetched
            .is_some_and(|at| now.saturating_duration_since(at) < self.max_age);
        (known.keys.clone(), fresh)
    }

    /// The set after a fetch begun no earlier than `asked`, or the one known when the last
    /// fetch was too recent to fetch again.
    async fn refreshed<F, Fut>(
        &self,
        asked: Instant,
        fetch: F,
    ) -> Result<Arc<Vec<PublicKey>>, KeyMiss>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<u8>, String>>,
    {
        let _fetching = self.fetching.lock().await;
        let (keys, fetched) = {
            let known = self
                .known
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            (known.keys.clone(), known.fetched)
        };
        let now = Instant::now();
        match fetched {
            // Someone fetched while this request waited: its set is as new as any.
            Some(at) if at >= asked => return Ok(keys),
            Some(at)
                if now.saturating_duration_since(at) < self.refetch_interval
                    && now.saturating_duration_since(at) < self.max_age =>
            {
                return Ok(keys)
            }
            _ => {}
        }
        let document = fetch().await.map_err(KeyMiss::Unavailable)?;
        let keys = Arc::new(
            jwk::parse_set(&document)
                .ok_or_else(|| KeyMiss::Unavailable("the JWK Set is not one".into()))?,
        );
        let mut known = self
            .known
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *known = Known {
            keys: keys.clone(),
            fetched: Some(Instant::now()),
        };
        Ok(keys)
    }
}

/// The key named by `kid`; without one, the only key fitting the algorithm.
fn find<'k>(keys: &'k [PublicKey], alg: Algorithm, kid: Option<&str>) -> Option<&'k PublicKey> {
    match kid {
        Some(kid) => keys
            .iter()
            .find(|key| key.kid.as_deref() == Some(kid) && key.fits(alg)),
        None => {
            let mut fitting = keys.iter().filter(|key| key.fits(alg));
            let only = fitting.next()?;
            fitting.next().is_none().then_some(only)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const SET: &str = r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#;

    async fn ask(cache: &KeyCache, kid: &str, fetches: &AtomicUsize) -> Result<bool, KeyMiss> {
        cache
            .verify(Algorithm::EdDsa, Some(kid), b"m", b"s", || async {
                fetches.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                Ok(SET.as_bytes().to_vec())
            })
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_unknown_kids_costs_one_fetch_per_interval() {
        let cache = KeyCache::new(Duration::from_secs(10), Duration::from_secs(3600));
        let fetches = AtomicUsize::new(0);
        assert_eq!(ask(&cache, "k1", &fetches).await, Ok(false));
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        let burst = (0..20).map(|_| ask(&cache, "forged", &fetches));
        let answers = futures_util::future::join_all(burst).await;
        assert!(answers.iter().all(|a| *a == Err(KeyMiss::Unknown)));
        assert_eq!(fetches.load(Ordering::SeqCst), 1, "within the interval");
        tokio::time::advance(Duration::from_secs(11)).await;
        let burst = (0..20).map(|_| ask(&cache, "forged", &fetches));
        futures_util::future::join_all(burst).await;
        assert_eq!(
            fetches.load(Ordering::SeqCst),
            2,
            "once for the whole burst"
        );
        assert_eq!(ask(&cache, "k1", &fetches).await, Ok(false));
        assert_eq!(
            fetches.load(Ordering::SeqCst),
            2,
            "a known key is not fetched"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keys_older_than_their_maximum_age_are_fetched_again() {
        let cache = KeyCache::new(Duration::from_secs(10), Duration::from_secs(60));
        let fetches = AtomicUsize::new(0);
        ask(&cache, "k1", &fetches).await.unwrap();
        tokio::time::advance(Duration::from_secs(61)).await;
        ask(&cache, "k1", &fetches).await.unwrap();
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
    }
}
