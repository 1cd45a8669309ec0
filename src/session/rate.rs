//! Requests per second per principal, and per principal and tool (`[limits]`, `--rate-limit`):
//! a bucket each (GCRA: one instant per key, the theoretical arrival time of the next request),
//! a second's worth of burst. A request over its limit is refused with how long to wait,
//! before it reaches a session. With a shared store the replicas take from the same buckets
//! there (`RedisStore::take`); else each keeps its own here, bounded: past `MAX_BUCKETS`, the
//! ones that are full again are forgotten (a full bucket and a missing one are the same), and
//! while every one kept is in use a new key is not kept (its request goes through uncounted:
//! memory stays bounded whatever the number of principals). How many are kept here is the
//! gauge `mcp_proxy_rate_buckets`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;

use crate::base::ids::Principal;
use crate::wire::jsonrpc::Message;
use crate::wire::named::{self, Named};

/// Buckets kept at most before the full ones are dropped.
pub const MAX_BUCKETS: usize = 100_000;

/// The rates principals are held to: what `[limits]` says (applied to every served server).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RateLimits {
    /// Requests one principal may send per second, on average (0: no limit).
    pub requests_per_second: f64,
    /// `tool = calls per second` one principal may make of that tool (by the name clients see).
    pub tools: BTreeMap<String, f64>,
}

impl RateLimits {
    pub fn is_off(&self) -> bool {
        self.requests_per_second <= 0.0 && self.tools.values().all(|rate| *rate <= 0.0)
    }
}

/// Which limit a request went over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exceeded {
    /// The principal's requests per second.
    Requests { retry_after: Duration },
    /// The principal's calls of one tool per second.
    Tool { tool: String, retry_after: Duration },
}

impl Exceeded {
    pub fn retry_after(&self) -> Duration {
        match self {
            Exceeded::Requests { retry_after } | Exceeded::Tool { retry_after, .. } => *retry_after,
        }
    }
}

/// One bucket a request takes from: its key (`principal`, or `principal tool`), how often it
/// refills by one request, and how far ahead of now it may run (the burst).
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    pub key: String,
    pub interval: Duration,
    pub burst: Duration,
    /// The tool it is of, if it is a tool's.
    pub tool: Option<String>,
}

impl Bucket {
    fn new(key: String, rate: f64, tool: Option<String>) -> Bucket {
        let interval = Duration::from_secs_f64(1.0 / rate);
        Bucket {
            key,
            burst: interval.mul_f64(rate.ceil().max(1.0)),
            interval,
            tool,
        }
    }

    /// The refusal of a request over this bucket, `retry_after` from now.
    pub fn exceeded(&self, retry_after: Duration) -> Exceeded {
        match &self.tool {
            None => Exceeded::Requests { retry_after },
            Some(tool) => Exceeded::Tool {
                tool: tool.clone(),
                retry_after,
            },
        }
    }
}

#[derive(Debug, Default)]
pub struct Limiter {
    limits: RateLimits,
    /// Buckets kept at most.
    capacity: usize,
    /// A bucket's key → when it is full again (this replica's own count).
    buckets: Mutex<HashMap<String, Instant>>,
    /// Shows how many buckets are kept.
    kept: Gauge,
}

impl Limiter {
    /// A limiter whose count of buckets kept shows in `kept`.
    pub fn new(limits: RateLimits, kept: Gauge) -> Limiter {
        Limiter::with_capacity(limits, MAX_BUCKETS, kept)
    }

    fn with_capacity(limits: RateLimits, capacity: usize, kept: Gauge) -> Limiter {
        Limiter {
            limits,
            capacity,
            buckets: Mutex::default(),
            kept,
        }
    }

    /// The buckets a request of `principal` takes from (none without limits).
    pub fn buckets(&self, principal: &Principal, request: &Message) -> Vec<Bucket> {
        if self.limits.is_off() {
            return Vec::new();
        }
        let mut buckets = Vec::with_capacity(2);
        let rate = self.limits.requests_per_second;
        if rate > 0.0 {
            buckets.push(Bucket::new(principal.as_str().to_owned(), rate, None));
        }
        // A tool that cannot be read is refused by the session (`named`), limited or not.
        let tool = match named::named(request) {
            Ok(Some(Named::Tool(tool))) => Some(tool),
            _ => None,
        };
        if let Some((tool, rate)) = tool.and_then(|tool| {
            let rate = self.limits.tools.get(&tool).copied()?;
            (rate > 0.0).then_some((tool, rate))
        }) {
            let key = format!("{} {tool}", principal.as_str());
            buckets.push(Bucket::new(key, rate, Some(tool)));
        }
        buckets
    }

