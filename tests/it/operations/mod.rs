//! The binary as an operator runs it: logs, shutdown, the health probe, traces, redaction, the
//! quick start, the README's snippets, the benchmark harness, and the book's threat model kept
//! true.

mod bench_smoke;
mod binary;
mod book_defaults;
mod crate_map;
mod health_probe;
mod quick_start;
mod readme;
mod redaction;
mod start_log;
mod threat_model;
mod trace_context;
mod tracing;
mod try_it;
