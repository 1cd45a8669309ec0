//! mcp-session-proxy: a session-aware reverse proxy for MCP servers.
//!
//! Requests flow front → session → upstream; server messages flow back through the session's
//! event log.
//!
//! - [`front`]: client transports. `streamable_http` serves POST/GET/DELETE on `/mcp`, names a
//!   session by its `Mcp-Session-Id` header (or `Mcp-Protocol-Session-Id`) and turns
//!   `Last-Event-ID` into a stream resume; `websocket` serves the same path upgraded;
//!   `session_methods` answers `session/start|resume|end` for both; `legacy_sse` the 2024-11-05
//!   pair; `event_stream` writes a session stream as SSE; `rejection` is the one place where
//!   refused input becomes an HTTP status and a JSON-RPC error.
//! - [`session`]: what a session is. `registry` creates, finds (per principal) and expires
//!   sessions; `log` is the bounded, coalescing event log every server message is filed in;
//!   `protocol` numbers a protocol-level session's events and announces the methods;
//!   `routing` decides which stream a server message belongs to; `id` mints session ids.
//! - [`upstream`]: server transports. `stdio` runs one child process per session, `shared` one
//!   for all, `streamable_http` and `legacy_sse` make the proxy an HTTP client.
//! - [`jsonrpc`] the message model, [`sse`] the SSE codec, [`config`] options and validation,
//!   [`metrics`] Prometheus counters, [`memory`] freed memory given back, [`server`] start and
//!   stop, [`demo`] the bundled server.

#![forbid(unsafe_code)]

pub mod config;
pub mod demo;
pub mod event;
pub mod front;
pub mod hop;
pub mod ids;
pub mod jsonrpc;
pub mod memory;
pub mod metrics;
pub mod server;
pub mod session;
pub mod sse;
pub mod store;
pub mod upstream;
