//! The issuer's keys, cached: fetched at first use, again when older than their maximum age,
//! and again when a token names a key the set lacks (the issuer rotated its keys): at once, or,
//! when a fetch began less than the refetch floor before, at the floor's end, so a key the
//! issuer published a moment ago is taken within the floor while any number of unknown key
//! ids, forged ones included, costs the issuer one request per floor (the requests waiting at
//! that moment share it). A failed fetch is remembered: the next one waits a backoff doubling
//! from one second to a minute, and meanwhile the keys known stay in use past their maximum age
//! for at most the stale grace.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use super::jwk::{self, Algorithm, PublicKey};

/// The wait after a first failed fetch; it doubles with each failure that follows.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between failed fetches.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// When the keys are fetched, and how long they are used.
#[derive(Debug, Clone, Copy)]
pub struct KeyPolicy {
    /// Least time between the starts of two fetches.
    pub refetch_floor: Duration,
    /// Keys older than this are fetched again at their next use.
    pub max_age: Duration,
    /// How long past `max_age` they are used while no fetch succeeds.
    pub stale_grace: Duration,
}

impl KeyPolicy {
    /// How long after their fetch keys are used at most.
    fn usable_for(&self) -> Duration {
        self.max_age.saturating_add(self.stale_grace)
    }
}

/// The keys known now, and how the fetches went.
#[derive(Default)]
struct Known {
    keys: Arc<Vec<PublicKey>>,
    /// When the fetch that brought `keys` began.
    fetched: Option<Instant>,
    /// When the last fetch began, whatever became of it.
    attempted: Option<Instant>,
    /// Fetches failed since the last that succeeded.
    failures: u32,
    /// Why the last one failed.
    error: Option<KeySetError>,
}

impl Known {
    fn age(&self, now: Instant) -> Option<Duration> {
        self.fetched.map(|at| now.saturating_duration_since(at))
    }

    /// When the next fetch may begin (`None`: none began yet).
    fn next_fetch(&self, floor: Duration) -> Option<Instant> {
        let wait = match self.failures {
            0 => floor,
            failures => backoff(failures).max(floor),
        };
        Some(self.attempted? + wait)
    }

    /// What the last fetch brought: the keys, or why there are none newer.
    fn outcome(&self) -> Result<Arc<Vec<PublicKey>>, KeySetError> {
        match (self.failures, &self.error) {
            (0, _) | (_, None) => Ok(self.keys.clone()),
            (_, Some(error)) => Err(error.clone()),
        }
    }
}

/// The wait after `failures` failed fetches in a row.
fn backoff(failures: u32) -> Duration {
    BACKOFF_FIRST
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(BACKOFF_MAX)
}

/// The cache; `fetch` is how a fresh set is had.
pub struct KeyCache {
    known: RwLock<Known>,
    /// Held while fetching: who waits for it reads what it brought.
    fetching: tokio::sync::Mutex<()>,
    policy: KeyPolicy,
}

/// What a key said of a signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The signature verifies.
    pub genuine: bool,
    /// The key is past the maximum age, used because the issuer could not be reached.
    pub stale: bool,
}

/// Why no key verified a token's signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyMiss {
    /// The set holds no key of that `kid` (or none fitting the algorithm).
    Unknown,
    /// The set could not be fetched.
    Unavailable(KeySetError),
}

/// Why the issuer's key set could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySetError {
    /// Its metadata, which names where the set is, could not be read.
    #[error("{0}")]
    Metadata(String),
    #[error("the issuer's metadata names no jwks_uri")]
    NoJwksUri,
    /// The set's document could not be fetched.
    #[error("{0}")]
    Fetch(String),
    #[error("the JWK Set is not one")]
    NotASet,
}

/// What a request needs of a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// A key the set lacks: worth waiting for the floor's end.
    Key,
    /// Newer keys than those past their maximum age.
    Newer,
}

