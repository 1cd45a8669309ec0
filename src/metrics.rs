//! Process-wide counters and gauges, rendered as Prometheus text at `/metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($name:ident: $kind:literal, $help:literal;)*) => {
        /// One atomic per figure; cheap to bump from any task.
        #[derive(Debug, Default)]
        pub struct Metrics {
            $(pub $name: AtomicU64,)*
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
    replays_total: "counter", "Stream resumptions from a Last-Event-ID.";
    replay_gaps_total: "counter", "Reads that found messages evicted before delivery.";
    upstream_spawns_total: "counter", "Upstream server processes started.";
    upstream_exits_total: "counter", "Upstream servers that exited on their own.";
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

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
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
}
