//! Initialized upstream sessions for 2026-07-28 requests without a principal, in front of a
//! stdio server with a child per session, so that such a request does not wait for a process
//! to start and answer `initialize`. At most `size` exist: ready, being prepared, or lent.
//!
//! By default a session serves ONE request: the pool keeps sessions started and initialized
//! ahead of requests (from the first such request on, and refilled in the background), a
//! request takes one ready for the capabilities it declares, and once the request is over that
//! session is ended (its child stopped) and a fresh one is prepared in its place. Nothing one
//! stranger left in a server's process (a stateful tool's state) reaches another.
//!
//! With `reuse` (for servers that keep nothing per client) a session comes back to the pool
//! after its request instead, for the next one, only as it was lent: its server alive, nothing
//! in flight, no server request unanswered, no request given up (cancelled, or timed out: its
//! server may still be at it). Anything else is ended and its place freed. What the server
//! keeps in its own process is then seen by later borrowers.
//!
//! Either way a session is initialized with the capabilities its borrower declares and the
//! proxy's own `clientInfo`, so nothing of an earlier borrower's is in it; a session ready for
//! other capabilities gives its place up when every place is taken. When none is ready a
//! request waits `wait` for one being prepared (or given back), then is refused (503,
//! `Retry-After`). One whose request waits for the client's input (`input_required`) leaves
//! the pool and ends with that request; `subscriptions/listen` gets a session of its own (see
//! `mod.rs`), and 2026-07-28 requests carry no `logging/setLevel` nor `resources/subscribe`.
//! A ready session idle-expired like any other gives its place up: an idle pool drains, and
//! fills again at the next request.

use std::collections::{HashMap, VecDeque};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use serde_json::{Map, Value};
use tokio::sync::{oneshot, Notify};
use tracing::debug;

use super::checks::RequestMeta;
use super::correlation::{
    canonical, client_params, open_with, usable, Correlated, Correlation, Ending, Initialized,
    Newest,
};
use crate::front::rejection::Rejection;
use crate::ids::Principal;
use crate::metrics::{Refusal, ServerMetrics};
use crate::session::{Registry, Session};

/// `session.anonymous_pool` unless configured.
pub const DEFAULT_SIZE: usize = 4;
/// `session.anonymous_pool_wait` unless configured.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// The client capabilities a session is initialized with; equal when their canonical forms
/// are.
#[derive(Debug, Clone)]
struct Want {
    key: String,
    capabilities: Arc<Map<String, Value>>,
}

impl Want {
    fn new(capabilities: &Map<String, Value>) -> Want {
        Want {
            key: canonical(capabilities),
            capabilities: Arc::new(capabilities.clone()),
        }
    }
}

/// The pool's book-keeping, without I/O: the ready sessions (with the capabilities they were
/// initialized with), how many are being prepared for which capabilities, how many are lent,
/// and how many borrowers wait for which. Ready, being prepared and lent together never
/// exceed `size`.
#[derive(Debug)]
struct Slots<T> {
    size: usize,
    /// Oldest first.
    ready: VecDeque<(Want, T)>,
    preparing: HashMap<String, usize>,
    lent: usize,
    waiting: HashMap<String, (usize, Want)>,
}

/// A place `Slots::claim` found for one more session.
#[derive(Debug, PartialEq, Eq)]
enum Claimed<T> {
    /// None: as many are being prepared for those capabilities as borrowers wait for them,
    /// or every place is lent or being prepared.
    No,
    /// A free place.
    Free,
    /// The place of this ready one, initialized for other capabilities, which is to be ended.
    Evicted(T),
}

impl<T> Slots<T> {
    fn new(size: usize) -> Slots<T> {
        Slots {
            size,
            ready: VecDeque::new(),
            preparing: HashMap::new(),
            lent: 0,
            waiting: HashMap::new(),
        }
    }

    fn places(&self) -> usize {
        self.ready.len() + self.preparing.values().sum::<usize>() + self.lent
    }

    fn preparing_for(&self, key: &str) -> usize {
        self.preparing.get(key).copied().unwrap_or(0)
    }

    fn begin(&mut self, want: &Want) {
        *self.preparing.entry(want.key.clone()).or_default() += 1;
    }

