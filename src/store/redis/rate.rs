//! Rate-limit buckets shared by the replicas: one script takes a request out of each of a
//! request's buckets, or none, in one round trip, on the store's clock (the replicas' clocks
//! never meet).

use std::time::Duration;

use super::RedisStore;
use crate::store::StoreResult;

/// KEYS: the buckets; ARGV: per bucket, its interval and burst in microseconds. Each key holds
/// when its bucket is full again (µs, the store's clock) and expires then. Returns `{0, 0}`,
/// or `{n, µs to wait}` for the first bucket (1-based) with no room; nothing is taken then.
const TAKE: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local next = {}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local full_at = tonumber(redis.call('GET', key) or now)
  if full_at < now then full_at = now end
  local after = full_at + interval
  if after - now > burst then
    return {i, after - now - burst}
  end
  next[i] = after
end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, string.format('%d', next[i]), 'PX', math.ceil((next[i] - now) / 1000))
end
return {0, 0}
";

/// One bucket: its name (a principal, or a principal and a tool), interval and burst.
pub type Bucket<'a> = (&'a str, Duration, Duration);

impl RedisStore {
    /// Takes one request out of each of `buckets` of `server`'s, all of `principal`, for every
    /// replica at once: `Some((index, wait))` names the first with no room and how long until
    /// it has some.
    pub async fn take(
        &self,
        server: &str,
        principal: &str,
        buckets: &[Bucket<'_>],
    ) -> StoreResult<Option<(usize, Duration)>> {
        let mut command = redis::cmd("EVAL");
        command.arg(TAKE).arg(buckets.len());
        for (name, _, _) in buckets {
            command.arg(self.bucket_key(server, principal, name));
        }
        for (_, interval, burst) in buckets {
            command
                .arg(interval.as_micros().max(1) as u64)
                .arg(burst.as_micros() as u64);
        }
        let mut connection = self.timed();
        let (index, wait): (u64, u64) = command.query_async(&mut connection).await?;
        Ok((index > 0).then(|| (index as usize - 1, Duration::from_micros(wait))))
    }

    /// Bucket `name`'s key: on a cluster, tagged with its principal (braces left out), so that
    /// a request's buckets share a slot.
    fn bucket_key(&self, server: &str, principal: &str, name: &str) -> String {
        match self.cluster {
            true => {
                let tag = principal.replace(['{', '}'], "_");
                format!("{}:{server}:rate:{{{tag}}}:{name}", self.namespace)
            }
            false => format!("{}:{server}:rate:{name}", self.namespace),
        }
    }
}
