//! Process-wide counters and gauges, rendered as Prometheus text at `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

macro_rules! counters {
    ($($name:ident: $kind:literal, $help:literal;)*) => {
        /// One atomic per figure; cheap to bump from any task.
        #[derive(Debug, Default)]
        pub struct Metrics {
            $(pub $name: AtomicU64,)*
            /// HTTP requests on MCP endpoints, by method and status, and their latency.
            pub requests: Requests,
        }

        impl Metrics {
            /// The Prometheus text exposition of every figure.
            pub fn render(&self) -> String {
                let mut out = String::new();
                $(
                    let name = concat!("mcp_proxy_", stringify!($name));
                    let _ = writeln!(out, "# HELP {name} {}", $help);
                    let _ = writeln!(out, "# TYPE {name} {}", $kind);
                    let _ = writeln!(out, "{name} {}", self.$name.load(Ordering::Relaxed));
                )*
                self.requests.render(&mut out);
                out
            }
        }
    };
}

counters! {
    sessions_open: "gauge", "Sessions currently open.";
    sessions_created_total: "counter", "Sessions created.";
    sessions_expired_total: "counter", "Sessions ended by idle expiry.";
    sessions_rejected_total: "counter", "Session creations refused by the session limit.";
    events_logged_total: "counter", "Server-to-client messages appended to event logs.";
    events_coalesced_total: "counter", "Logged messages replaced by a later one with the same coalesce key.";
    events_evicted_total: "counter", "Logged messages evicted from a replay window.";
    replays_total: "counter", "Resumptions from a known position (Last-Event-ID, or session/resume inside the window).";
    websocket_connections: "gauge", "WebSocket connections open.";
    store_up: "gauge", "1 while the Redis store answers (always 0 with the memory store).";
    store_errors_total: "counter", "Failed Redis commands (writes, heartbeats, reads).";
    store_write_queue: "gauge", "Owners' writes queued for Redis and not yet written (past 50000, new work waits).";
    store_write_lag_ms: "gauge", "How long the oldest write of the last batch waited before it reached Redis, in milliseconds.";
    sessions_forwarded_total: "counter", "Client messages forwarded to the replica owning their session.";
    sessions_taken_over_total: "counter", "Sessions taken over from a replica whose heartbeat lapsed.";
    replay_gaps_total: "counter", "Reads that found messages evicted before delivery.";
    upstream_spawns_total: "counter", "Upstream server processes started.";
    upstream_exits_total: "counter", "Upstream servers that exited on their own.";
    upstreams_modern: "gauge", "Served servers that speak 2026-07-28 (configured, or found by upstream.protocol = auto), bridged for legacy clients.";
    requests_timed_out_total: "counter", "Requests failed because their server stayed silent past upstream.request_timeout.";
    list_cache_hits_total: "counter", "List requests answered from the list cache.";
    list_cache_misses_total: "counter", "Cacheable list requests sent to the server.";
    response_cache_hits_total: "counter", "2026-07-28 requests answered from a result the server (or upstream.cache_ttl) marked reusable (ttlMs, cacheScope).";
    response_cache_misses_total: "counter", "Cacheable 2026-07-28 requests sent to the server.";
}

impl Metrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn dec(counter: &AtomicU64) {
        counter.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn set(gauge: &AtomicU64, value: u64) {
        gauge.store(value, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// The JSON-RPC methods counted under their own name; any other is counted as `other`, so a
/// client cannot grow the label set.
const KNOWN_METHODS: [&str; 22] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/cancel",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "server/discover",
];

/// The label for a JSON-RPC method.
pub fn method_label(method: &str) -> &'static str {
    KNOWN_METHODS
        .iter()
        .find(|known| **known == method)
        .copied()
        .unwrap_or("other")
}

/// Upper bounds of the latency buckets, in seconds.
const LATENCY_BOUNDS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Requests by (method, status), and a latency histogram (time to the response head; for a
/// stream, to its start).
#[derive(Debug, Default)]
pub struct Requests {
    counts: Mutex<BTreeMap<(&'static str, u16), u64>>,
    buckets: [AtomicU64; LATENCY_BOUNDS.len()],
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Requests {
    pub fn record(&self, method: &'static str, status: u16, latency: Duration) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((method, status))
            .or_default() += 1;
        let seconds = latency.as_secs_f64();
        if let Some(bucket) = LATENCY_BOUNDS.iter().position(|bound| seconds <= *bound) {
            self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_micros
            .fetch_add(latency.as_micros() as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String) {
        let name = "mcp_proxy_requests_total";
        let _ = writeln!(out, "# HELP {name} HTTP requests on MCP endpoints by JSON-RPC method (GET, DELETE for those) and status.");
        let _ = writeln!(out, "# TYPE {name} counter");
        for ((method, status), n) in self.counts.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = writeln!(out, "{name}{{method=\"{method}\",status=\"{status}\"}} {n}");
        }
        let name = "mcp_proxy_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from a request to its response head."
        );
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, bucket) in LATENCY_BOUNDS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {count}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let metrics = Metrics::default();
        Metrics::inc(&metrics.sessions_created_total);
        let text = metrics.render();
        assert!(text.contains(
            "# TYPE mcp_proxy_sessions_created_total counter\nmcp_proxy_sessions_created_total 1\n"
        ));
        assert!(text.contains("mcp_proxy_sessions_open 0\n"));
    }

    #[test]
    fn counts_requests_by_bounded_method_and_status_with_a_histogram() {
        let metrics = Metrics::default();
        let requests = &metrics.requests;
        requests.record(method_label("tools/call"), 200, Duration::from_micros(700));
        requests.record(method_label("tools/call"), 200, Duration::from_millis(30));
        requests.record(
            method_label("x/made-up-by-a-client"),
            400,
            Duration::from_secs(60),
        );
        let text = metrics.render();
        assert!(
            text.contains("mcp_proxy_requests_total{method=\"tools/call\",status=\"200\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("mcp_proxy_requests_total{method=\"other\",status=\"400\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("mcp_proxy_request_duration_seconds_bucket{le=\"0.001\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("mcp_proxy_request_duration_seconds_bucket{le=\"0.05\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("mcp_proxy_request_duration_seconds_bucket{le=\"10\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("mcp_proxy_request_duration_seconds_bucket{le=\"+Inf\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("mcp_proxy_request_duration_seconds_count 3\n"),
            "{text}"
        );
    }
}
