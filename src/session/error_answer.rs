//! The one place where a session picks the JSON-RPC error it answers a client's request with
//! itself (logged on the request's stream, like a server's answer): the code for each cause.

use bytes::Bytes;
use serde_json::{json, Value};

use super::SubscriptionRefused;
use crate::upstream::UpstreamError;
use crate::wire::jsonrpc::{
    self, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, LEGACY_RESOURCE_NOT_FOUND,
    METHOD_NOT_FOUND,
};

/// Why a session answers a client's request with an error instead of its server.
#[derive(Debug, thiserror::Error)]
pub(super) enum ErrorAnswer {
    /// A `session/*` method sent where no front offers it.
    #[error(
        "Method not found: {0} is offered on WebSocket connections and on Streamable HTTP \
         requests without Mcp-Session-Id, not on this one"
    )]
    NotOffered(String),
    /// A request before `initialize` to a server that starts at `initialize`.
    #[error("Invalid Request: {}", UpstreamError::NotStarted)]
    NotStarted,
    /// A `tools/call` of a tool the server's clients do not see (`[tools]`).
    #[error("Unknown tool: {0}")]
    UnknownTool(String),
    /// A `prompts/get` of a prompt the server's clients do not see (`[prompts]`).
    #[error("Unknown prompt: {0}")]
    UnknownPrompt(String),
    /// A `resources/read` (`subscribe`, `unsubscribe`) of a resource the server's clients do
    /// not see (`[resources]`): answered as a legacy server answers for one it does not have.
    #[error("Resource not found: {0}")]
    UnknownResource(String),
    /// A request whose target (the tool, prompt or resource it names) cannot be read: refused,
    /// since no check could look at it.
    #[error("Invalid params: {0}")]
    Unreadable(#[from] crate::wire::named::Unreadable),
    /// A subscription past the session's limits.
    #[error(transparent)]
    Subscription(#[from] SubscriptionRefused),
    /// The server failed the request, or could not be given it.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The request was in flight on a replica that went away (the gap rule after a takeover).
    #[error(
        "the replica that owned this session went away while this request was in flight; it \
         may or may not have been carried out"
    )]
    OwnerLeft,
}

impl ErrorAnswer {
    /// The JSON-RPC error code a client reads.
    pub(super) fn code(&self) -> i64 {
        match self {
            ErrorAnswer::NotOffered(_) => METHOD_NOT_FOUND,
            ErrorAnswer::NotStarted => INVALID_REQUEST,
            ErrorAnswer::Subscription(_)
            | ErrorAnswer::Unreadable(_)
            | ErrorAnswer::UnknownTool(_)
            | ErrorAnswer::UnknownPrompt(_) => INVALID_PARAMS,
            ErrorAnswer::UnknownResource(_) => LEGACY_RESOURCE_NOT_FOUND,
            ErrorAnswer::Upstream(_) | ErrorAnswer::OwnerLeft => INTERNAL_ERROR,
        }
    }

    /// The error response to the request `id`.
    pub(super) fn to_response(&self, id: &Value) -> Bytes {
        let data = match self {
            ErrorAnswer::UnknownResource(uri) => Some(json!({ "uri": uri })),
            _ => None,
        };
        jsonrpc::error_response(id, self.code(), &self.to_string(), data)
    }
}
