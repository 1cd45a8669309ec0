//! This replica among the others: its heartbeat (which renews its lease on its sessions), its
//! leaving, and which replica owns a session: claims compare and set the owner and its epoch in
//! one script, so of several replicas one wins and a replica that confirmed it still owns a
//! session in between makes every claim read before fail.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::RedisResult;
use tokio::time::Instant;
use tracing::warn;

use super::RedisStore;
use crate::store::{Fence, Record, StoreError, StoreResult};

/// The longest leaving waits for Redis (for the writes, then for the key to be deleted).
const LEAVE_PATIENCE: Duration = Duration::from_secs(2);

/// KEYS: a session record. ARGV: the owner and epoch it must hold, the `confirmed` count it must
/// hold (empty: any), the new owner, and `1` for a hand-over (the old owner leaving: it is
/// kept as `handed_by`) or empty for a claim. Answers the new epoch, or 0 when the record did
/// not hold them (nothing changed).
const HAND_OVER: &str = r"
local record = KEYS[1]
if redis.call('HGET', record, 'owner') ~= ARGV[1]
  or (redis.call('HGET', record, 'epoch') or '0') ~= ARGV[2]
  or (ARGV[3] ~= '' and (redis.call('HGET', record, 'confirmed') or '0') ~= ARGV[3]) then
  return 0
end
redis.call('HSET', record, 'owner', ARGV[4])
if ARGV[5] == '1' then
  redis.call('HSET', record, 'handed_by', ARGV[1])
else
  redis.call('HDEL', record, 'handed_by')
end
return redis.call('HINCRBY', record, 'epoch', 1)
";

/// KEYS: a session record. ARGV: this replica and the epoch it holds. Answers 1, and counts the
/// confirmation (a claim made on an earlier reading then fails), when the record holds them;
/// else 0.
const CONFIRM: &str = r"
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1]
  and (redis.call('HGET', KEYS[1], 'epoch') or '0') == ARGV[2] then
  redis.call('HINCRBY', KEYS[1], 'confirmed', 1)
  return 1
end
return 0
";

impl RedisStore {
    /// The heartbeat's commands: this replica's key, and its name among those taking sessions
    /// unless it is handing its own over.
    fn add_beat(&self, pipe: &mut redis::Pipeline) {
        pipe.cmd("SET")
            .arg(self.node_key(&self.node_id))
            .arg(&self.advertise)
            .arg("PX")
            .arg(self.owner_timeout.as_millis() as u64)
            .ignore();
        if !self.handing_over.load(Ordering::Acquire) {
            pipe.cmd("SADD")
                .arg(self.nodes_key())
                .arg(&self.node_id)
                .ignore();
        }
    }

    /// A heartbeat: renews this replica's key, and with it its lease on its sessions.
    pub(super) async fn beat(&self) -> RedisResult<()> {
        let mut connection = self.timed();
        let mut pipe = redis::pipe();
        self.add_beat(&mut pipe);
        let sent = Instant::now();
        pipe.query_async::<()>(&mut connection).await?;
        self.lease.renewed(sent);
        Ok(())
    }

    pub(super) async fn run_heartbeat(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(self.heartbeat);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut masters = self.link.switches();
        loop {
            tokio::select! {
                _ = ticks.tick() => match self.beat().await {
                    Ok(()) => {
                        self.set_health(true);
                        if let Err(error) = self.link.refresh().await {
                            self.note_error("read of the cluster's nodes", &error);
                        }
                        self.tell_nodes(true);
                        masters = self.after_failover(masters);
                    }
                    Err(error) => {
                        self.failed("heartbeat", &error);
                        self.tell_nodes(false);
                    }
                },
                () = self.leaving.cancelled() => break,
            }
        }
        let mut connection = self.timed();
        let _: RedisResult<()> = redis::pipe()
            .cmd("DEL")
            .arg(self.node_key(&self.node_id))
            .ignore()
            .cmd("SREM")
            .arg(self.nodes_key())
            .arg(&self.node_id)
            .ignore()
            .query_async(&mut connection)
            .await;
        self.left.cancel();
    }

    /// Waits, at most `within`, until everything the owners queued so far is written.
    pub async fn synced(&self, within: Duration) -> bool {
        self.mirror("", "", None, 0).synced(within).await
    }

    /// Leaves the replicas: what the owners queued is written, then this replica's key is
    /// deleted, so the others take its sessions over at once, from a complete log. Bounded:
    /// with Redis away, the others take them over when the key expires.
    pub async fn leave(&self) {
        if !self.synced(LEAVE_PATIENCE).await {
            warn!("leaving with writes Redis has not taken");
        }
        self.leaving.cancel();
        let _ = tokio::time::timeout(LEAVE_PATIENCE, self.left.cancelled()).await;
    }

