//! Finding a session on whichever replica owns it, from the shared store: through a view (its
//! owner alive), or taken over (its owner dead); a session that may exist is never reported
//! missing while the store or its owner cannot tell. Ending reaches its owner.

use std::sync::Arc;

use tracing::warn;

use super::follow::{renew, tail};
use crate::base::caller::Caller;
use crate::base::ids::{self, Principal};
use crate::session::EndReason;
use crate::session::{OwnerUnavailable, Registry, Session, SessionError};
use crate::store::{Record, RedisStore};
use crate::upstream::owner::{HopError, LinkSettings, Owner, OwnerLink};

impl Registry {
    /// Where session `id` lives, from the shared store: a view of it (its owner alive), or this
    /// replica's own after taking it over (its owner dead). Without a record, the replica its id
    /// names (which may not have written it yet) is asked.
    pub(in crate::session) async fn resolve(
        &self,
        redis: &Arc<RedisStore>,
        id: &str,
        caller: &Caller,
    ) -> Result<Option<Arc<Session>>, SessionError> {
        let (principal, credential) = (caller.principal(), caller.credential());
        // A claim lost to another replica means the record changed: read it once more.
        for _ in 0..2 {
            let record = redis
                .record(&self.server, id)
                .await
                .map_err(|e| unavailable(&e))?;
            let Some(record) = record else {
                let found = self.ask_creator(redis, id, principal).await?;
                if let Some(view) = &found {
                    view.remember_credential(credential);
                }
                return Ok(found);
            };
            if record.principal != principal.as_str() {
                return Ok(None);
            }
            let url = match record.owner == redis.node_id {
                // This replica, restarted under the same name: its session is gone with it.
                true => None,
                false if self.owner_found_dead(redis, id, &record.owner).await => None,
                false => redis
                    .node_url(&record.owner)
                    .await
                    .map_err(|e| unavailable(&e))?,
            };
            match url {
                Some(url) => {
                    let owner = Owner {
                        node: record.owner.clone(),
                        url,
                    };
                    let view = self.view_of(redis, id, principal, &record, owner).await;
                    view.remember_credential(credential);
                    return Ok(Some(view));
                }
                None => {
                    if let Some(session) = self.take_over(record, id, caller).await? {
                        return Ok(Some(session));
                    }
                }
            }
        }
        Err(SessionError::OwnerUnavailable(
            OwnerUnavailable::ChangingHands,
        ))
    }

    /// Whether the owner of this replica's view of session `id` is dead: the view's last hop
    /// could not connect to it, and it missed its heartbeat. Then its session is taken over at
    /// once, not when its heartbeat key expires.
    async fn owner_found_dead(&self, redis: &RedisStore, id: &str, owner: &str) -> bool {
        let unreachable = self.views.get(id).is_some_and(|view| {
            view.owner()
                .is_some_and(|link| link.unreachable() && link.owner().node == owner)
        });
        unreachable && redis.missed_heartbeat(owner).await.unwrap_or(false)
    }

    /// A session the shared store has no record of: the replica its id names may have created
    /// it and not written it yet. Alive, it says; gone (or never named), the session is too.
    pub(in crate::session) async fn ask_creator(
        &self,
        redis: &Arc<RedisStore>,
        id: &str,
        principal: &Principal,
    ) -> Result<Option<Arc<Session>>, SessionError> {
        let Some(node) = ids::node_of(id).filter(|node| *node != redis.node_id) else {
            return Ok(None);
        };
        let Some(url) = redis.node_url(node).await.map_err(|e| unavailable(&e))? else {
            return Ok(None);
        };
        let owner = Owner {
            node: node.to_owned(),
            url,
        };
        let link = self.link(redis, id, principal, owner.clone());
        let facts = match link.read(&[]).await {
            Ok(reading) => reading.record,
            Err(HopError::Gone) => return Ok(None),
            Err(error) => return Err(SessionError::OwnerUnavailable(OwnerUnavailable::Hop(error))),
        };
        let Ok(record) = serde_json::from_value::<Record>(facts) else {
            return Err(SessionError::OwnerUnavailable(OwnerUnavailable::Unreadable));
        };
        if record.principal != principal.as_str() {
            return Ok(None);
        }
        Ok(Some(
            self.view_of(redis, id, principal, &record, owner).await,
        ))
    }

