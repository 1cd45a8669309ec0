//! The registry's front door: every front finds a session here and hands it what its client
//! sends — a request (`call`: it has an answer, logged on a stream) or a notification or a
//! response (`send`). A session that moved to another replica is followed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use super::replica::fencing::OwnedNow;
use super::Registry;
use crate::base::caller::Caller;
use crate::base::event::StreamKey;
use crate::base::ids::{self, Principal};
use crate::session::rate::Exceeded;
use crate::session::{OwnerUnavailable, Session, SessionError};
use crate::upstream::owner::HopError;
use crate::upstream::UpstreamError;
use crate::wire::jsonrpc::{Kind, Message};

impl Registry {
    /// The session `id` if `principal` owns it, here or on another replica (then a view of it,
    /// fed from the shared log, whose client messages go to the owner). A session that may
    /// exist is never reported missing: while the shared store or its owner cannot tell, that
    /// is an error (503, retry), not `None` (404). A session taken over here gets its new
    /// upstream with the caller's credential.
    pub async fn find(
        &self,
        id: &str,
        caller: &Caller,
    ) -> Result<Option<Arc<Session>>, SessionError> {
        let (principal, credential) = (caller.principal(), caller.credential());
        if let Some(session) = self.get(id, principal) {
            // Dropped when another replica took it over while this one's lease had lapsed:
            // then it is looked up where it lives now.
            if self.still_owned(&session).await {
                session.remember_credential(credential);
                return Ok(Some(session));
            }
        }
        let Some(redis) = self.store.redis() else {
            return Ok(None);
        };
        if !ids::is_well_formed(id) {
            return Ok(None);
        }
        if let Some(view) = self.views.get(id).map(|v| v.value().clone()) {
            if view.principal() != principal {
                return Ok(None);
            }
            view.remember_credential(credential);
            let trusted = !view.ended.is_cancelled() && !view.owner().is_some_and(|o| o.suspect());
            if trusted {
                return Ok(Some(view));
            }
        }
        // A replica on its way out takes nothing over, but serves requests that reach it
        // through views of the sessions' new owners (it hands its own over).
        if !self.store.healthy() {
            return Err(SessionError::StoreUnavailable);
        }
        self.resolve(redis, id, caller).await
    }

    /// Hands a request to `session` (a client's, admitted at the front door with
    /// [`Registry::admit`]; or one the proxy makes itself on a client's behalf): the stream its
    /// answer will be logged on. A replica on its way out takes no new request for a session of
    /// its own: with a shared store the request follows the session to the replica it is
    /// handed to.
    pub async fn call(
        &self,
        session: &Arc<Session>,
        request: Message,
    ) -> Result<StreamKey, SessionError> {
        if self.is_leaving() && self.store.redis().is_none() {
            return Err(SessionError::ShuttingDown);
        }
        self.followed(session, request, |session, request| async move {
            session.call(request).await
        })
        .await
    }

    /// Lets a client's request in under its principal's rates, before anything is looked up,
    /// started or taken for it (a session created, a server started, a pooled session lent):
    /// over a rate, it is refused (429) having cost nothing but this. Only requests count
    /// (notifications and answers are not refused).
    pub async fn admit(
        &self,
        principal: &Principal,
        request: &Message,
    ) -> Result<(), SessionError> {
        if request.kind() != Kind::Request {
            return Ok(());
        }
        let Err(exceeded) = self.take_from_buckets(principal, request).await else {
            return Ok(());
        };
        let refused = match exceeded {
            Exceeded::Requests { .. } => &self.metrics.rate_limited_requests_total,
            Exceeded::Tool { .. } => &self.metrics.rate_limited_tool_calls_total,
        };
        refused.inc();
        Err(SessionError::RateLimited(exceeded))
    }

    /// Takes `request` out of its principal's rate buckets: with a shared store, the ones every
    /// replica takes from (one round trip); without, or while the store cannot answer, this
    /// replica's own.
    async fn take_from_buckets(
        &self,
        principal: &Principal,
        request: &Message,
    ) -> Result<(), Exceeded> {
        let buckets = self.limiter.buckets(principal, request);
        if buckets.is_empty() {
            return Ok(());
        }
        let Some(redis) = self.store.redis() else {
            return self.limiter.admit(&buckets);
        };
        let shared: Vec<_> = buckets
            .iter()
            .map(|bucket| (bucket.key.as_str(), bucket.interval, bucket.burst))
            .collect();
        match redis.take(&self.server, principal.as_str(), &shared).await {
            Ok(None) => Ok(()),
            Ok(Some((index, wait))) => Err(buckets[index].exceeded(wait)),
            Err(error) => {
                warn!(%error, "the shared rate buckets could not be read; counting here");
                self.limiter.admit(&buckets)
            }
        }
    }

