//! Taking over a session whose owner died: its record and log adopted, a new upstream brought
//! to where the old one was, and the client told what may have been lost (the gap rule).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tracing::{info, warn};

use super::lookup::unavailable;
use crate::base::caller::Caller;
use crate::base::ids::Principal;
use crate::session::handshake;
use crate::session::log::StreamKey;
use crate::session::{Parts, Reach, Registry, Session, SessionError, Shape};
use crate::store::{Record, RedisStore};
use crate::upstream::credential::Credential;
use crate::upstream::factory::Binding;
use crate::upstream::{Sink, Upstream};

/// A taken-over session's new upstream, its binding, and the credential it sends.
type Opened = (Upstream, Arc<Binding>, Credential);

impl Registry {
    /// Room for session `id` of `caller`'s principal and its new upstream, for a takeover
    /// (counted once among the principal's sessions: it was already): nothing held when
    /// refused.
    async fn open_taken(
        &self,
        id: &str,
        caller: &Caller,
        upstream_session: Option<&str>,
    ) -> Result<Opened, SessionError> {
        let principal = caller.principal();
        let limit = self.settings().max_sessions;
        if self.reserved.fetch_add(1, Ordering::AcqRel) >= limit {
            self.reserved.fetch_sub(1, Ordering::AcqRel);
            return Err(SessionError::TooManySessions(limit));
        }
        if let Err(error) = self.reserve_for(principal, id).await {
            self.reserved.fetch_sub(1, Ordering::AcqRel);
            return Err(error);
        }
        let credential = Credential::new(caller.credential().cloned());
        match self.upstreams.resume(credential.clone(), upstream_session) {
            Ok((upstream, binding)) => Ok((upstream, binding, credential)),
            Err(error) => {
                self.reserved.fetch_sub(1, Ordering::AcqRel);
                self.release_for(principal);
                Err(error.into())
            }
        }
    }

    /// [`Self::open_taken`] for a session this replica claimed, going on in the session its
    /// server keeps for it when the record names one; refused, the claim is given back, so that
    /// another replica may take the session.
    async fn open_claimed(
        &self,
        redis: &RedisStore,
        (record, epoch): (&Record, u64),
        id: &str,
        caller: &Caller,
    ) -> Result<Opened, SessionError> {
        let upstream_session = record.upstream_session.as_deref();
        let opened = self.open_taken(id, caller, upstream_session).await;
        if let Err(error) = &opened {
            warn!(session = %crate::telemetry::redact::session(id), %error,
                  "a session claimed to take over cannot be opened here: given back");
            if let Err(error) = redis.unclaim(&self.server, id, epoch, &record.owner).await {
                warn!(%error, "a claimed session could not be given back");
            }
        }
        opened
    }

    /// A session this replica owns, for the internal hop; one the shared store says it owns but
    /// it does not hold (this replica was restarted under the same name) is taken over now.
    pub async fn owned_or_reclaimed(&self, id: &str) -> Result<Option<Arc<Session>>, SessionError> {
        if let Some(session) = self.owned(id) {
            // Unless another replica took it over while this one's lease had lapsed.
            if self.still_owned(&session).await {
                return Ok(Some(session));
            }
        }
        let Some(redis) = self.store.redis() else {
            return Ok(None);
        };
        match redis.record(&self.server, id).await {
            Ok(Some(record)) if record.owner == redis.node_id => {
                let principal = Principal::from_stored(&record.principal);
                let caller = Caller::without_credential(principal);
                self.take_over(record, id, &caller).await
            }
            Ok(_) => Ok(None),
            Err(error) => Err(unavailable(&error)),
        }
    }

    /// Fills `session`, new here and bound to its upstream, with what the shared store holds of
    /// it, and brings the upstream to where the old one was: linked to the session its server
    /// keeps (which holds the client's `initialize` and subscriptions), only its GET stream
    /// opens; else the new upstream is initialized and subscribed. What the old owner had in
    /// flight (stream → client id), for `close_gap`.
    async fn restore(
        &self,
        redis: &RedisStore,
        session: &Arc<Session>,
        record: &Record,
    ) -> HashMap<u64, String> {
        let id = session.id();
        let logged = redis
            .read_log(&self.server, id, 0)
            .await
            .unwrap_or_default();
        let inflight = redis.inflight(&self.server, id).await.unwrap_or_default();
        let subscriptions = redis
            .subscriptions(&self.server, id)
            .await
            .unwrap_or_default();
        let upstream_session = session.upstream_session_record();
        (session.lock()).adopt(record, subscriptions, logged, upstream_session);
        // Clients may read it through views on other replicas, which tell this new owner so
        // within a heartbeat or two: until then, its GET stream is read as if they had.
        session.read_elsewhere(&[StreamKey::Standalone], redis.owner_timeout);
        match session.upstream() {
            Some(upstream) if upstream.upstream_session().is_some() => upstream.listen(),
            _ => {
                if let Err(error) = handshake::reinitialize(session, record.init.as_deref()).await {
                    warn!(%error, "the new upstream of a taken-over session could not be re-initialized");
                }
            }
        }
        inflight
    }

    /// Becomes the owner of a session whose owner is gone: claims it (of several replicas, one
    /// wins: `None` here when another did, or the owner confirmed it still owns it; the claim
    /// makes the session's owner epoch one more, which fences the old owner's writes), binds a
    /// new upstream built with the credential of `caller` (the request that brought the
    /// session here) and going on in the session its server keeps for it if it can, rebuilds the log from the shared one, brings
    /// the upstream to where the old one was (`restore`), and tells the client what may be lost
    /// (`close_gap`). A claim this replica cannot honour (a limit, no upstream) is given
    /// back, so that another replica may take the session.
    pub(in crate::session) async fn take_over(
        &self,
        record: Record,
        id: &str,
        caller: &Caller,
    ) -> Result<Option<Arc<Session>>, SessionError> {
        let principal = caller.principal();
        let Some(redis) = self.store.redis() else {
            return Ok(None);
        };
        if self.is_leaving() {
            return Err(SessionError::ShuttingDown);
        }
        let _one_at_a_time = self.takeovers.lock().await;
        if let Some(session) = self.get(id, principal) {
            return Ok(Some(session)); // taken over meanwhile, here
        }
        let claimed = redis.claim(&self.server, id, &record).await;
        let Some(epoch) = claimed.map_err(|e| unavailable(&e))? else {
            return Ok(None);
        };
        let (upstream, binding, credential) = self
            .open_claimed(redis, (&record, epoch), id, caller)
            .await?;
        let shape = Shape::named(&record.shape);
        let mirror = self
            .store
            .mirror(&self.server, id, self.counted_for(principal), epoch);
        let session = Session::new(Parts {
            id: id.into(),
            principal: principal.clone(),
            shape,
            upstream: Reach::Here(upstream),
            credential,
            mirror,
            shared: self.shared_with_sessions(),
        });
        binding.bind(Arc::downgrade(&session) as Weak<dyn Sink>);
        let inflight = self.restore(redis, &session, &record).await;
        session.close_gap(inflight);
        self.take_in(&session);
        if let Some((_, view)) = self.views.remove(id) {
            view.succeeded_by(&session);
        }
        self.metrics.sessions_open.inc();
        self.metrics.sessions_taken_over_total.inc();
        // Handed to this replica, the record names it already: the one before it gave it up.
        let from = match (&record.handed_by, record.owner == redis.node_id) {
            (Some(by), true) => by,
            _ => &record.owner,
        };
        session
            .span()
            .in_scope(|| info!(%from, epoch, "session taken over"));
        Ok(Some(session))
    }
}
