//! The one place where a refused request, or a session's failure (`SessionError`, its upstream's
//! `UpstreamError` among them), becomes an HTTP status and a JSON-RPC error body (DESIGN "Bad
//! input gets a clear answer"). Codes: the JSON-RPC standard ones; -32001 "session
//! not found" from the legacy server range, as the official SDKs use it, for a session named by
//! `Mcp-Session-Id`; -32043 (seed `002`) with `data: {sessionId}` for a protocol-level one.
//! The 2026-07-28 front's refusals are in `modern`, those about sessions named in messages in
//! `data_layer`.

mod authorization;
mod data_layer;
mod modern;

use http::{header, HeaderValue, Response, StatusCode};
use serde_json::Value;

use super::guard::{NotAdmitted, Refused};
use crate::session::rate::Exceeded;
use crate::session::SessionError;
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::{
    self, ParseError, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, RATE_LIMITED,
    SESSION_NOT_FOUND, TRANSPORT_SESSION_NOT_FOUND,
};

#[derive(Debug)]
pub struct Rejection {
    pub status: StatusCode,
    pub code: i64,
    pub message: String,
    pub id: Value,
    pub data: Option<Box<Value>>,
    /// Seconds, for `Retry-After`.
    pub retry_after: Option<u32>,
    pub allow: Option<&'static str>,
    /// The bearer challenge of a 401 or 403 (RFC 6750 §3).
    pub challenge: Option<Box<str>>,
}

impl Rejection {
    pub fn new(status: StatusCode, code: i64, message: impl Into<String>) -> Rejection {
        Rejection {
            status,
            code,
            message: message.into(),
            id: Value::Null,
            data: None,
            retry_after: None,
            allow: None,
            challenge: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Rejection {
        Rejection::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, message)
    }

    pub fn session_not_found() -> Rejection {
        Rejection::new(
            StatusCode::NOT_FOUND,
            TRANSPORT_SESSION_NOT_FOUND,
            "Session not found: it is unknown, expired or ended; start a new one with initialize",
        )
    }

    /// A protocol-level session (`session/*`, `Mcp-Protocol-Session-Id`) that is unknown,
    /// expired, ended or another principal's.
    pub fn protocol_session_not_found(session_id: &str) -> Rejection {
        Rejection {
            data: Some(Box::new(serde_json::json!({ "sessionId": session_id }))),
            ..Rejection::new(
                StatusCode::NOT_FOUND,
                SESSION_NOT_FOUND,
                "Session not found: it is unknown, expired or ended; start a new one with session/start",
            )
        }
    }

    /// Two ways of naming or resuming a session mixed in one request or connection (seed `000`,
    /// "Mode Selection and Conflict Handling").
    pub fn conflict(message: impl Into<String>) -> Rejection {
        Rejection::new(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            format!("Invalid Request: {}", message.into()),
        )
    }

    pub fn invalid_params(message: impl Into<String>) -> Rejection {
        Rejection::new(
            StatusCode::BAD_REQUEST,
            INVALID_PARAMS,
            format!("Invalid params: {}", message.into()),
        )
    }

    /// An upstream that failed, or refused what the proxy asked of it: 502.
    pub fn bad_gateway(message: impl Into<String>) -> Rejection {
        Rejection::new(StatusCode::BAD_GATEWAY, INTERNAL_ERROR, message)
    }

    /// A WebSocket upgrade in a version the proxy does not speak: 426.
    pub fn upgrade_required(message: impl Into<String>) -> Rejection {
        Rejection::new(StatusCode::UPGRADE_REQUIRED, INVALID_REQUEST, message)
    }

    pub fn too_large(limit: usize) -> Rejection {
        Rejection::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            INVALID_REQUEST,
            format!("Payload Too Large: the body exceeds {limit} bytes"),
        )
    }

    pub fn body_timeout(timeout: std::time::Duration) -> Rejection {
        Rejection::new(
            StatusCode::REQUEST_TIMEOUT,
            INVALID_REQUEST,
            format!("Request Timeout: the body did not arrive within {timeout:?}"),
        )
    }

