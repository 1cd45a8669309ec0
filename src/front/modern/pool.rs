//! Initialized upstream sessions lent to 2026-07-28 requests without a principal, one request
//! at a time, in front of a stdio server with a child per session: a request borrows one
//! initialized with the capabilities it declares (with the proxy's own `clientInfo`, so nothing
//! of an earlier borrower's is in it) and gives it back when answered, instead of a child
//! started and stopped per request. At most `size` exist, lent or idle; when all are lent a
//! request waits `PATIENCE` for one, then is refused (503, `Retry-After`). A session comes back
//! only as it was lent: its server alive, nothing in flight, no server request unanswered, no
//! request given up (cancelled, or timed out: its server may still be at it). Anything else is
//! ended and a new one opened when needed; one whose request waits for the client's input
//! (`input_required`) leaves the pool and ends with that request. What a borrower cannot reach
//! stays per request: `subscriptions/listen` gets a session of its own (see `mod.rs`), and
//! 2026-07-28 requests carry no `logging/setLevel` nor `resources/subscribe`. What the server
//! keeps in its own process (a stateful tool's state) is seen by later borrowers: 0 turns the
//! pool off.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderValue;
use tokio::sync::Notify;

use super::checks::RequestMeta;
use super::correlation::{canonical, usable, Correlated, Correlation, Ending, Initialized};
use crate::front::rejection::Rejection;
use crate::ids::Principal;
use crate::metrics::{Refusal, ServerMetrics};
use crate::session::{Registry, Session};

/// `session.anonymous_pool` unless configured.
pub const DEFAULT_SIZE: usize = 16;
/// `session.anonymous_pool_wait` unless configured.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// The pool's book-keeping, without I/O: the idle sessions (with the capabilities they were
/// initialized with) and how many are lent. Idle and lent together never exceed `size`.
#[derive(Debug)]
struct Slots<T> {
    size: usize,
    /// Oldest first.
    idle: VecDeque<(String, T)>,
    lent: usize,
}

/// What a borrower gets from `Slots::take`.
#[derive(Debug, PartialEq, Eq)]
enum Take<T> {
    /// An idle one initialized for these capabilities, lent now.
    Idle(T),
    /// A place for a new one, reserved; `evicted` (idle, initialized for other capabilities)
    /// gave it up and is to be ended.
    Open { evicted: Option<T> },
    /// All lent.
    Busy,
}

impl<T> Slots<T> {
    fn new(size: usize) -> Slots<T> {
        Slots {
            size,
            idle: VecDeque::new(),
            lent: 0,
        }
    }

    fn take(&mut self, key: &str) -> Take<T> {
        // The most recently given back: the warmest.
        if let Some(at) = self.idle.iter().rposition(|(k, _)| k == key) {
            if let Some((_, idle)) = self.idle.remove(at) {
                self.lent += 1;
                return Take::Idle(idle);
            }
        }
        if self.idle.len() + self.lent < self.size {
            self.lent += 1;
            return Take::Open { evicted: None };
        }
        match self.idle.pop_front() {
            Some((_, evicted)) => {
                self.lent += 1;
                Take::Open {
                    evicted: Some(evicted),
                }
            }
            None => Take::Busy,
        }
    }

    /// A lent one comes back idle.
    fn give_back(&mut self, key: String, idle: T) {
        self.lent = self.lent.saturating_sub(1);
        self.idle.push_back((key, idle));
    }

    /// A lent one (or a place reserved for one) will not come back.
    fn forget(&mut self) {
        self.lent = self.lent.saturating_sub(1);
    }
}

/// A session in the pool.
struct Pooled {
    session: Arc<Session>,
    initialized: Arc<Initialized>,
}

struct Shared {
    slots: Mutex<Slots<Pooled>>,
    /// Woken when a lent session comes back or its place is freed.
    freed: Notify,
}

impl Shared {
    fn slots(&self) -> std::sync::MutexGuard<'_, Slots<Pooled>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forget(&self) {
        self.slots().forget();
        self.freed.notify_one();
    }
}

/// The pool of one served server.
pub struct AnonymousPool {
    shared: Arc<Shared>,
    size: usize,
    /// How long a request waits for a lent session to come back before it is refused.
    wait: Duration,
}

impl AnonymousPool {
    pub fn new(size: usize, wait: Duration) -> AnonymousPool {
        AnonymousPool {
            shared: Arc::new(Shared {
                slots: Mutex::new(Slots::new(size)),
                freed: Notify::new(),
            }),
            size,
            wait,
        }
    }

    /// Whether requests borrow from it (a size of 0 turns it off).
    pub fn lends(&self) -> bool {
        self.size > 0
    }

