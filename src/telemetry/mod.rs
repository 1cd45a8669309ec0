//! What the proxy tells of itself: Prometheus metrics, spans and their export, logs, W3C trace
//! context, and what is redacted from all of them.

pub mod logs;
pub mod metrics;
pub mod redact;
pub mod spans;
pub mod trace_context;