    fn done(&mut self, key: &str) {
        if let Some(count) = self.preparing.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                self.preparing.remove(key);
            }
        }
    }

    /// A ready one for `want`, lent now: the newest (with reuse, the warmest).
    fn take(&mut self, want: &Want) -> Option<T> {
        let at = self.ready.iter().rposition(|(w, _)| w.key == want.key)?;
        let (_, taken) = self.ready.remove(at)?;
        self.lent += 1;
        Some(taken)
    }

    /// A borrower waits for one of `want`.
    fn wait(&mut self, want: &Want) {
        self.waiting
            .entry(want.key.clone())
            .or_insert((0, want.clone()))
            .0 += 1;
    }

    /// A borrower of `key` waits no more.
    fn unwait(&mut self, key: &str) {
        if let Some((count, _)) = self.waiting.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                self.waiting.remove(key);
            }
        }
    }

    /// A place for one more to be prepared for `want`, which a borrower waits for.
    fn claim(&mut self, want: &Want) -> Claimed<T> {
        let waiting = self.waiting.get(&want.key).map_or(0, |(count, _)| *count);
        if self.preparing_for(&want.key) >= waiting {
            return Claimed::No;
        }
        if self.places() < self.size {
            self.begin(want);
            return Claimed::Free;
        }
        let Some(at) = self.ready.iter().position(|(w, _)| w.key != want.key) else {
            return Claimed::No;
        };
        let Some((_, evicted)) = self.ready.remove(at) else {
            return Claimed::No;
        };
        self.begin(want);
        Claimed::Evicted(evicted)
    }

    /// Places taken to be prepared for `want` until the pool is full; how many.
    fn top_up(&mut self, want: &Want) -> usize {
        let free = self.size.saturating_sub(self.places());
        if free > 0 {
            *self.preparing.entry(want.key.clone()).or_default() += free;
        }
        free
    }

    /// One prepared for `want` is ready.
    fn prepared(&mut self, want: Want, ready: T) {
        self.done(&want.key);
        self.ready.push_back((want, ready));
    }

    /// One being prepared for `key` failed: its place is free.
    fn failed(&mut self, key: &str) {
        self.done(key);
    }

    /// A lent one comes back ready (with reuse).
    fn give_back(&mut self, want: Want, ready: T) {
        self.lent = self.lent.saturating_sub(1);
        self.ready.push_back((want, ready));
    }

    /// A lent one will not come back: its place is free.
    fn release(&mut self) {
        self.lent = self.lent.saturating_sub(1);
    }

    /// A lent one will not come back: its place goes to one prepared for what a borrower
    /// waits for and nothing is being prepared for, else for `want` again; that.
    fn replace(&mut self, want: Want) -> Want {
        self.lent = self.lent.saturating_sub(1);
        let wanted = self
            .waiting
            .iter()
            .find(|(key, (count, _))| *count > self.preparing_for(key))
            .map(|(_, (_, wanted))| wanted.clone());
        let next = wanted.unwrap_or(want);
        self.begin(&next);
        next
    }

    /// Drops the ready one `gone` picks; whether there was one.
    fn remove_ready(&mut self, gone: impl Fn(&T) -> bool) -> bool {
        let Some(at) = self.ready.iter().position(|(_, t)| gone(t)) else {
            return false;
        };
        self.ready.remove(at);
        true
    }
}

/// A session in the pool.
struct Pooled {
    session: Arc<Session>,
    initialized: Arc<Initialized>,
}

/// Opens the pool's sessions.
#[derive(Clone)]
struct Opener {
    registry: Arc<Registry>,
    newest: Newest,
}

impl Opener {
    /// A session of the anonymous principal, initialized for `want` with the proxy's own
    /// `clientInfo`.
    async fn open(&self, want: &Want) -> Result<Pooled, Rejection> {
        let params = client_params(&want.capabilities, None);
        let (session, initialized) = open_with(
            &self.registry,
            &self.newest,
            Principal::anonymous(),
            params,
            None,
        )
        .await?;
        Ok(Pooled {
            session,
            initialized,
        })
    }
}