    /// Whether replica `node` missed its last heartbeat: its key was last refreshed more than
    /// one and a half heartbeats ago (or is gone). Together with a refused connection, the
    /// replica is dead, without waiting for its key to expire.
    pub async fn missed_heartbeat(&self, node: &str) -> StoreResult<bool> {
        if self.settling() {
            return Ok(false);
        }
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

    /// The internal URL of a live replica; `None` once its heartbeat has lapsed. Unknown (an
    /// error) while the store settles after a failover or an outage: the replica may not have
    /// written its heartbeat to the master yet, and is not taken for dead.
    pub async fn node_url(&self, node: &str) -> StoreResult<Option<String>> {
        let mut connection = self.timed();
        let url: Option<String> = redis::cmd("GET")
            .arg(self.node_key(node))
            .query_async(&mut connection)
            .await
            .map_err(StoreError::from)?;
        if url.is_none() && self.settling() {
            let unknown = std::io::Error::other(format!(
                "replica {node}'s heartbeat is not on the store's master yet (a new master, or \
                 Redis back after an outage)"
            ));
            return Err(StoreError::from(redis::RedisError::from(unknown)));
        }
        Ok(url)
    }

    /// Makes this replica the owner of session `id` if the record still holds what `record`
    /// read (its owner, epoch and confirmations): of several replicas trying, one wins, and an
    /// owner that confirmed it still owns the session since makes the claim fail. The new
    /// epoch, which this replica's writes to the session are conditional on; `None` when the
    /// claim failed.
    pub async fn claim(&self, server: &str, id: &str, record: &Record) -> StoreResult<Option<u64>> {
        let confirmed = record.confirmed.to_string();
        let from = (record.owner.as_str(), record.epoch, confirmed.as_str());
        self.hand_over(server, id, from, &self.node_id).await
    }

    /// Gives session `id`, held at `epoch`, back to `previous` if this replica still owns it: a
    /// claim it could not honour, so that another replica may take the session over.
    pub async fn unclaim(
        &self,
        server: &str,
        id: &str,
        epoch: u64,
        previous: &str,
    ) -> StoreResult<bool> {
        let from = (self.node_id.as_str(), epoch, "");
        Ok(self.hand_over(server, id, from, previous).await?.is_some())
    }

    /// Makes `to` the owner of session `id` if the record holds `from` (owner, epoch and, unless
    /// empty, confirmations); the new epoch if it did.
    async fn hand_over(
        &self,
        server: &str,
        id: &str,
        (owner, epoch, confirmed): (&str, u64, &str),
        to: &str,
    ) -> StoreResult<Option<u64>> {
        let mut connection = self.timed();
        let epoch: u64 = redis::cmd("EVAL")
            .arg(HAND_OVER)
            .arg(1)
            .arg(self.session_key(server, id))
            .arg(owner)
            .arg(epoch)
            .arg(confirmed)
            .arg(to)
            .arg("")
            .query_async(&mut connection)
            .await?;
        Ok((epoch > 0).then_some(epoch))
    }

    /// Confirms that this replica still owns session `id` at `fence`'s epoch, renewing its
    /// heartbeat in the same round trip: true (the hold is good for the new lease term, and
    /// claims read before fail) or false (another replica took the session over, or it is
    /// gone).
    pub async fn confirm(&self, server: &str, id: &str, fence: &Fence) -> StoreResult<bool> {
        let mut connection = self.timed();
        let mut pipe = redis::pipe();
        self.add_beat(&mut pipe);
        pipe.cmd("EVAL")
            .arg(CONFIRM)
            .arg(1)
            .arg(self.session_key(server, id))
            .arg(&self.node_id)
            .arg(fence.epoch());
        let sent = Instant::now();
        let answer: RedisResult<(i64,)> = pipe.query_async(&mut connection).await;
        let (held,) = answer.inspect_err(|error| self.failed("ownership confirmation", error))?;
        let term = self.lease.renewed(sent);
        if held == 1 {
            fence.confirm(term);
        }
        Ok(held == 1)
    }

    /// From now on this replica is no longer among those that take sessions: it hands its own
    /// to them.
    pub async fn stop_taking_sessions(&self) -> StoreResult<()> {
        self.handing_over.store(true, Ordering::Release);
        let mut connection = self.timed();
        redis::cmd("SREM")
            .arg(self.nodes_key())
            .arg(&self.node_id)
            .query_async(&mut connection)
            .await
            .map_err(StoreError::from)
    }

    /// The other live replicas taking sessions (those whose heartbeat key lives); the names of
    /// replicas whose key is gone are dropped from the set.
    pub async fn takers(&self) -> StoreResult<Vec<String>> {
        let mut connection = self.timed();
        let names: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.nodes_key())
            .query_async(&mut connection)
            .await?;
        let names: Vec<String> = names.into_iter().filter(|n| *n != self.node_id).collect();
        if names.is_empty() {
            return Ok(names);
        }
        let mut get = redis::cmd("MGET");
        for name in &names {
            get.arg(self.node_key(name));
        }
        let urls: Vec<Option<String>> = get.query_async(&mut connection).await?;
        let (live, dead): (Vec<_>, Vec<_>) = names
            .into_iter()
            .zip(urls)
            .partition(|(_, url)| url.is_some());
        if !dead.is_empty() {
            let mut drop = redis::cmd("SREM");
            drop.arg(self.nodes_key());
            for (name, _) in &dead {
                drop.arg(name);
            }
            let _: RedisResult<()> = drop.query_async(&mut connection).await;
        }
        Ok(live.into_iter().map(|(name, _)| name).collect())
    }

    /// Hands each session (id, held by the fence) to its replica, if this replica still owns
    /// it, in one round trip: whether it did, for each. The replica takes it over at its first
    /// request.
    pub async fn hand_to(
        &self,
        server: &str,
        sessions: &[(&str, &Fence, &str)],
    ) -> StoreResult<Vec<bool>> {
        let sha = super::fenced::sha1(HAND_OVER);
        let mut pipe = redis::pipe();
        pipe.cmd("SCRIPT").arg("LOAD").arg(HAND_OVER).ignore();
        for (id, fence, to) in sessions {
            pipe.cmd("EVALSHA")
                .arg(&sha)
                .arg(1)
                .arg(self.session_key(server, id))
                .arg(&self.node_id)
                .arg(fence.epoch())
                .arg("")
                .arg(to)
                .arg("1");
        }
        let mut connection = self.timed();
        let epochs: Vec<u64> = pipe.query_async(&mut connection).await?;
        Ok(epochs.into_iter().map(|epoch| epoch > 0).collect())
    }
}
