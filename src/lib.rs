//! mcp-session-proxy: a session-aware reverse proxy for MCP servers.
//!
//! Requests flow front → session → upstream; server messages flow back through the session's
//! event log. No module imports against that flow (`../shared/tools/layers.py`, run in CI).
//!
//! - [`front`]: client transports. `streamable_http` serves POST/GET/DELETE on `/mcp`, names a
//!   session by its `Mcp-Session-Id` header (or `Mcp-Protocol-Session-Id`) and turns
//!   `Last-Event-ID` into a stream resume; `websocket` serves the same path upgraded;
//!   `session_methods` answers `session/start|resume|end` for both; `legacy_sse` the 2024-11-05
//!   pair; `internal` the other replicas' hop; `event_stream` is the one SSE writer every
//!   stream goes through (prelude, priming, keep-alive, close-after, `retry:` at shutdown), and
//!   `session_stream` gives it a session stream's frames; `telemetry` wraps each request (its
//!   metrics, its span from `traced`, what its `access` line names);
//!   `rejection` is the one place where refused input or a session's error becomes an HTTP
//!   status and a JSON-RPC error. Every front hands a client message to `Registry::deliver`.
//! - [`session`]: what a session is. The handle (`mod.rs`) and one file per job: `calls`
//!   (client messages in, requests in flight under upstream ids; `inflight`: what one waits
//!   for), `filing` (server messages and
//!   upstream failures into the log), `error_answer` (the code of each error a session answers
//!   a request with itself), `readers` (streams read, replayed, resumed), `state` (what
//!   the one lock guards); `registry` creates, finds (per principal) and expires sessions; `log`
//!   is the bounded, coalescing event log; `protocol` numbers a protocol-level session's events;
//!   `routing` decides which stream a server message belongs to; `replica` is everything about
//!   replicas sharing sessions (mirroring, lookup, views, following, takeover).
//! - [`upstream`]: server transports. `factory` builds a session's upstream; `stdio` runs one
//!   child process per session, `shared` one for all, `streamable_http` and `legacy_sse` make
//!   the proxy an HTTP client, `owner` reaches the replica that owns a session, `deferred`
//!   starts any of them at the session's `initialize`; `UpstreamError` names every way one fails.
//! - [`store`]: state beyond the process: `Memory`, or `redis` (records, logs as Redis Streams,
//!   heartbeats; a write-behind `Mirror` per owned session, a follower per view).
//! - Base modules every layer may use: [`jsonrpc`] the message model, [`era`] the names of the
//!   2026-07-28 revision, [`mirrored`] the headers that mirror a 2026-07-28 request's body
//!   (`Mcp-Name`, `Mcp-Param-*`), [`sse`] the SSE codec, [`trace_context`] W3C trace context
//!   from headers into `_meta` and back,
//!   [`event`] event ids and logged messages, [`ids`] session ids, replica names and principals,
//!   [`hop`] the replicas' hop on the wire and its signature, [`keys`] one key per purpose
//!   derived from the cluster secret, [`metrics`] the Prometheus figures per server,
//!   [`spans`] spans and their OTLP/HTTP export, [`memory`] freed memory given back, [`clock`] deadlines that never
//!   overflow, [`redact`] what is printed of URLs and session ids, [`backlog`] the bounded
//!   write-behind queue's count, which upstream readers wait on.
//! - Entry: [`config`] options and validation, [`server`] start and stop, [`demo`] the bundled
//!   server.

#![forbid(unsafe_code)]

pub mod backlog;
pub mod clock;
pub mod config;
pub mod demo;
pub mod era;
pub mod event;
pub mod front;
pub mod hop;
pub mod ids;
pub mod jsonrpc;
pub mod keys;
pub mod memory;
pub mod methods;
pub mod metrics;
pub mod mirrored;
pub mod redact;
pub mod server;
pub mod session;
pub mod spans;
pub mod sse;
pub mod store;
pub mod trace_context;
pub mod upstream;