struct Shared {
    slots: Mutex<Slots<Pooled>>,
    /// Woken when a session is ready, a place freed, or a preparation over.
    changed: Notify,
    /// Whether a session serves request after request.
    reuse: bool,
    /// How many are ready (`mcp_proxy_anonymous_pool_ready`).
    ready: Gauge,
}

/// The slots, locked; the ready gauge follows them when unlocked.
struct Locked<'a> {
    slots: MutexGuard<'a, Slots<Pooled>>,
    ready: &'a Gauge,
}

impl Deref for Locked<'_> {
    type Target = Slots<Pooled>;
    fn deref(&self) -> &Slots<Pooled> {
        &self.slots
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Slots<Pooled> {
        &mut self.slots
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.ready
            .set(i64::try_from(self.slots.ready.len()).unwrap_or(i64::MAX));
    }
}

impl Shared {
    fn slots(&self) -> Locked<'_> {
        Locked {
            slots: self.slots.lock().unwrap_or_else(|e| e.into_inner()),
            ready: &self.ready,
        }
    }

    /// Starts preparing a session for `want`, whose place is taken already; a failure goes to
    /// `report` (the borrower that asked for it) if any.
    fn prepare(
        self: &Arc<Self>,
        opener: &Opener,
        want: Want,
        report: Option<oneshot::Sender<Rejection>>,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.slots().failed(&want.key);
            return;
        };
        let shared = self.clone();
        let opener = opener.clone();
        runtime.spawn(async move {
            match opener.open(&want).await {
                Ok(pooled) => {
                    let ended = pooled.session.ended.clone();
                    let id = pooled.session.id().to_owned();
                    shared.slots().prepared(want, pooled);
                    shared.watch(ended, id);
                }
                Err(rejection) => {
                    // Under the lock: a borrower that finds the place free finds why too.
                    let mut slots = shared.slots();
                    slots.failed(&want.key);
                    match report {
                        Some(report) => {
                            let _ = report.send(rejection);
                        }
                        None => {
                            let error = rejection.message;
                            debug!(%error, "a pooled session could not be prepared");
                        }
                    }
                }
            }
            shared.changed.notify_waiters();
        });
    }

    /// A ready session ended (idle expiry, shutdown) gives its place up.
    fn watch(self: &Arc<Self>, ended: tokio_util::sync::CancellationToken, id: String) {
        let shared: Weak<Shared> = Arc::downgrade(self);
        tokio::spawn(async move {
            ended.cancelled().await;
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let gone = shared.slots().remove_ready(|p| p.session.id() == id);
            if gone {
                shared.changed.notify_waiters();
            }
        });
    }

    /// A lent session (lent for `want`) will not come back: a fresh one is prepared in its
    /// place, or with reuse its place is freed.
    fn lost(self: &Arc<Self>, opener: &Opener, want: Want) {
        if self.reuse {
            self.slots().release();
            self.changed.notify_waiters();
            return;
        }
        let next = self.slots().replace(want);
        self.prepare(opener, next, None);
    }
}

/// Unregisters a waiting borrower however its wait ends.
struct Waiting {
    shared: Arc<Shared>,
    key: String,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.shared.slots().unwait(&self.key);
    }
}

/// The pool of one served server.
pub struct AnonymousPool {
    shared: Arc<Shared>,
    size: usize,
    /// How long a request waits for a session to be ready before it is refused.
    wait: Duration,
}

impl AnonymousPool {
    /// A pool of `size` sessions, each serving one request, or request after request with
    /// `reuse`; `ready` follows how many are ready.
    pub fn new(size: usize, wait: Duration, reuse: bool, ready: Gauge) -> AnonymousPool {
        AnonymousPool {
            shared: Arc::new(Shared {
                slots: Mutex::new(Slots::new(size)),
                changed: Notify::new(),
                reuse,
                ready,
            }),
            size,
            wait,
        }
    }

    /// Whether requests borrow from it (a size of 0 turns it off).
    pub fn lends(&self) -> bool {
        self.size > 0
    }

