//! Refusals of the 2026-07-28 front, and of `session/*` methods the proxy does not know: each
//! with its status and its code from the one table (`jsonrpc`).

use http::StatusCode;
use serde_json::json;

use super::Rejection;
use crate::wire::era::capability_object;
use crate::wire::era::request::Unfit;
use crate::wire::jsonrpc::{
    Message, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, MISSING_CAPABILITY,
};

/// A 2026-07-28 request refused before anything serves it, with the status, code and `data`
/// the revision gives each refusal.
impl From<Unfit> for Rejection {
    fn from(unfit: Unfit) -> Rejection {
        Rejection {
            data: unfit.data().map(Box::new),
            ..Rejection::new(unfit.status(), unfit.code(), unfit.to_string())
        }
    }
}

impl Rejection {
    /// A `session/*` method the proxy does not know.
    pub fn unknown_session_method(message: &Message) -> Rejection {
        Rejection::new(
            StatusCode::BAD_REQUEST,
            METHOD_NOT_FOUND,
            format!(
                "Method not found: {} (the session methods are session/start, session/resume and session/end)",
                message.method().unwrap_or_default()
            ),
        )
        .with_id(message.id())
    }

    /// A resource clients do not see (`[resources]`) named in a `subscriptions/listen`: refused
    /// as 2026-07-28 refuses a resource the server does not have (-32602, `data: {uri}`).
    pub fn resource_not_found(uri: &str) -> Rejection {
        Rejection {
            data: Some(Box::new(json!({ "uri": uri }))),
            ..Rejection::new(
                StatusCode::BAD_REQUEST,
                INVALID_PARAMS,
                format!("Resource not found: {uri}"),
            )
        }
    }

    /// A server asked, during a call, for a client capability the call did not declare
    /// (-32021, `data: {requiredCapabilities}`).
    pub fn missing_capability(capability: &str) -> Rejection {
        Rejection {
            data: Some(Box::new(json!({
                "requiredCapabilities": capability_object(capability),
            }))),
            ..Rejection::new(
                StatusCode::BAD_REQUEST,
                MISSING_CAPABILITY,
                format!(
                    "this request needs the client capability {capability}, which it did not \
                     declare"
                ),
            )
        }
    }

    /// A call whose server asks for input while its principal already has as many calls
    /// waiting for input as it may (`limit`): 429.
    pub fn too_many_held(limit: usize) -> Rejection {
        Rejection::new(
            StatusCode::TOO_MANY_REQUESTS,
            INTERNAL_ERROR,
            format!(
                "this principal already has {limit} calls waiting for its input; answer or \
                 abandon them first"
            ),
        )
    }

    /// GET and DELETE are not part of 2026-07-28: 405.
    pub fn modern_method_not_allowed() -> Rejection {
        Rejection {
            allow: Some("POST"),
            ..Rejection::new(
                StatusCode::METHOD_NOT_ALLOWED,
                INVALID_REQUEST,
                "Method Not Allowed: protocol version 2026-07-28 takes POST only",
            )
        }
    }
}
