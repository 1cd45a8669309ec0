//! This replica among the others: its heartbeat, its leaving, and which replica owns a session.

use std::sync::Arc;
use std::time::Duration;

use redis::RedisResult;
use tracing::warn;

use super::RedisStore;
use crate::store::{StoreError, StoreResult};

/// The longest leaving waits for Redis (for the writes, then for the key to be deleted).
const LEAVE_PATIENCE: Duration = Duration::from_secs(2);

impl RedisStore {
    pub(super) async fn beat(&self) -> RedisResult<()> {
        let mut connection = self.timed();
        redis::cmd("SET")
            .arg(self.node_key(&self.node_id))
            .arg(&self.advertise)
            .arg("PX")
            .arg(self.owner_timeout.as_millis() as u64)
            .query_async(&mut connection)
            .await
    }

    pub(super) async fn run_heartbeat(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(self.heartbeat);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => match self.beat().await {
                    Ok(()) => self.set_health(true),
                    Err(error) => self.failed("heartbeat", &error),
                },
                () = self.leaving.cancelled() => break,
            }
        }
        let mut connection = self.timed();
        let _: RedisResult<()> = redis::cmd("DEL")
            .arg(self.node_key(&self.node_id))
            .query_async(&mut connection)
            .await;
        self.left.cancel();
    }

    /// Leaves the replicas: what the owners queued is written, then this replica's key is
    /// deleted, so the others take its sessions over at once, from a complete log. Bounded:
    /// with Redis away, the others take them over when the key expires.
    pub async fn leave(&self) {
        if !self.mirror("", "", None).synced(LEAVE_PATIENCE).await {
            warn!("leaving with writes Redis has not taken");
        }
        self.leaving.cancel();
        let _ = tokio::time::timeout(LEAVE_PATIENCE, self.left.cancelled()).await;
    }

    /// Whether replica `node` missed its last heartbeat: its key was last refreshed more than
    /// one and a half heartbeats ago (or is gone). Together with a refused connection, the
    /// replica is dead, without waiting for its key to expire.
    pub async fn missed_heartbeat(&self, node: &str) -> StoreResult<bool> {
        let mut connection = self.timed();
        let left: i64 = redis::cmd("PTTL")
            .arg(self.node_key(node))
            .query_async(&mut connection)
            .await
            .map_err(StoreError::from)?;
        let Ok(left) = u64::try_from(left) else {
            return Ok(true); // no key (-2), or none that expires (-1: not a heartbeat's)
        };
        let since = self
            .owner_timeout
            .saturating_sub(Duration::from_millis(left));
        Ok(since > self.heartbeat + self.heartbeat / 2)
    }

    /// The internal URL of a live replica; `None` once its heartbeat has lapsed.
    pub async fn node_url(&self, node: &str) -> StoreResult<Option<String>> {
        let mut connection = self.timed();
        redis::cmd("GET")
            .arg(self.node_key(node))
            .query_async(&mut connection)
            .await
            .map_err(StoreError::from)
    }

    /// Makes this replica the owner of session `id` if `previous` still is (atomically: of
    /// several replicas trying, one wins).
    pub async fn claim(&self, server: &str, id: &str, previous: &str) -> StoreResult<bool> {
        self.hand_over(server, id, previous, &self.node_id).await
    }

    /// Gives session `id` back to `previous` if this replica still owns it: a claim it could
    /// not honour, so that another replica may take the session over.
    pub async fn unclaim(&self, server: &str, id: &str, previous: &str) -> StoreResult<bool> {
        self.hand_over(server, id, &self.node_id, previous).await
    }

    /// Makes `to` the owner of session `id` if `from` still is; whether it did.
    async fn hand_over(&self, server: &str, id: &str, from: &str, to: &str) -> StoreResult<bool> {
        let mut connection = self.timed();
        let done: i64 = redis::cmd("EVAL")
            .arg(
                "if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then \
                   redis.call('HSET', KEYS[1], 'owner', ARGV[2]) return 1 \
                 else return 0 end",
            )
            .arg(1)
            .arg(self.session_key(server, id))
            .arg(from)
            .arg(to)
            .query_async(&mut connection)
            .await?;
        Ok(done == 1)
    }
}
