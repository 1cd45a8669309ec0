//! Refusals about sessions named in messages (the data layer). -32043 and -32044 are seed `002`'s codes, the one
//! use of the spec's reserved range the proxy makes (the seed defines them); both go with HTTP
//! 200: the transport did its part, and a legacy client must not read a 404 as its transport
//! session's end.

use http::StatusCode;
use serde_json::json;

use super::Rejection;
use crate::wire::jsonrpc::{INTERNAL_ERROR, SESSION_NOT_FOUND, SESSION_REQUIRED};

impl Rejection {
    /// A data-layer session that is unknown, expired, deleted or another principal's.
    pub fn data_session_not_found(session_id: &str) -> Rejection {
        Rejection {
            data: Some(Box::new(json!({ "sessionId": session_id }))),
            ..Rejection::new(
                StatusCode::OK,
                SESSION_NOT_FOUND,
                "Session not found: it is unknown, expired or deleted; create a new one with sessions/create",
            )
        }
    }

    /// A method served only within a data-layer session, sent without one.
    pub fn data_session_required(method: &str) -> Rejection {
        Rejection {
            data: Some(Box::new(json!({ "method": method }))),
            ..Rejection::new(
                StatusCode::OK,
                SESSION_REQUIRED,
                format!(
                    "Session required: {method} is served only within a session; call sessions/create \
                     and send its sessionId in _meta[\"io.modelcontextprotocol/session\"]"
                ),
            )
        }
    }

    /// A data-layer session's state over its bound.
    pub fn state_too_large(len: usize, max: usize) -> Rejection {
        Rejection::invalid_params(format!(
            "the session's state is {len} bytes, over the limit of {max}"
        ))
    }

    /// A method that creates a data-layer session, sent within one.
    pub fn cookie_on_create(method: &str) -> Rejection {
        Rejection::invalid_params(format!(
            "{method} must not carry _meta[\"io.modelcontextprotocol/session\"]"
        ))
    }

    /// A principal at its limit of data-layer sessions.
    pub fn too_many_data_sessions(limit: usize) -> Rejection {
        Rejection::new(
            StatusCode::TOO_MANY_REQUESTS,
            INTERNAL_ERROR,
            format!(
                "Too many sessions: this principal holds its limit of {limit}; delete one with \
                 sessions/delete or let one expire"
            ),
        )
    }
}