    /// A session for one anonymous request declaring `meta`'s capabilities: an idle one
    /// initialized for them, else a new one, waiting up to `wait` while all are lent.
    pub async fn borrow(
        &self,
        correlation: &Correlation,
        registry: &Arc<Registry>,
        metrics: &ServerMetrics,
        meta: &RequestMeta,
        credential: Option<HeaderValue>,
    ) -> Result<Correlated, Rejection> {
        let key = canonical(&meta.capabilities);
        let deadline = crate::clock::from_now(self.wait);
        loop {
            let freed = self.shared.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let taken = self.shared.slots().take(&key);
            match taken {
                Take::Idle(pooled) if usable(&pooled.session) => {
                    return Ok(self.lend(registry, key, pooled));
                }
                Take::Idle(stale) => {
                    // Expired while idle, or its server died: its place goes to a new one.
                    registry.end(stale.session.id());
                    self.shared.slots().forget();
                    continue;
                }
                Take::Open { evicted } => {
                    if let Some(evicted) = evicted {
                        registry.end(evicted.session.id());
                    }
                    return self
                        .open(correlation, registry, key, meta, credential)
                        .await;
                }
                Take::Busy => {}
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                metrics.session_refused(Refusal::AnonymousPool);
                return Err(Rejection::anonymous_pool_busy(self.size, self.wait));
            }
        }
    }

    /// Opens a session for the place reserved, initialized with the proxy's own `clientInfo`.
    async fn open(
        &self,
        correlation: &Correlation,
        registry: &Arc<Registry>,
        key: String,
        meta: &RequestMeta,
        credential: Option<HeaderValue>,
    ) -> Result<Correlated, Rejection> {
        let anyone = RequestMeta {
            client_info: None,
            log_level: None,
            ..meta.clone()
        };
        let opened = correlation
            .open(registry, Principal::anonymous(), &anyone, credential)
            .await;
        match opened {
            Ok((session, initialized)) => {
                let pooled = Pooled {
                    session,
                    initialized,
                };
                Ok(self.lend(registry, key, pooled))
            }
            Err(rejection) => {
                self.shared.forget();
                Err(rejection)
            }
        }
    }

    fn lend(&self, registry: &Arc<Registry>, key: String, pooled: Pooled) -> Correlated {
        let loan = Loan {
            shared: self.shared.clone(),
            registry: registry.clone(),
            abandoned_before: pooled.session.abandoned_requests(),
            key,
            pooled: Some((pooled.session.clone(), pooled.initialized.clone())),
        };
        Correlated {
            session: pooled.session,
            initialized: pooled.initialized,
            ending: Some(Box::new(loan)),
        }
    }
}

/// A session lent to one request: given back to the pool when dropped, if it is as it was lent;
/// else ended.
struct Loan {
    shared: Arc<Shared>,
    registry: Arc<Registry>,
    /// The capabilities it was initialized with.
    key: String,
    /// Requests given up on it when it was lent.
    abandoned_before: u64,
    /// `None` once it left the pool.
    pooled: Option<(Arc<Session>, Arc<Initialized>)>,
}

impl Ending for Loan {
    /// The session leaves the pool, and is ended by whatever finishes the request.
    fn disarm(mut self: Box<Self>) {
        if self.pooled.take().is_some() {
            self.shared.forget();
        }
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        let Some((session, initialized)) = self.pooled.take() else {
            return;
        };
        let as_lent = usable(&session)
            && session.quiet()
            && session.abandoned_requests() == self.abandoned_before;
        if !as_lent {
            self.registry.end(session.id());
            self.shared.forget();
            return;
        }
        let pooled = Pooled {
            session,
            initialized,
        };
        self.shared
            .slots()
            .give_back(std::mem::take(&mut self.key), pooled);
        self.shared.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lends_an_idle_one_of_the_same_capabilities_the_warmest_first() {
        let mut slots = Slots::new(3);
        assert_eq!(slots.take("a"), Take::Open { evicted: None });
        assert_eq!(slots.take("a"), Take::Open { evicted: None });
        slots.give_back("a".into(), 1);
        slots.give_back("a".into(), 2);
        assert_eq!(slots.take("a"), Take::Idle(2));
        assert_eq!(slots.take("a"), Take::Idle(1));
        assert_eq!(slots.lent, 2);
    }

    #[test]
    fn never_holds_more_than_its_size_lent_and_idle_together() {
        let mut slots = Slots::new(2);
        assert_eq!(slots.take("a"), Take::Open { evicted: None });
        assert_eq!(slots.take("b"), Take::Open { evicted: None });
        assert_eq!(slots.take("a"), Take::Busy);
        slots.give_back("b".into(), 7);
        // Full: an idle one of other capabilities makes way.
        assert_eq!(slots.take("a"), Take::Open { evicted: Some(7) });
        assert_eq!(slots.take("b"), Take::Busy);
        assert_eq!(slots.idle.len() + slots.lent, 2);
    }

    #[test]
    fn a_place_forgotten_is_free_again() {
        let mut slots: Slots<u8> = Slots::new(1);
        assert_eq!(slots.take("a"), Take::Open { evicted: None });
        assert_eq!(slots.take("a"), Take::Busy);
        slots.forget();
        assert_eq!(slots.take("a"), Take::Open { evicted: None });
    }

    #[test]
    fn a_pool_of_none_lends_nothing() {
        let mut slots: Slots<u8> = Slots::new(0);
        assert_eq!(slots.take("a"), Take::Busy);
        assert!(!AnonymousPool::new(0, DEFAULT_WAIT).lends());
    }
}