    pub(in crate::session) fn link(
        &self,
        redis: &RedisStore,
        id: &str,
        principal: &Principal,
        owner: Owner,
    ) -> OwnerLink {
        let settings = LinkSettings {
            key: redis.hop_key.clone(),
            max_answer_bytes: redis.max_hop_answer_bytes,
            metrics: self.metrics.clone(),
        };
        OwnerLink::new(
            self.hop_client.clone(),
            settings,
            &self.server,
            id,
            principal.as_str(),
            owner,
        )
    }

    /// The view of session `id` on `owner`: the one this replica has (pointed at `owner`, so
    /// readers attached to it carry on), or a new one whose log is copied from the store and
    /// then followed.
    pub(in crate::session) async fn view_of(
        &self,
        redis: &Arc<RedisStore>,
        id: &str,
        principal: &Principal,
        record: &Record,
        owner: Owner,
    ) -> Arc<Session> {
        if let Some(view) = self.views.get(id).map(|v| v.value().clone()) {
            if !view.ended.is_cancelled() {
                if let Some(link) = view.owner() {
                    link.retarget(owner);
                    renew(&view, link); // the owner may be new: tell it what is read here
                }
                return view;
            }
        }
        // Named in an owner's description over the hop; the store keeps them apart.
        let subscriptions = match record.subs.as_deref() {
            Some(subs) => serde_json::from_str(subs).unwrap_or_default(),
            None => redis
                .subscriptions(&self.server, id)
                .await
                .unwrap_or_else(|error| {
                    warn!(%error, "could not read a session's subscriptions from Redis");
                    Default::default()
                }),
        };
        let view = Session::view(
            id.to_owned(),
            principal.clone(),
            record,
            subscriptions,
            self.link(redis, id, principal, owner),
            self.settings(),
            self.metrics.clone(),
        );
        match redis.read_log(&self.server, id, 0).await {
            Ok(logged) => view.absorb_followed(logged),
            Err(error) => warn!(%error, "could not read a session's log from Redis"),
        }
        let view = {
            let mut entry = self
                .views
                .entry(id.to_owned())
                .or_insert_with(|| view.clone());
            if entry.value().ended.is_cancelled() {
                *entry.value_mut() = view;
            }
            entry.value().clone()
        };
        if view.claim_following() {
            tokio::spawn(tail(
                redis.clone(),
                self.server.clone(),
                Arc::downgrade(&view),
            ));
        }
        view
    }

    /// Ends session `id` wherever it lives, and returns once no replica will find it: a view's
    /// owner is asked and answers when done; an owned session's keys are deleted from the
    /// shared store before this returns.
    pub async fn end_everywhere(&self, id: &str) -> bool {
        if let Some((_, view)) = self.views.remove(id) {
            view.end();
            return match view.owner() {
                Some(owner) => owner.end().await.is_ok(),
                None => false,
            };
        }
        let owned = self.owned(id);
        let fence = owned.as_ref().and_then(|session| session.fence());
        let counted_in = owned.as_ref().and_then(|session| session.counted_in());
        let ended = self.end(id, EndReason::Deleted);
        if let (true, Some(redis), Some(fence)) = (ended, self.store.redis(), fence) {
            match redis
                .forget(&self.server, id, &fence, counted_in.as_deref())
                .await
            {
                Ok(true) => {}
                Ok(false) => warn!(session = %crate::telemetry::redact::session(id),
                    "another replica owns this session now; its keys were left to it"),
                Err(error) => warn!(%error, "could not delete an ended session from Redis"),
            }
        }
        ended
    }
}

/// The shared store could not answer: a session it might know of is not "not found".
pub(super) fn unavailable(error: &dyn std::fmt::Display) -> SessionError {
    warn!(%error, "a Redis lookup failed");
    SessionError::StoreUnavailable
}
