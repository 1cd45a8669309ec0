//! Refusals of the resource server (MCP authorization; RFC 6750 §3): 401 without a valid
//! token, 403 for missing scopes, each with its `WWW-Authenticate` challenge naming the
//! resource's metadata (RFC 9728 §5.1); 503 when the issuer could not be asked.

use http::StatusCode;

use super::Rejection;
use crate::auth::exchange::ExchangeError;
use crate::auth::TokenError;
use crate::wire::jsonrpc::{INTERNAL_ERROR, INVALID_REQUEST};

impl Rejection {
    /// No bearer token: 401 and where to learn how to get one.
    pub fn unauthorized(metadata_url: &str, scopes: &[String]) -> Rejection {
        let mut challenge = format!("Bearer resource_metadata=\"{metadata_url}\"");
        if !scopes.is_empty() {
            challenge.push_str(&format!(", scope=\"{}\"", scopes.join(" ")));
        }
        Rejection {
            challenge: Some(challenge.into()),
            ..Rejection::new(
                StatusCode::UNAUTHORIZED,
                INVALID_REQUEST,
                "Unauthorized: this server needs a bearer token (see the resource metadata in WWW-Authenticate)",
            )
        }
    }

    /// A token that is not genuine, not current or not for this resource: 401
    /// `invalid_token`; 503 when the issuer could not be reached to tell, or not asked (over
    /// the introspection budget).
    pub fn invalid_token(metadata_url: &str, error: &TokenError) -> Rejection {
        if let TokenError::Unavailable(_) | TokenError::Throttled = error {
            return Rejection {
                retry_after: Some(1),
                ..Rejection::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    INTERNAL_ERROR,
                    format!("Service Unavailable: {error}"),
                )
            };
        }
        Rejection {
            challenge: Some(
                format!(
                    "Bearer error=\"invalid_token\", error_description=\"{error}\", \
                     resource_metadata=\"{metadata_url}\""
                )
                .into(),
            ),
            ..Rejection::new(
                StatusCode::UNAUTHORIZED,
                INVALID_REQUEST,
                format!("Unauthorized: {error}"),
            )
        }
    }

    /// No token could be had for the server from the issuer: 503 when it could not be asked,
    /// else 403 (the issuer refused the client's token for that server).
    pub fn exchange(error: &ExchangeError) -> Rejection {
        let status = match error {
            ExchangeError::Refused { .. } => StatusCode::FORBIDDEN,
            ExchangeError::Unavailable(_) | ExchangeError::NoClient => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        };
        let reason = status.canonical_reason().unwrap_or_default();
        Rejection {
            retry_after: (status == StatusCode::SERVICE_UNAVAILABLE).then_some(1),
            ..Rejection::new(status, INTERNAL_ERROR, format!("{reason}: {error}"))
        }
    }

    /// A genuine token without every required scope: 403 `insufficient_scope` naming them all,
    /// so the client can ask for them (step-up).
    pub fn insufficient_scope(metadata_url: &str, required: &[String]) -> Rejection {
        let scopes = required.join(" ");
        Rejection {
            challenge: Some(
                format!(
                    "Bearer error=\"insufficient_scope\", scope=\"{scopes}\", \
                     resource_metadata=\"{metadata_url}\", \
                     error_description=\"the token lacks a scope this server needs\""
                )
                .into(),
            ),
            ..Rejection::new(
                StatusCode::FORBIDDEN,
                INVALID_REQUEST,
                format!("Forbidden: the token must grant the scopes {scopes}"),
            )
        }
    }
}
