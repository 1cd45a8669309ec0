//! RFC 8693 token exchange: a client's token, verified for the proxy, traded at the issuer for
//! a token whose audience is one upstream server, so that a token issued for the proxy never
//! reaches a server (MCP authorization: no token passthrough). An exchanged token is kept per
//! principal and server until shortly before it expires: a client's refreshed token reuses it,
//! and a replica taking a session over exchanges again.

use dashmap::DashMap;
use http::HeaderValue;
use serde::Deserialize;

use super::fetch::ClientCredentials;
use super::{unix_now, Authority, Verified};
use crate::ids::Principal;

/// Exchanged tokens kept at most (the bound on what clients can make the proxy hold).
pub const MAX_EXCHANGED: usize = 10_000;
/// An exchanged token is renewed this long before it expires.
const RENEW_BEFORE: f64 = 30.0;

const GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

/// The server a token is exchanged for.
#[derive(Debug, Clone)]
pub struct ExchangeTarget {
    /// The server's resource URL (`resource`).
    pub resource: String,
    /// `audience`, when the issuer names servers otherwise than by URL.
    pub audience: Option<String>,
    pub scope: Option<String>,
    /// The issuer's token endpoint; `None`: from its metadata.
    pub token_endpoint: Option<String>,
}

/// Why no token could be had for the server.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExchangeError {
    #[error("the proxy has no client at the issuer (auth.client_id, auth.client_secret)")]
    NoClient,
    #[error("the issuer could not be reached to exchange the token: {0}")]
    Unavailable(String),
    #[error("the issuer would not exchange the token for {resource}: {error}")]
    Refused { resource: String, error: String },
}

#[derive(Clone)]
struct Exchanged {
    authorization: HeaderValue,
    until: f64,
}

/// Exchanged tokens by principal and server.
#[derive(Default)]
pub struct Exchanges {
    kept: DashMap<(Principal, String), Exchanged>,
}

#[derive(Deserialize)]
struct Answer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<f64>,
}

#[derive(Deserialize)]
struct Refusal {
    #[serde(default)]
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

impl Authority {
    /// The `Authorization` for `target` on behalf of the client whose verified `token` this is.
    pub async fn exchange(
        &self,
        verified: &Verified,
        token: &str,
        target: &ExchangeTarget,
    ) -> Result<HeaderValue, ExchangeError> {
        let key = (verified.principal.clone(), target.resource.clone());
        let now = unix_now();
        if let Some(kept) = self.exchanges.kept.get(&key).filter(|k| k.until > now) {
            return Ok(kept.authorization.clone());
        }
        let client = self
            .settings
            .client
            .as_ref()
            .ok_or(ExchangeError::NoClient)?;
        let endpoint = match &target.token_endpoint {
            Some(endpoint) => endpoint.clone(),
            None => self
                .endpoints()
                .await
                .map_err(|e| ExchangeError::Unavailable(e.to_string()))?
                .token_endpoint
                .clone()
                .ok_or_else(|| {
                    ExchangeError::Unavailable(
                        "the issuer's metadata names no token_endpoint".into(),
                    )
                })?,
        };
        let exchanged = self.ask(&endpoint, client, token, target).await?;
        self.metrics.token_exchanges.inc();
        let until = match exchanged.expires_in {
            Some(seconds) => now + seconds - RENEW_BEFORE,
            None => now + 60.0,
        };
        let mut authorization = HeaderValue::try_from(format!("Bearer {}", exchanged.access_token))
            .map_err(|_| ExchangeError::Refused {
                resource: target.resource.clone(),
                error: "the exchanged token is not a valid header value".into(),
            })?;
        authorization.set_sensitive(true);
        if self.exchanges.kept.len() >= MAX_EXCHANGED {
            self.exchanges.kept.retain(|_, kept| kept.until > now);
        }
        if self.exchanges.kept.len() < MAX_EXCHANGED {
            let kept = Exchanged {
                authorization: authorization.clone(),
                until,
            };
            self.exchanges.kept.insert(key, kept);
        }
        self.metrics
            .tokens_exchanged_kept
            .set(self.exchanges.kept.len() as i64);
        Ok(authorization)
    }

    async fn ask(
        &self,
        endpoint: &str,
        client: &ClientCredentials,
        token: &str,
        target: &ExchangeTarget,
    ) -> Result<Answer, ExchangeError> {
        let mut form = vec![
            ("grant_type", GRANT),
            ("subject_token", token),
            ("subject_token_type", ACCESS_TOKEN),
            ("requested_token_type", ACCESS_TOKEN),
            ("resource", target.resource.as_str()),
        ];
        if let Some(audience) = &target.audience {
            form.push(("audience", audience));
        }
        if let Some(scope) = &target.scope {
            form.push(("scope", scope));
        }
        let (status, answer) = self
            .fetcher
            .post_form(endpoint, &form, client)
            .await
            .map_err(|e| ExchangeError::Unavailable(e.to_string()))?;
        if status.is_server_error() {
            return Err(ExchangeError::Unavailable(format!(
                "{endpoint} answered {status}"
            )));
        }
        if !status.is_success() {
            let refusal: Refusal = serde_json::from_value(answer).unwrap_or(Refusal {
                error: status.to_string(),
                error_description: None,
            });
            let error = match refusal.error_description {
                Some(description) => format!("{} ({description})", refusal.error),
                None => refusal.error,
            };
            return Err(ExchangeError::Refused {
                resource: target.resource.clone(),
                error,
            });
        }
        serde_json::from_value(answer).map_err(|_| ExchangeError::Refused {
            resource: target.resource.clone(),
            error: "the answer holds no access_token".into(),
        })
    }
}
