//! Why the bridge to a 2026-07-28 server fails: a request its HTTP transport could not carry
//! (an `UpstreamError` the session fails the request with), or one of the bridge's own requests
//! that got no answer.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use crate::upstream::UpstreamError;

/// A request the transport to a 2026-07-28 HTTP server could not carry, in the bridge's words.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ModernHttpError {
    #[error("the request could not be built: {0}")]
    Unbuildable(Arc<http::Error>),
    #[error("the server's stream ended before its answer")]
    StreamEnded,
    /// The server's answer was no JSON-RPC message (its status).
    #[error("the server answered {0} without a JSON-RPC message")]
    NotJsonRpc(StatusCode),
}

/// Why a request of the bridge's own (`server/discover`, `tools/list`) got no answer.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("the server could not be reached: {0}")]
    Unreachable(#[from] UpstreamError),
    /// The request was given up before its answer (the server failed it, or went away).
    #[error("the server could not answer {0}")]
    NoAnswer(String),
    #[error("the server did not answer {method} within {timeout:?}")]
    Silent { method: String, timeout: Duration },
}
