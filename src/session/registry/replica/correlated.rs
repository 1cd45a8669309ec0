//! Sessions that serve 2026-07-28 requests, shared through the store: the session a
//! principal's requests were correlated with on one replica serves them on every replica.

use std::sync::Arc;

use tracing::warn;

use super::lookup::unavailable;
use crate::base::caller::Caller;
use crate::session::{Registry, Session, SessionError};

impl Registry {
    /// The session recorded for correlation `key` and its server's `initialize` result, found
    /// wherever it lives (`None` without a shared store, or when it is gone); taken over with
    /// `caller`'s credential if its owner is gone.
    pub async fn correlated(
        &self,
        key: &str,
        caller: &Caller,
    ) -> Result<Option<(Arc<Session>, String)>, SessionError> {
        let Some(redis) = self.store.redis() else {
            return Ok(None);
        };
        let Some((id, initialized)) = redis
            .correlated(&self.server, key)
            .await
            .map_err(|e| unavailable(&e))?
        else {
            return Ok(None);
        };
        Ok(self
            .find(&id, caller)
            .await?
            .map(|session| (session, initialized)))
    }

    /// Records that `session` serves correlation `key` (with a shared store).
    pub async fn correlate(&self, key: &str, session: &Session, initialized: &str) {
        if let Some(redis) = self.store.redis() {
            if let Err(error) = redis
                .correlate(&self.server, key, session.id(), initialized)
                .await
            {
                warn!(%error, "a correlated session could not be recorded in Redis");
            }
        }
    }
}