    /// A session for one anonymous request declaring `meta`'s capabilities: one ready for
    /// them, else the next one prepared (or given back) for them within `wait`.
    pub async fn borrow(
        &self,
        correlation: &Correlation,
        registry: &Arc<Registry>,
        metrics: &ServerMetrics,
        meta: &RequestMeta,
    ) -> Result<Correlated, Rejection> {
        let shared = &self.shared;
        let want = Want::new(&meta.capabilities);
        let opener = Opener {
            registry: registry.clone(),
            newest: correlation.newest_handle(),
        };
        let deadline = crate::clock::from_now(self.wait);
        let mut waiting: Option<Waiting> = None;
        // The failure of the preparation this request asked for, if one is under way.
        let mut report: Option<oneshot::Receiver<Rejection>> = None;
        loop {
            let changed = shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let mut evicted = None;
            let mut starts = Vec::new();
            let taken = {
                let mut slots = shared.slots();
                let taken = slots.take(&want);
                if taken.is_none() {
                    if let Some(receiver) = report.as_mut() {
                        match receiver.try_recv() {
                            Ok(rejection) => return Err(rejection),
                            Err(oneshot::error::TryRecvError::Closed) => report = None,
                            Err(oneshot::error::TryRecvError::Empty) => {}
                        }
                    }
                    if waiting.is_none() {
                        slots.wait(&want);
                        waiting = Some(Waiting {
                            shared: shared.clone(),
                            key: want.key.clone(),
                        });
                        metrics.anonymous_pool_misses_total.inc();
                    }
                    if report.is_none() {
                        match slots.claim(&want) {
                            Claimed::No => {}
                            Claimed::Free => starts.push(true),
                            Claimed::Evicted(pooled) => {
                                evicted = Some(pooled);
                                starts.push(true);
                            }
                        }
                    }
                }
                if !shared.reuse {
                    starts.extend((0..slots.top_up(&want)).map(|_| false));
                }
                taken
            };
            if let Some(evicted) = evicted {
                registry.end(evicted.session.id());
            }
            for reported in starts {
                let sender = reported.then(|| {
                    let (sender, receiver) = oneshot::channel();
                    report = Some(receiver);
                    sender
                });
                shared.prepare(&opener, want.clone(), sender);
            }
            match taken {
                Some(pooled) if usable(&pooled.session) => {
                    if waiting.is_none() {
                        metrics.anonymous_pool_hits_total.inc();
                    }
                    return Ok(self.lend(opener, want, pooled));
                }
                Some(stale) => {
                    // Its server died while it was ready: its place goes to a fresh one.
                    registry.end(stale.session.id());
                    shared.lost(&opener, want.clone());
                    continue;
                }
                None => {}
            }
            let outcome = tokio::time::timeout_at(deadline, async {
                match report.as_mut() {
                    Some(receiver) => tokio::select! {
                        biased;
                        failed = receiver => Some(failed.ok()),
                        _ = &mut changed => None,
                    },
                    None => {
                        changed.await;
                        None
                    }
                }
            })
            .await;
            match outcome {
                Err(_) => {
                    metrics.session_refused(Refusal::AnonymousPool);
                    return Err(Rejection::anonymous_pool_busy(self.size, self.wait));
                }
                Ok(Some(Some(rejection))) => return Err(rejection),
                // Prepared: it is ready (unless another waiter took it first).
                Ok(Some(None)) => report = None,
                Ok(None) => {}
            }
        }
    }

    fn lend(&self, opener: Opener, want: Want, pooled: Pooled) -> Correlated {
        let loan = Loan {
            shared: self.shared.clone(),
            opener,
            abandoned_before: pooled.session.abandoned_requests(),
            want,
            pooled: Some((pooled.session.clone(), pooled.initialized.clone())),
        };
        Correlated {
            session: pooled.session,
            initialized: pooled.initialized,
            ending: Some(Box::new(loan)),
        }
    }
}

/// A session lent to one request. Once the request is over (dropped) it is ended and a fresh
/// one prepared in its place; with reuse it goes back to the pool if it is as it was lent.
struct Loan {
    shared: Arc<Shared>,
    opener: Opener,
    /// The capabilities it was initialized with.
    want: Want,
    /// Requests given up on it when it was lent.
    abandoned_before: u64,
    /// `None` once it left the pool.
    pooled: Option<(Arc<Session>, Arc<Initialized>)>,
}

