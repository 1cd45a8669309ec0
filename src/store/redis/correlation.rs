//! What 2026-07-28 requests share between replicas: the session serving a correlation, and
//! the one-use tokens already spent.

use std::collections::HashMap;
use std::time::Duration;

use super::RedisStore;
use crate::store::{StoreError, StoreResult};

impl RedisStore {
    /// The session serving 2026-07-28 requests under correlation `key`, and its server's
    /// `initialize` result.
    pub async fn correlated(
        &self,
        server: &str,
        key: &str,
    ) -> StoreResult<Option<(String, String)>> {
        let mut connection = self.timed();
        let fields: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.correlation_key(server, key))
            .query_async(&mut connection)
            .await?;
        Ok(match (fields.get("session"), fields.get("initialized")) {
            (Some(session), Some(initialized)) => Some((session.clone(), initialized.clone())),
            _ => None,
        })
    }

    /// Records that `session` now serves correlation `key`.
    pub async fn correlate(
        &self,
        server: &str,
        key: &str,
        session: &str,
        initialized: &str,
    ) -> StoreResult<()> {
        let mut connection = self.timed();
        let name = self.correlation_key(server, key);
        redis::pipe()
            .cmd("HSET")
            .arg(&name)
            .arg("session")
            .arg(session)
            .arg("initialized")
            .arg(initialized)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&name)
            .arg(self.ttl.as_millis() as u64)
            .ignore()
            .query_async::<()>(&mut connection)
            .await
            .map_err(StoreError::from)
    }

    /// Spends one-use `token` for `ttl`: true for the first replica to spend it (`SET NX`, so
    /// of several trying at once, one wins).
    pub async fn spend(&self, server: &str, token: &str, ttl: Duration) -> StoreResult<bool> {
        let mut connection = self.timed();
        let set: Option<String> = redis::cmd("SET")
            .arg(format!("{}:{server}:spent:{token}", self.namespace))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis().clamp(1, u64::MAX as u128) as u64)
            .query_async(&mut connection)
            .await?;
        Ok(set.is_some())
    }

    fn correlation_key(&self, server: &str, key: &str) -> String {
        format!("{}:{server}:correlated:{key}", self.namespace)
    }
}
