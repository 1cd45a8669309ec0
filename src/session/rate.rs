//! Requests per second per principal, and per principal and tool (`[limits]`, `--rate-limit`):
//! a bucket each (GCRA: one instant per key, the theoretical arrival time of the next request),
//! a second's worth of burst. A request over its limit is refused with how long to wait,
//! before it reaches a session. The buckets are bounded: past `MAX_BUCKETS`, the ones that
//! are full again are forgotten (a full bucket and a missing one are the same).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::ids::Principal;
use crate::jsonrpc::Message;
use crate::methods;

/// Buckets kept at most before the full ones are dropped.
pub const MAX_BUCKETS: usize = 100_000;

/// As the configuration spells it: `[limits]` (applied to every served server).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
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

#[derive(Debug, Default)]
pub struct Limiter {
    limits: RateLimits,
    /// `principal` or `principal tool` → when its bucket is full again.
    buckets: Mutex<HashMap<String, Instant>>,
}

impl Limiter {
    pub fn new(limits: RateLimits) -> Limiter {
        Limiter {
            limits,
            buckets: Mutex::default(),
        }
    }

    /// Takes one request of `principal` out of its buckets, or says which limit it is over and
    /// when to try again (nothing is taken then).
    pub fn admit(&self, principal: &Principal, request: &Message) -> Result<(), Exceeded> {
        if self.limits.is_off() {
            return Ok(());
        }
        let tool = (request.method() == Some(methods::TOOLS_CALL))
            .then(|| called_tool(request))
            .flatten();
        let tool_rate = tool
            .as_ref()
            .and_then(|tool| self.limits.tools.get(tool).copied())
            .filter(|rate| *rate > 0.0);
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_BUCKETS {
            buckets.retain(|_, full_at| *full_at > now);
        }
        let principal_key = principal.as_str().to_owned();
        let principal_rate = Some(self.limits.requests_per_second).filter(|rate| *rate > 0.0);
        let principal_next = match principal_rate {
            Some(rate) => Some(
                take(&buckets, &principal_key, rate, now)
                    .map_err(|retry_after| Exceeded::Requests { retry_after })?,
            ),
            None => None,
        };
        let tool_next = match (tool_rate, &tool) {
            (Some(rate), Some(tool)) => {
                let key = format!("{principal_key} {tool}");
                let next =
                    take(&buckets, &key, rate, now).map_err(|retry_after| Exceeded::Tool {
                        tool: tool.clone(),
                        retry_after,
                    })?;
                Some((key, next))
            }
            _ => None,
        };
        if let Some(next) = principal_next {
            buckets.insert(principal_key, next);
        }
        if let Some((key, next)) = tool_next {
            buckets.insert(key, next);
        }
        Ok(())
    }
}

/// GCRA: the bucket of `key` after one more request at `rate` per second, or how long until
/// it has room for one.
fn take(
    buckets: &HashMap<String, Instant>,
    key: &str,
    rate: f64,
    now: Instant,
) -> Result<Instant, Duration> {
    let interval = Duration::from_secs_f64(1.0 / rate);
    let burst = interval.mul_f64(rate.ceil().max(1.0));
    let full_at = buckets
        .get(key)
        .copied()
        .filter(|at| *at > now)
        .unwrap_or(now);
    let next = full_at + interval;
    match next.duration_since(now) {
        waited if waited > burst => Err(waited - burst),
        _ => Ok(next),
    }
}

/// The tool a `tools/call` names.
fn called_tool(request: &Message) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Called {
        name: String,
    }
    request.params_as::<Called>().map(|called| called.name)
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
        let limiter = Limiter::new(RateLimits {
            requests_per_second: 2.0,
            ..RateLimits::default()
        });
        let alice = Principal::from_credential(b"Bearer alice");
        let bob = Principal::from_credential(b"Bearer bob");
        let ping = request("ping", "");
        assert!(limiter.admit(&alice, &ping).is_ok());
        assert!(limiter.admit(&alice, &ping).is_ok());
        let refused = limiter.admit(&alice, &ping).unwrap_err();
        assert_eq!(
            refused,
            Exceeded::Requests {
                retry_after: Duration::from_millis(500)
            }
        );
        assert!(
            limiter.admit(&bob, &ping).is_ok(),
            "another principal's own"
        );
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(limiter.admit(&alice, &ping).is_ok());
        assert!(limiter.admit(&alice, &ping).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_tool_has_its_own_rate_within_the_principals() {
        let limiter = Limiter::new(RateLimits {
            requests_per_second: 0.0,
            tools: [("add".to_owned(), 0.5)].into(),
        });
        let alice = Principal::from_credential(b"Bearer alice");
        assert!(limiter.admit(&alice, &request("tools/call", "add")).is_ok());
        let refused = limiter
            .admit(&alice, &request("tools/call", "add"))
            .unwrap_err();
        assert_eq!(refused.retry_after(), Duration::from_secs(2));
        assert!(matches!(refused, Exceeded::Tool { ref tool, .. } if tool == "add"));
        assert!(limiter
            .admit(&alice, &request("tools/call", "echo"))
            .is_ok());
        assert!(limiter.admit(&alice, &request("tools/list", "")).is_ok());
    }
}
