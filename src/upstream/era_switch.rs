//! Which revision a served server speaks now: settled at start (`auto` asks the server), then
//! switched while running when the server refuses the revision it was spoken to in and names
//! the other (-32022 whose `data.supported` says which), so that a server upgraded or rolled
//! back behind a running proxy keeps working. Each switch is logged and counted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::Value;
use tracing::warn;

use crate::telemetry::metrics::ServerMetrics;
use crate::wire::era::{Era, MODERN_VERSION};
use crate::wire::jsonrpc::UNSUPPORTED_VERSION;

/// The revision new upstreams of one served server speak.
pub struct EraSwitch {
    modern: AtomicBool,
    /// The server, as operators name it (its command line or URL).
    server: String,
    metrics: Arc<ServerMetrics>,
}

impl EraSwitch {
    /// A server found (or configured) to speak `era`; `auto` left unsettled is legacy.
    pub fn new(era: Era, server: String, metrics: Arc<ServerMetrics>) -> Arc<EraSwitch> {
        let modern = era == Era::Modern;
        metrics.upstreams_modern.set(i64::from(modern));
        Arc::new(EraSwitch {
            modern: AtomicBool::new(modern),
            server,
            metrics,
        })
    }

    pub fn era(&self) -> Era {
        match self.modern.load(Ordering::Acquire) {
            true => Era::Modern,
            false => Era::Legacy,
        }
    }

    /// The server said it speaks `era` now: new upstreams speak it. Whether that was a change.
    pub fn switch_to(&self, era: Era) -> bool {
        let modern = era == Era::Modern;
        if self.modern.swap(modern, Ordering::AcqRel) == modern {
            return false;
        }
        self.metrics.upstreams_modern.set(i64::from(modern));
        self.metrics.upstream_protocol_switches_total.inc();
        let to = match modern {
            true => MODERN_VERSION,
            false => "legacy",
        };
        warn!(server = %self.server, to,
              "the server refused the protocol revision it was sent and named another: the proxy speaks that one to it from now on");
        true
    }
}

/// The revision a server's answer names instead of the one it was sent: a JSON-RPC error
/// -32022 whose `data.supported` lists 2026-07-28 (a modern server) or only older revisions (a
/// legacy one). `None` for any other answer.
pub fn named_instead(answer: &[u8]) -> Option<Era> {
    let answer: Value = serde_json::from_slice(answer).ok()?;
    let error = answer.get("error")?;
    if error.get("code")?.as_i64()? != UNSUPPORTED_VERSION {
        return None;
    }
    let supported = error.get("data")?.get("supported")?.as_array()?;
    if supported.iter().any(|version| version == MODERN_VERSION) {
        return Some(Era::Modern);
    }
    supported
        .iter()
        .any(|version| version.as_str().is_some_and(|v| v < MODERN_VERSION))
        .then_some(Era::Legacy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_naming_the_other_revision_says_which() {
        let modern = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"no",
            "data":{"supported":["2026-07-28"],"requested":"2025-11-25"}}}"#;
        assert_eq!(named_instead(modern), Some(Era::Modern));
        let legacy = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"no",
            "data":{"supported":["2025-06-18","2025-11-25"],"requested":"2026-07-28"}}}"#;
        assert_eq!(named_instead(legacy), Some(Era::Legacy));
        for other in [
            &br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"no"}}"#,
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"data":{"supported":[]}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            b"Bad Request",
        ] {
            assert_eq!(named_instead(other), None);
        }
    }

    #[test]
    fn a_switch_counts_changes_only() {
        let metrics = crate::telemetry::metrics::Metrics::default().server("s");
        let switch = EraSwitch::new(Era::Legacy, "s".into(), metrics.clone());
        assert!(!switch.switch_to(Era::Legacy));
        assert!(switch.switch_to(Era::Modern));
        assert!(!switch.switch_to(Era::Modern));
        assert_eq!(switch.era(), Era::Modern);
        assert_eq!(metrics.upstream_protocol_switches_total.get(), 1);
        assert_eq!(metrics.upstreams_modern.get(), 1);
    }
}
