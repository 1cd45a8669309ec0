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
//! `modern/mod.rs`), and 2026-07-28 requests carry no `logging/setLevel` nor `resources/subscribe`.
//! A ready session idle-expired like any other gives its place up: an idle pool drains, and
//! fills again at the next request.
//!
//! `slots` keeps the pool's book; here the sessions are prepared, lent and taken back.

mod slots;

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{oneshot, Notify};
use tracing::debug;

use super::{
    client_params, open_with, usable, ClientDeclared, Correlated, Ending, Initialized, Newest,
    PrincipalSessions,
};
use crate::base::caller::Caller;
use crate::session::EndReason;
use crate::session::{Registry, Session, SessionError};
use crate::telemetry::metrics::{Refusal, ServerMetrics};
use slots::{Claimed, Slots, Want};

/// `session.anonymous_pool` unless configured.
pub const DEFAULT_SIZE: usize = 4;
/// `session.anonymous_pool_wait` unless configured.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

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
    async fn open(&self, want: &Want) -> Result<Pooled, SessionError> {
        let params = client_params(&want.capabilities, None);
        let anonymous = Caller::anonymous();
        let (session, initialized) =
            open_with(&self.registry, &self.newest, &anonymous, params).await?;
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
        report: Option<oneshot::Sender<SessionError>>,
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
                Err(error) => {
                    // Under the lock: a borrower that finds the place free finds why too.
                    let mut slots = shared.slots();
                    slots.failed(&want.key);
                    match report {
                        Some(report) => {
                            let _ = report.send(error);
                        }
                        None => {
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

/// A request borrowing a session, while it waits for one.
struct Borrower {
    /// The capabilities it declares.
    want: Want,
    /// Counted as waiting (from its first miss on).
    waiting: Option<Waiting>,
    /// The failure of the preparation this request asked for, if one is under way.
    report: Option<oneshot::Receiver<SessionError>>,
}

/// What one look at the slots found for a borrower.
struct Look {
    taken: Option<Pooled>,
    /// A ready one for other capabilities, whose place was claimed: to be ended.
    evicted: Option<Pooled>,
    /// The preparations to start for the borrower's capabilities: `true` for the one whose
    /// failure it is told of.
    starts: Vec<bool>,
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

    /// A session for one anonymous request declaring `declared` capabilities: one ready for
    /// them, else the next one prepared (or given back) for them within `wait`.
    pub async fn borrow(
        &self,
        correlation: &PrincipalSessions,
        registry: &Arc<Registry>,
        metrics: &ServerMetrics,
        declared: ClientDeclared<'_>,
    ) -> Result<Correlated, SessionError> {
        let shared = &self.shared;
        let mut borrower = Borrower {
            want: Want::new(declared.capabilities),
            waiting: None,
            report: None,
        };
        let opener = Opener {
            registry: registry.clone(),
            newest: correlation.newest_handle(),
        };
        let deadline = crate::base::clock::from_now(self.wait);
        loop {
            let changed = shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let look = self.look(&mut borrower, metrics)?;
            if let Some(evicted) = look.evicted {
                registry.end(evicted.session.id(), EndReason::Limit);
            }
            for reported in look.starts {
                let sender = reported.then(|| {
                    let (sender, receiver) = oneshot::channel();
                    borrower.report = Some(receiver);
                    sender
                });
                shared.prepare(&opener, borrower.want.clone(), sender);
            }
            match look.taken {
                Some(pooled) if usable(&pooled.session) => {
                    if borrower.waiting.is_none() {
                        metrics.anonymous_pool_hits_total.inc();
                    }
                    return Ok(self.lend(opener, borrower.want, pooled));
                }
                Some(stale) => {
                    // Its server died while it was ready: its place goes to a fresh one.
                    registry.end(stale.session.id(), EndReason::ServerGone);
                    shared.lost(&opener, borrower.want.clone());
                    continue;
                }
                None => {}
            }
            let outcome = tokio::time::timeout_at(deadline, async {
                match borrower.report.as_mut() {
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
                    return Err(SessionError::AnonymousPoolBusy {
                        size: self.size,
                        waited: self.wait,
                    });
                }
                Ok(Some(Some(error))) => return Err(error),
                // Prepared: it is ready (unless another waiter took it first).
                Ok(Some(None)) => borrower.report = None,
                Ok(None) => {}
            }
        }
    }

    /// One look at the slots for `borrower`: one ready for it is taken; else it is counted as
    /// waiting and claims a place for one to be prepared for it, unless one it asked for is
    /// under way (whose failure, if reported meanwhile, is the answer). Without reuse, the
    /// free places are taken to be prepared as well.
    fn look(&self, borrower: &mut Borrower, metrics: &ServerMetrics) -> Result<Look, SessionError> {
        let shared = &self.shared;
        let want = &borrower.want;
        let mut slots = shared.slots();
        let mut look = Look {
            taken: slots.take(want),
            evicted: None,
            starts: Vec::new(),
        };
        if look.taken.is_none() {
            if let Some(receiver) = borrower.report.as_mut() {
                match receiver.try_recv() {
                    Ok(error) => return Err(error),
                    Err(oneshot::error::TryRecvError::Closed) => borrower.report = None,
                    Err(oneshot::error::TryRecvError::Empty) => {}
                }
            }
            if borrower.waiting.is_none() {
                slots.wait(want);
                borrower.waiting = Some(Waiting {
                    shared: shared.clone(),
                    key: want.key.clone(),
                });
                metrics.anonymous_pool_misses_total.inc();
            }
            if borrower.report.is_none() {
                match slots.claim(want) {
                    Claimed::No => {}
                    Claimed::Free => look.starts.push(true),
                    Claimed::Evicted(pooled) => {
                        look.evicted = Some(pooled);
                        look.starts.push(true);
                    }
                }
            }
        }
        if !shared.reuse {
            look.starts.extend((0..slots.top_up(want)).map(|_| false));
        }
        Ok(look)
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
        self.opener
            .registry
            .end(session.id(), EndReason::NotInitialized);
        self.shared.lost(&self.opener, self.want.clone());
    }
}