    /// Hands a client notification, or a client's answer to a server request, to `session`.
    pub async fn send(&self, session: &Arc<Session>, message: Message) -> Result<(), SessionError> {
        self.followed(session, message, |session, message| async move {
            session.send(message).await
        })
        .await
    }

    /// Hands any client message to `session` by its kind: for a request, the stream its
    /// answer will be logged on.
    pub async fn deliver(
        &self,
        session: &Arc<Session>,
        message: Message,
    ) -> Result<Option<StreamKey>, SessionError> {
        match message.kind() {
            Kind::Request => self.call(session, message).await.map(Some),
            Kind::Notification | Kind::Response => self.send(session, message).await.map(|()| None),
        }
    }

    /// Delivers `message` with `deliver`. When a view's owner no longer has the session, cannot
    /// be reached (the message was not carried out), or another replica answers at its address,
    /// the session is looked up again and the message goes where it lives now (taken over here,
    /// once its owner is known to be dead), for up to `cluster.takeover_wait`: the client waits
    /// for the takeover instead of getting a 503; if the session is gone everywhere, that is
    /// `SessionError::Gone` (404). A session owned here is served here, unless another replica
    /// took it over meanwhile (this one's lease had lapsed) or this replica is leaving and hands
    /// it over: then the message follows it the same way.
    async fn followed<T, F, Delivered>(
        &self,
        session: &Arc<Session>,
        message: Message,
        deliver: F,
    ) -> Result<T, SessionError>
    where
        F: Fn(Arc<Session>, Message) -> Delivered,
        Delivered: Future<Output = Result<T, SessionError>>,
    {
        let deadline = Instant::now() + self.takeover_wait();
        let request = message.kind() == Kind::Request;
        let mut pause = HOLD_FIRST_PAUSE;
        let mut current = session.clone();
        loop {
            let view_failed = match current.owner() {
                None => match self.owned_now(&current, request, deadline).await {
                    OwnedNow::Serve => return deliver(current, message).await,
                    OwnedNow::Refused(error) => return Err(error),
                    OwnedNow::Moved if Instant::now() >= deadline => {
                        return Err(SessionError::OwnerUnavailable(
                            OwnerUnavailable::ChangingHands,
                        ))
                    }
                    OwnedNow::Moved => false,
                },
                Some(_) => {
                    let outcome = deliver(current.clone(), message.clone()).await;
                    if !not_carried_out(&outcome) || Instant::now() >= deadline {
                        return outcome;
                    }
                    true
                }
            };
            let caller = session.caller();
            current = loop {
                match self.find(session.id(), &caller).await {
                    Ok(Some(found)) => break found,
                    Ok(None) => return Err(SessionError::Gone),
                    Err(error) if error.owner_unavailable() && Instant::now() < deadline => {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(HOLD_MAX_PAUSE);
                    }
                    Err(error) => return Err(error),
                }
            };
            if view_failed && current.owner().is_some() {
                // Still a view of an owner that failed: give its heartbeat time to lapse.
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(HOLD_MAX_PAUSE);
            }
        }
    }

    /// How long a request is held for a session whose owner cannot be reached.
    fn takeover_wait(&self) -> Duration {
        self.store
            .redis()
            .map_or(Duration::ZERO, |redis| redis.takeover_wait)
    }
}

/// The first pause before a held request looks for its session again, and the longest.
const HOLD_FIRST_PAUSE: Duration = Duration::from_millis(20);
const HOLD_MAX_PAUSE: Duration = Duration::from_millis(250);

/// Whether a view's owner did not take the message (it no longer has the session, cannot be
/// reached, or another replica answers at its address): the message may go elsewhere.
fn not_carried_out<T>(outcome: &Result<T, SessionError>) -> bool {
    matches!(
        outcome,
        Err(SessionError::Upstream(UpstreamError::Hop(
            HopError::Gone | HopError::Moved { .. } | HopError::Unreachable(_)
        )))
    )
}