    /// Takes one request out of each of `buckets` on this replica, or says which one it is over
    /// and when to try again (nothing is taken then).
    pub fn admit(&self, buckets: &[Bucket]) -> Result<(), Exceeded> {
        let now = Instant::now();
        let mut full_at = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if full_at.len() >= self.capacity {
            full_at.retain(|_, at| *at > now);
            self.kept.set(full_at.len() as i64);
        }
        let mut taken = Vec::with_capacity(buckets.len());
        for bucket in buckets {
            let from = full_at
                .get(&bucket.key)
                .copied()
                .filter(|at| *at > now)
                .unwrap_or(now);
            let next = from + bucket.interval;
            let ahead = next.duration_since(now);
            if ahead > bucket.burst {
                return Err(bucket.exceeded(ahead - bucket.burst));
            }
            taken.push(next);
        }
        for (bucket, next) in buckets.iter().zip(taken) {
            if full_at.len() < self.capacity || full_at.contains_key(&bucket.key) {
                full_at.insert(bucket.key.clone(), next);
            }
        }
        self.kept.set(full_at.len() as i64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn request(method: &str, tool: &str) -> Message {
        let text = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"name":"{tool}"}}}}"#
        );
        Message::parse(Bytes::from(text)).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_principal_gets_its_rate_with_a_seconds_burst_and_waits_out_the_rest() {
        let limiter = Limiter::new(
            RateLimits {
                requests_per_second: 2.0,
                ..RateLimits::default()
            },
            Gauge::default(),
        );
        let alice = Principal::from_credential(b"Bearer alice");
        let bob = Principal::from_credential(b"Bearer bob");
        let ping = request("ping", "");
        assert!(limiter.admit(&limiter.buckets(&alice, &ping)).is_ok());
        assert!(limiter.admit(&limiter.buckets(&alice, &ping)).is_ok());
        let refused = limiter.admit(&limiter.buckets(&alice, &ping)).unwrap_err();
        assert_eq!(
            refused,
            Exceeded::Requests {
                retry_after: Duration::from_millis(500)
            }
        );
        assert!(
            limiter.admit(&limiter.buckets(&bob, &ping)).is_ok(),
            "another principal's own"
        );
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(limiter.admit(&limiter.buckets(&alice, &ping)).is_ok());
        assert!(limiter.admit(&limiter.buckets(&alice, &ping)).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn the_buckets_kept_are_bounded_whatever_the_number_of_principals() {
        let limiter = Limiter::with_capacity(
            RateLimits {
                requests_per_second: 1.0,
                ..RateLimits::default()
            },
            2,
            Gauge::default(),
        );
        let ping = request("ping", "");
        for n in 0..10 {
            let principal = Principal::from_credential(format!("Bearer {n}").as_bytes());
            assert!(limiter.admit(&limiter.buckets(&principal, &ping)).is_ok());
        }
        let kept = || limiter.buckets.lock().unwrap().len();
        assert_eq!(
            kept(),
            2,
            "new keys are not kept while every bucket is in use"
        );
        assert_eq!(limiter.kept.get(), 2, "the gauge shows them");
        let first = Principal::from_credential(b"Bearer 0");
        assert!(
            limiter.admit(&limiter.buckets(&first, &ping)).is_err(),
            "a kept one still counts"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        let late = Principal::from_credential(b"Bearer late");
        assert!(limiter.admit(&limiter.buckets(&late, &ping)).is_ok());
        assert!(kept() <= 2, "full buckets make room");
        assert_eq!(limiter.kept.get(), kept() as i64);
        assert!(limiter.admit(&limiter.buckets(&late, &ping)).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_tool_has_its_own_rate_within_the_principals() {
        let limiter = Limiter::new(
            RateLimits {
                requests_per_second: 0.0,
                tools: [("add".to_owned(), 0.5)].into(),
            },
            Gauge::default(),
        );
        let alice = Principal::from_credential(b"Bearer alice");
        let add = limiter.buckets(&alice, &request("tools/call", "add"));
        assert!(limiter.admit(&add).is_ok());
        let refused = limiter.admit(&add).unwrap_err();
        assert_eq!(refused.retry_after(), Duration::from_secs(2));
        assert!(matches!(refused, Exceeded::Tool { ref tool, .. } if tool == "add"));
        let echo = limiter.buckets(&alice, &request("tools/call", "echo"));
        assert!(
            echo.is_empty(),
            "no limit of its own, none of the principal's"
        );
        assert!(limiter
            .buckets(&alice, &request("tools/list", ""))
            .is_empty());
    }
}