impl KeyCache {
    pub fn new(policy: KeyPolicy) -> KeyCache {
        KeyCache {
            known: RwLock::new(Known::default()),
            fetching: tokio::sync::Mutex::new(()),
            policy,
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
    ) -> Result<Verdict, KeyMiss>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<u8>, KeySetError>>,
    {
        let asked = Instant::now();
        let (keys, age) = self.current(asked);
        let found = find(&keys, alg, kid);
        let need = match (found, age) {
            (Some(key), Some(age)) if age < self.policy.max_age => {
                return Ok(Verdict {
                    genuine: key.verifies(alg, message, signature),
                    stale: false,
                });
            }
            (Some(_), _) => Need::Newer,
            (None, _) => Need::Key,
        };
        let error = match self.refreshed(asked, need, fetch).await {
            Ok(keys) => {
                let key = find(&keys, alg, kid).ok_or(KeyMiss::Unknown)?;
                return Ok(Verdict {
                    genuine: key.verifies(alg, message, signature),
                    stale: false,
                });
            }
            Err(error) => error,
        };
        // The issuer cannot be reached: the keys known serve within the grace.
        let now = Instant::now();
        let (keys, age) = self.current(now);
        let usable = age.is_some_and(|age| age < self.policy.usable_for());
        match find(&keys, alg, kid) {
            Some(key) if usable => Ok(Verdict {
                genuine: key.verifies(alg, message, signature),
                stale: age.is_some_and(|age| age >= self.policy.max_age),
            }),
            _ => Err(KeyMiss::Unavailable(error)),
        }
    }

    /// The keys known, and their age (`None`: none fetched yet).
    fn current(&self, now: Instant) -> (Arc<Vec<PublicKey>>, Option<Duration>) {
        let known = self.read();
        (known.keys.clone(), known.age(now))
    }

    /// The set after a fetch begun no earlier than `asked`; the one known when the last fetch
    /// began less than the floor before (for a key the set lacks: after the floor's end); or
    /// why the last fetch failed, while backing off.
    async fn refreshed<F, Fut>(
        &self,
        asked: Instant,
        need: Need,
        fetch: F,
    ) -> Result<Arc<Vec<PublicKey>>, KeySetError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<u8>, KeySetError>>,
    {
        if need == Need::Key {
            // The key may have been published since the last fetch: wait for the floor to end
            // (not for a backoff: those are long, and the issuer is failing anyway).
            let next = {
                let known = self.read();
                (known.failures == 0)
                    .then(|| known.next_fetch(self.policy.refetch_floor))
                    .flatten()
            };
            if let Some(next) = next {
                tokio::time::sleep_until(next).await;
            }
        }
        let _fetching = self.fetching.lock().await;
        let now = Instant::now();
        {
            let known = self.read();
            // A fetch begun while this request waited is as new as any.
            if known.attempted.is_some_and(|at| at >= asked) {
                return known.outcome();
            }
            if known
                .next_fetch(self.policy.refetch_floor)
                .is_some_and(|next| next > now)
            {
                return known.outcome();
            }
        }
        self.attempt(fetch).await
    }

    /// One fetch, and what it brought recorded.
    async fn attempt<F, Fut>(&self, fetch: F) -> Result<Arc<Vec<PublicKey>>, KeySetError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<u8>, KeySetError>>,
    {
        let began = Instant::now();
        let fetched = fetch()
            .await
            .and_then(|document| jwk::parse_set(&document).ok_or(KeySetError::NotASet));
        let mut known = self
            .known
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        known.attempted = Some(began);
        match fetched {
            Ok(keys) => {
                known.keys = Arc::new(keys);
                known.fetched = Some(began);
                known.failures = 0;
                known.error = None;
                Ok(known.keys.clone())
            }
            Err(error) => {
                known.failures = known.failures.saturating_add(1);
                known.error = Some(error.clone());
                let retry_in = backoff(known.failures).max(self.policy.refetch_floor);
                let usable_for = known
                    .age(began)
                    .map(|age| self.policy.usable_for().saturating_sub(age));
                let written = crate::base::clock::written;
                let usable_for = usable_for.map_or_else(|| "none".to_owned(), written);
                warn!(
                    %error,
                    failures = known.failures,
                    retry_in = %written(retry_in),
                    keys_usable_for = %usable_for,
                    "the issuer's keys could not be fetched; the keys known stay in use within \
                     auth.jwks_max_age and auth.jwks_stale_grace"
                );
                Err(error)
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        self.known
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    const K1: &str = r#"{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#;
    const K2: &str = r#"{"kty":"OKP","crv":"Ed25519","kid":"k2","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#;

    /// An issuer whose set and reachability the test changes.
    #[derive(Default)]
    struct Issuer {
        fetches: AtomicUsize,
        rotated: AtomicBool,
        down: AtomicBool,
    }

    impl Issuer {
        fn fetches(&self) -> usize {
            self.fetches.load(Ordering::SeqCst)
        }
    }

    fn policy(floor: u64, max_age: u64, grace: u64) -> KeyPolicy {
        KeyPolicy {
            refetch_floor: Duration::from_secs(floor),
            max_age: Duration::from_secs(max_age),
            stale_grace: Duration::from_secs(grace),
        }
    }

    async fn ask(cache: &KeyCache, kid: &str, issuer: &Issuer) -> Result<Verdict, KeyMiss> {
        cache
            .verify(Algorithm::EdDsa, Some(kid), b"m", b"s", || async {
                issuer.fetches.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                if issuer.down.load(Ordering::SeqCst) {
                    return Err(KeySetError::Fetch("down".to_owned()));
                }
                let keys = match issuer.rotated.load(Ordering::SeqCst) {
                    false => K1.to_owned(),
                    true => format!("{K1},{K2}"),
                };
                Ok(format!(r#"{{"keys":[{keys}]}}"#).into_bytes())
            })
            .await
    }

    const FRESH: Result<Verdict, KeyMiss> = Ok(Verdict {
        genuine: false,
        stale: false,
    });
    const STALE: Result<Verdict, KeyMiss> = Ok(Verdict {
        genuine: false,
        stale: true,
    });

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_unknown_kids_costs_one_fetch_per_floor() {
        let cache = KeyCache::new(policy(1, 3600, 0));
        let issuer = Issuer::default();
        assert_eq!(ask(&cache, "k1", &issuer).await, FRESH);
        assert_eq!(issuer.fetches(), 1);
        tokio::time::advance(Duration::from_millis(100)).await;
        let start = Instant::now();
        let burst = (0..20).map(|_| ask(&cache, "forged", &issuer));
        let answers = futures_util::future::join_all(burst).await;
        assert!(answers.iter().all(|a| *a == Err(KeyMiss::Unknown)));
        assert_eq!(issuer.fetches(), 2, "once for the whole burst");
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(900),
            "at the floor's end"
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        let burst = (0..20).map(|_| ask(&cache, "forged", &issuer));
        futures_util::future::join_all(burst).await;
        assert_eq!(issuer.fetches(), 3, "at once, past the floor");
        assert_eq!(ask(&cache, "k1", &issuer).await, FRESH);
        assert_eq!(issuer.fetches(), 3, "a known key is not fetched");
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_published_within_the_floor_is_taken_at_its_end() {
        let cache = KeyCache::new(policy(1, 3600, 0));
        let issuer = Issuer::default();
        ask(&cache, "k1", &issuer).await.unwrap();
        tokio::time::advance(Duration::from_millis(300)).await;
        issuer.rotated.store(true, Ordering::SeqCst);
        assert_eq!(ask(&cache, "k2", &issuer).await, FRESH);
        assert_eq!(issuer.fetches(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn keys_older_than_their_maximum_age_are_fetched_again() {
        let cache = KeyCache::new(policy(1, 60, 0));
        let issuer = Issuer::default();
        ask(&cache, "k1", &issuer).await.unwrap();
        tokio::time::advance(Duration::from_secs(61)).await;
        ask(&cache, "k1", &issuer).await.unwrap();
        assert_eq!(issuer.fetches(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_fetches_back_off_doubling_up_to_a_minute() {
        let cache = KeyCache::new(policy(1, 3600, 0));
        let issuer = Issuer::default();
        issuer.down.store(true, Ordering::SeqCst);
        let mut tries_at = Vec::new();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(300) {
            let before = issuer.fetches();
            let answer = ask(&cache, "k1", &issuer).await;
            assert_eq!(
                answer,
                Err(KeyMiss::Unavailable(KeySetError::Fetch("down".into())))
            );
            if issuer.fetches() > before {
                tries_at.push(start.elapsed().as_secs());
            }
            tokio::time::advance(Duration::from_millis(500)).await;
        }
        assert_eq!(tries_at, [0, 1, 3, 7, 15, 31, 63, 123, 183, 243]);
        issuer.down.store(false, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(ask(&cache, "k1", &issuer).await, FRESH);
        tokio::time::advance(Duration::from_secs(1)).await;
        issuer.rotated.store(true, Ordering::SeqCst);
        assert_eq!(ask(&cache, "k2", &issuer).await, FRESH, "no backoff left");
    }

    #[tokio::test(start_paused = true)]
    async fn known_keys_serve_past_their_age_within_the_grace_while_the_issuer_is_down() {
        let cache = KeyCache::new(policy(1, 60, 600));
        let issuer = Issuer::default();
        ask(&cache, "k1", &issuer).await.unwrap();
        issuer.down.store(true, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(ask(&cache, "k1", &issuer).await, STALE);
        assert_eq!(ask(&cache, "k1", &issuer).await, STALE);
        assert_eq!(issuer.fetches(), 2, "backed off in between");
        assert_eq!(
            ask(&cache, "k2", &issuer).await,
            Err(KeyMiss::Unavailable(KeySetError::Fetch("down".into()))),
            "an unknown key cannot be told"
        );
        tokio::time::advance(Duration::from_secs(600)).await;
        assert_eq!(
            ask(&cache, "k1", &issuer).await,
            Err(KeyMiss::Unavailable(KeySetError::Fetch("down".into()))),
            "past the grace"
        );
        issuer.down.store(false, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(ask(&cache, "k1", &issuer).await, FRESH, "back");
    }
}
