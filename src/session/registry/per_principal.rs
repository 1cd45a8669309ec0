//! Sessions per principal: `session.max_sessions_per_principal` for a principal with a
//! credential, `max_anonymous_sessions` for clients without one (together one principal).
//! Each replica counts the sessions it owns; with a shared store, a principal's are also counted
//! there for every replica at once (`RedisStore::reserve_session`), and that count decides: a
//! principal gets its limit in all, whichever replicas its sessions land on. While the store
//! cannot answer, this replica's own count decides. Clients without a credential stay counted
//! per replica: their limit bounds the servers one replica starts for them (its anonymous pool
//! included).

use std::sync::atomic::Ordering;

use tracing::{info, warn};

use super::Registry;
use crate::base::ids::Principal;
use crate::session::SessionError;
use crate::telemetry::metrics::Refusal;

impl Registry {
    /// Counts session `id` of `principal` against the principal's limit, or refuses it (the
    /// refusal counted). A session taken over is counted once: the same id.
    pub(in crate::session) async fn reserve_for(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<(), SessionError> {
        let anonymous = *principal == Principal::anonymous();
        let limit = match anonymous {
            true => self.settings().max_anonymous_sessions,
            false => self.settings().max_sessions_per_principal,
        };
        let shared = match self.counted_for(principal) {
            Some(principal) => self.shared_room(principal, id, limit).await,
            None => None,
        };
        let mut held = self.per_principal.entry(principal.clone()).or_insert(0);
        if !shared.unwrap_or(*held < limit) {
            drop(held);
            return Err(match anonymous {
                true => {
                    self.metrics.session_refused(Refusal::Anonymous);
                    SessionError::TooManyAnonymous(limit)
                }
                false => {
                    self.metrics.session_refused(Refusal::PerPrincipal);
                    SessionError::TooManyForPrincipal(limit)
                }
            });
        }
        *held += 1;
        Ok(())
    }

    /// A session of `principal` here is no more (its place in the shared count goes with its
    /// record).
    pub(in crate::session) fn release_for(&self, principal: &Principal) {
        self.per_principal.remove_if_mut(principal, |_, held| {
            *held = held.saturating_sub(1);
            *held == 0
        });
    }

    /// Gives back the place reserved for session `id`, which was never created.
    pub(in crate::session) async fn unreserve_for(&self, principal: &Principal, id: &str) {
        self.release_for(principal);
        if let (Some(redis), Some(principal)) = (self.store.redis(), self.counted_for(principal)) {
            if let Err(error) = redis.release_session(&self.server, principal, id).await {
                warn!(%error, "the place reserved for a session not created could not be given back; it is freed soon, having no record");
            }
        }
    }

    /// The principal (as the store names it) among whose sessions a session of `principal`
    /// counts for every replica: none for clients without a credential, or without a shared
    /// store.
    pub(in crate::session) fn counted_for<'a>(&self, principal: &'a Principal) -> Option<&'a str> {
        let shared = self.store.redis().is_some() && *principal != Principal::anonymous();
        shared.then(|| principal.as_str())
    }

    /// Whether the shared count has room for session `id` (or counts it already); `None` when
    /// it cannot be read.
    async fn shared_room(&self, principal: &str, id: &str, limit: usize) -> Option<bool> {
        let redis = self.store.redis()?;
        match redis
            .reserve_session(&self.server, principal, id, limit)
            .await
        {
            Ok(room) => {
                if self.shared_count_failing.swap(false, Ordering::AcqRel) {
                    info!("the sessions per principal are counted in Redis again");
                }
                Some(room)
            }
            Err(error) => {
                if !self.shared_count_failing.swap(true, Ordering::AcqRel) {
                    warn!(%error, "the sessions per principal could not be counted in Redis; each replica counts its own until it answers");
                }
                None
            }
        }
    }
}