    pub fn unsupported_media_type() -> Rejection {
        Rejection::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            INVALID_REQUEST,
            "Unsupported Media Type: Content-Type must be application/json",
        )
    }

    pub fn not_acceptable(required: &str) -> Rejection {
        Rejection::new(
            StatusCode::NOT_ACCEPTABLE,
            INVALID_REQUEST,
            format!("Not Acceptable: Accept must include {required}"),
        )
    }

    pub fn method_not_allowed() -> Rejection {
        Rejection {
            allow: Some("GET, POST, DELETE"),
            ..Rejection::new(
                StatusCode::METHOD_NOT_ALLOWED,
                INVALID_REQUEST,
                "Method Not Allowed: use POST, GET or DELETE",
            )
        }
    }

    /// A session-layer failure: too many sessions, or a session that may exist but cannot be
    /// served right now (its store or its owning replica cannot say) → 503 with `Retry-After`;
    /// a session gone everywhere → 404; an upstream that could not be reached → 502.
    pub fn session(error: &SessionError) -> Rejection {
        match error {
            SessionError::TooManySessions(_)
            | SessionError::TooManyForPrincipal(_)
            | SessionError::TooManyAnonymous(_)
            | SessionError::TooManyInFlight(_)
            | SessionError::StoreUnavailable
            | SessionError::StoreBehind(_)
            | SessionError::ShuttingDown => {
                Rejection::unavailable(format!("Service Unavailable: {error}"))
            }
            error if error.owner_unavailable() => {
                Rejection::unavailable(format!("Service Unavailable: {error}; retry shortly"))
            }
            SessionError::Gone => Rejection::session_not_found(),
            SessionError::AnonymousPoolBusy { size, waited } => {
                Rejection::anonymous_pool_busy(*size, *waited)
            }
            SessionError::TooManyNamed(limit) => Rejection::too_many_data_sessions(*limit),
            SessionError::NamedNotFound(id) => Rejection::data_session_not_found(id),
            SessionError::RateLimited(exceeded) => Rejection::rate_limited(error, exceeded),
            SessionError::SubscriptionRefused(refused) => {
                Rejection::new(StatusCode::BAD_REQUEST, INVALID_PARAMS, refused.to_string())
            }
            _ => Rejection::bad_gateway(error.to_string()),
        }
    }

    /// The principal is over a rate limit: 429, with `Retry-After` (whole seconds, rounded up)
    /// and the wait in milliseconds in the error's data.
    fn rate_limited(error: &SessionError, exceeded: &Exceeded) -> Rejection {
        let wait = exceeded.retry_after();
        let retry_after_ms = wait.as_millis().max(1) as u64;
        Rejection {
            retry_after: Some(
                u32::try_from(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
                    .unwrap_or(u32::MAX),
            ),
            data: Some(Box::new(
                serde_json::json!({ "retryAfterMs": retry_after_ms }),
            )),
            ..Rejection::new(
                StatusCode::TOO_MANY_REQUESTS,
                RATE_LIMITED,
                error.to_string(),
            )
        }
    }

    /// Something the proxy cannot serve right now but may shortly: 503 with `Retry-After`.
    fn unavailable(message: String) -> Rejection {
        Rejection {
            retry_after: Some(1),
            ..Rejection::new(StatusCode::SERVICE_UNAVAILABLE, INTERNAL_ERROR, message)
        }
    }

    /// A connection over `http.max_connections`: 503 with `Retry-After`, then closed.
    pub fn too_many_connections(limit: usize) -> Rejection {
        Rejection::unavailable(format!(
            "Service Unavailable: the limit of {limit} open connections is reached \
             (http.max_connections); retry shortly"
        ))
    }

    /// No session of the anonymous pool was ready for a request (all lent, or still being
    /// prepared) for as long as it waits for one: 503 with `Retry-After`.
    pub fn anonymous_pool_busy(size: usize, waited: std::time::Duration) -> Rejection {
        Rejection::unavailable(format!(
            "Service Unavailable: none of the {size} server sessions for requests without \
             credentials (session.anonymous_pool) was ready within {waited:?}; retry shortly"
        ))
    }

    pub fn with_id(mut self, id: Option<&Value>) -> Rejection {
        self.id = id.cloned().unwrap_or(Value::Null);
        self
    }

    /// The JSON-RPC error message alone (for a WebSocket frame).
    pub fn error_body(&self) -> bytes::Bytes {
        jsonrpc::error_response(
            &self.id,
            self.code,
            &self.message,
            self.data.as_deref().cloned(),
        )
    }

    pub fn into_response(self) -> Response<Body> {
        let body = self.error_body();
        let mut response = Response::new(Body::full(body));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(allow) = self.allow {
            headers.insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        if let Some(challenge) = self
            .challenge
            .as_deref()
            .and_then(|c| HeaderValue::from_str(c).ok())
        {
            headers.insert(header::WWW_AUTHENTICATE, challenge);
        }
        response
    }
}

/// A request the session took but could not carry out (its server or its owner failed it):
/// not refused, but answered with JSON-RPC error -32603 in the session's words (or, over a rate
/// limit, with the refusal's code and when to retry).
pub fn failed_request(id: &Value, error: &SessionError) -> bytes::Bytes {
    match error {
        // Its code and data say when to retry, wherever the error travels.
        SessionError::RateLimited(_) => Rejection::session(error).with_id(Some(id)).error_body(),
        _ => jsonrpc::error_response(id, INTERNAL_ERROR, &error.to_string(), None),
    }
}

/// A missing or repeated `Host` is a malformed request (400, RFC 9112 §3.2), and so is a
/// repeated principal header; anything else about `Host`, `Origin` or who may name a principal
/// is not allowed (403).
impl From<Refused> for Rejection {
    fn from(refused: Refused) -> Rejection {
        let status = match refused {
            Refused::NoHost
            | Refused::Repeated("Host")
            | Refused::NotAscii("Host")
            | Refused::RepeatedPrincipal(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::FORBIDDEN,
        };
        let reason = status.canonical_reason().unwrap_or_default();
        Rejection::new(status, INVALID_REQUEST, format!("{reason}: {refused}"))
    }
}

/// The proxy's own fault: a handler reached without the front's caller.
impl From<NotAdmitted> for Rejection {
    fn from(not_admitted: NotAdmitted) -> Rejection {
        Rejection::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            INTERNAL_ERROR,
            not_admitted.to_string(),
        )
    }
}

impl From<ParseError> for Rejection {
    fn from(error: ParseError) -> Rejection {
        let message = match &error {
            ParseError::Json(_) => format!("Parse error: {error}"),
            ParseError::NotJsonRpc(_) | ParseError::Duplicate { .. } => {
                format!("Invalid Request: {error}")
            }
        };
        let rejection = Rejection::new(StatusCode::BAD_REQUEST, error.code(), message);
        match error {
            ParseError::Duplicate { member, id } => Rejection {
                data: Some(Box::new(serde_json::json!({ "duplicateMember": member }))),
                ..rejection.with_id(id.as_ref())
            },
            _ => rejection,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_the_front_did_not_admit_is_the_proxys_fault() {
        let refused = Rejection::from(NotAdmitted);
        assert_eq!(refused.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
}