impl Ending for Loan {
    /// The session leaves the pool, and is ended by whatever finishes the request.
    fn disarm(mut self: Box<Self>) {
        if self.pooled.take().is_some() {
            self.shared.lost(&self.opener, self.want.clone());
        }
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        let Some((session, initialized)) = self.pooled.take() else {
            return;
        };
        let as_lent = || {
            usable(&session)
                && session.quiet()
                && session.abandoned_requests() == self.abandoned_before
        };
        if self.shared.reuse && as_lent() {
            let pooled = Pooled {
                session,
                initialized,
            };
            self.shared.slots().give_back(self.want.clone(), pooled);
            self.shared.changed.notify_waiters();
            return;
        }
        self.opener.registry.end(session.id());
        self.shared.lost(&self.opener, self.want.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want(key: &str) -> Want {
        Want {
            key: key.into(),
            capabilities: Arc::default(),
        }
    }

    #[test]
    fn lends_a_ready_one_of_the_same_capabilities_the_newest_first() {
        let mut slots = Slots::new(3);
        assert_eq!(slots.top_up(&want("a")), 3);
        slots.prepared(want("a"), 1);
        slots.prepared(want("a"), 2);
        assert_eq!(slots.take(&want("b")), None);
        assert_eq!(slots.take(&want("a")), Some(2));
        assert_eq!(slots.take(&want("a")), Some(1));
        assert_eq!(slots.take(&want("a")), None, "the third is being prepared");
        assert_eq!((slots.lent, slots.places()), (2, 3));
    }

    #[test]
    fn a_borrower_claims_a_place_only_for_what_nothing_is_prepared_for() {
        let mut slots = Slots::new(2);
        slots.wait(&want("a"));
        assert_eq!(slots.claim(&want("a")), Claimed::Free);
        assert_eq!(
            slots.claim(&want("a")),
            Claimed::No,
            "one waits, one coming"
        );
        slots.wait(&want("a"));
        assert_eq!(slots.claim(&want("a")), Claimed::Free);
        slots.wait(&want("b"));
        assert_eq!(slots.claim(&want("b")), Claimed::No, "full");
        slots.prepared(want("a"), 7);
        // Full: a ready one of other capabilities makes way.
        assert_eq!(slots.claim(&want("b")), Claimed::Evicted(7));
        assert_eq!(slots.places(), 2);
        slots.unwait("a");
        slots.unwait("a");
        slots.unwait("b");
        assert!(slots.waiting.is_empty());
    }

    #[test]
    fn a_place_lost_goes_to_what_a_borrower_waits_for() {
        let mut slots = Slots::new(1);
        slots.top_up(&want("a"));
        slots.prepared(want("a"), 1);
        assert_eq!(slots.take(&want("a")), Some(1));
        assert_eq!(slots.top_up(&want("a")), 0, "full");
        assert_eq!(slots.replace(want("a")).key, "a");
        slots.prepared(want("a"), 2);
        assert_eq!(slots.take(&want("a")), Some(2));
        slots.wait(&want("b"));
        assert_eq!(slots.replace(want("a")).key, "b");
        assert_eq!(slots.claim(&want("b")), Claimed::No, "b is being prepared");
        slots.failed("b");
        assert_eq!(slots.places(), 0);
        assert_eq!(slots.claim(&want("b")), Claimed::Free);
    }

    #[test]
    fn with_reuse_a_lent_one_comes_back_and_a_released_place_is_free() {
        let mut slots = Slots::new(1);
        slots.wait(&want("a"));
        assert_eq!(slots.claim(&want("a")), Claimed::Free);
        slots.unwait("a");
        slots.prepared(want("a"), 1);
        assert_eq!(slots.take(&want("a")), Some(1));
        slots.give_back(want("a"), 1);
        assert_eq!(slots.take(&want("a")), Some(1));
        slots.release();
        assert_eq!(slots.places(), 0);
        assert!(!slots.remove_ready(|_| true), "none ready");
    }

    #[test]
    fn a_pool_of_none_lends_nothing() {
        let mut slots: Slots<u8> = Slots::new(0);
        slots.wait(&want("a"));
        assert_eq!(slots.claim(&want("a")), Claimed::No);
        assert_eq!(slots.top_up(&want("a")), 0);
        assert!(!AnonymousPool::new(0, DEFAULT_WAIT, false, Gauge::default()).lends());
    }
}
