//! The wire formats: JSON-RPC messages, the MCP method table, what a message names, SSE, the
//! 2026-07-28 revision's names and its mirrored headers.

pub mod era;
pub mod http_body;
pub mod jsonrpc;
pub mod loopback;
pub mod methods;
pub mod mirrored;
pub mod named;
pub mod sse;
