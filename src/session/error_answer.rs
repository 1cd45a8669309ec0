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
pub(in crate::session) enum ErrorAnswer {
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
    /// A list's cursor that a virtual server did not give.
    #[error("Invalid params: unknown cursor {0:?}")]
    UnknownCursor(String),
    /// A method a virtual server neither routes nor answers.
    #[error(
        "Method not found: {0} (a virtual server routes its members' tools, prompts, resources \
         and completions)"
    )]
    NotRouted(String),
    /// A virtual server's `initialize`, with not one member that could be opened.
    #[error("no member of the virtual server {server} could be opened: {causes}")]
    NoMember { server: String, causes: String },
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
    pub(in crate::session) fn code(&self) -> i64 {
        match self {
            ErrorAnswer::NotOffered(_) | ErrorAnswer::NotRouted(_) => METHOD_NOT_FOUND,
            ErrorAnswer::NotStarted => INVALID_REQUEST,
            ErrorAnswer::Subscription(_)
            | ErrorAnswer::Unreadable(_)
            | ErrorAnswer::UnknownTool(_)
            | ErrorAnswer::UnknownPrompt(_)
            | ErrorAnswer::UnknownCursor(_) => INVALID_PARAMS,
            ErrorAnswer::UnknownResource(_) => LEGACY_RESOURCE_NOT_FOUND,
            ErrorAnswer::Upstream(_) | ErrorAnswer::OwnerLeft | ErrorAnswer::NoMember { .. } => {
                INTERNAL_ERROR
            }
        }
    }

    /// The error response to the request `id`.
    pub(in crate::session) fn to_response(&self, id: &Value) -> Bytes {
        let data = match self {
            ErrorAnswer::UnknownResource(uri) => Some(json!({ "uri": uri })),
            _ => None,
        };
        jsonrpc::error_response(id, self.code(), &self.to_string(), data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_has_the_code_a_server_would_answer_with() {
        let answer: Value = serde_json::from_slice(
            &ErrorAnswer::UnknownResource("a://b".into()).to_response(&json!(4)),
        )
        .unwrap();
        assert_eq!(answer["error"]["code"], -32002);
        assert_eq!(answer["error"]["data"]["uri"], "a://b");
        assert_eq!(ErrorAnswer::UnknownCursor("x".into()).code(), -32602);
        assert_eq!(ErrorAnswer::NotRouted("tasks/get".into()).code(), -32601);
        let none = ErrorAnswer::NoMember {
            server: "bank".into(),
            causes: "gone".into(),
        };
        assert_eq!(none.code(), -32603);
        assert_eq!(ErrorAnswer::Upstream(UpstreamError::Gone).code(), -32603);
    }
}
