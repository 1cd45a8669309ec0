//! The binary as an operator runs it: logs, shutdown, the health probe, traces, redaction, the
//! quick start, the README's snippets and the benchmark harness.

mod bench_smoke;
mod binary;
mod health_probe;
mod quick_start;
mod readme;
mod redaction;
mod trace_context;
mod tracing;
