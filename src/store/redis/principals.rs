//! Sessions per principal, counted for every replica at once: a sorted set per principal and
//! server (`ns:<server>:principal:<principal>`, the principal a digest) whose members are the
//! principal's session ids, each scored with when it stops counting, on the store's clock: when
//! its record expires (the writer scores it again each time it renews the record's TTL), or,
//! from its reservation until its record is written, `UNRECORDED_GRACE` later. The script that
//! reserves a place first drops the members past their score, so a replica killed mid-way
//! leaks nothing for longer than its sessions' TTL; every command names the set alone (one hash
//! slot on a cluster). The writer scores the member with each record it writes (a session taken
//! over, or written again after an outage, is the same member: never counted twice), removes it
//! when the session ends, and keeps the set alive as long as its members.

use std::time::Duration;

use super::RedisStore;
use crate::store::StoreResult;

/// How long a reserved place counts before the session's record is written: a replica that
/// dies between the two holds the place this long at most.
const UNRECORDED_GRACE: Duration = Duration::from_secs(30);

/// KEYS: the principal's sessions. ARGV: the session id, the limit, `UNRECORDED_GRACE` and
/// the set's TTL (ms). Returns 1 when the session counts (from now, or already did), 0 when the
/// principal is at its limit.
const RESERVE: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local sessions, id = KEYS[1], ARGV[1]
if not redis.call('ZSCORE', sessions, id) then
  redis.call('ZREMRANGEBYSCORE', sessions, '-inf', string.format('(%d', now))
  if redis.call('ZCARD', sessions) >= tonumber(ARGV[2]) then
    return 0
  end
  redis.call('ZADD', sessions, string.format('%d', now + tonumber(ARGV[3])), id)
end
redis.call('PEXPIRE', sessions, ARGV[4])
return 1
";

/// KEYS: the principal's sessions. ARGV: the session id, its record's TTL (ms), and `XX` when
/// it is only scored again (a TTL renewed: a session that ended and left the set is not put
/// back by a late write) or empty when its record was written whole. The session counts until
/// its record expires; the set lives as long.
pub(super) const COUNT: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local score = string.format('%d', now + tonumber(ARGV[2]))
if ARGV[3] == 'XX' then
  redis.call('ZADD', KEYS[1], 'XX', score, ARGV[1])
else
  redis.call('ZADD', KEYS[1], score, ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

impl RedisStore {
    /// The key of `principal`'s sessions of `server`.
    pub(super) fn principal_key(&self, server: &str, principal: &str) -> String {
        format!("{}:{server}:principal:{principal}", self.namespace)
    }

    /// Counts session `id` among `principal`'s sessions of `server`, for every replica, if it
    /// holds fewer than `limit` (or counts there already): whether it does now.
    pub async fn reserve_session(
        &self,
        server: &str,
        principal: &str,
        id: &str,
        limit: usize,
    ) -> StoreResult<bool> {
        let mut connection = self.timed();
        let counted: u8 = redis::cmd("EVAL")
            .arg(RESERVE)
            .arg(1)
            .arg(self.principal_key(server, principal))
            .arg(id)
            .arg(limit)
            .arg(UNRECORDED_GRACE.as_millis() as u64)
            .arg(self.ttl.as_millis() as u64)
            .query_async(&mut connection)
            .await?;
        Ok(counted == 1)
    }

    /// Gives back the place of session `id`, reserved for a session that was never created.
    pub async fn release_session(
        &self,
        server: &str,
        principal: &str,
        id: &str,
    ) -> StoreResult<()> {
        let mut connection = self.timed();
        redis::cmd("ZREM")
            .arg(self.principal_key(server, principal))
            .arg(id)
            .query_async(&mut connection)
            .await
            .map_err(Into::into)
    }
}
