//! RFC 8693 token exchange: a client's token, verified for the proxy, traded at the issuer for
//! a token whose audience is one upstream server, so that a token issued for the proxy never
//! reaches a server (MCP authorization: no token passthrough). An exchanged token is kept per
//! client token (by digest) and server until shortly before it expires, so the same token's
//! next requests reuse it, and any other token (a narrower, refreshed or revoked one of the
//! same user) is exchanged for itself: what a server gets never grants more than the token the
//! request carried. The first requests with one token, however many at once, make one exchange
//! (single flight); a replica taking a session over exchanges again.

use std::time::Duration;

use dashmap::DashMap;
use http::HeaderValue;
use serde::Deserialize;

use super::digest::TokenDigest;
use super::fetch::ClientCredentials;
use super::flight::{Flights, InFlight};
use super::{unix_now, Authority, Verified};

/// Exchanged tokens kept at most (the bound on what clients can make the proxy hold).
pub const MAX_EXCHANGED: usize = 10_000;
/// An exchanged token is renewed this long before it expires.
const RENEW_BEFORE: f64 = 30.0;
/// Longest a request waits for the exchange of its token that another request began (that one
/// takes at most the issuer's discovery and the exchange, 5 s each).
const FOLLOW_WAIT: Duration = Duration::from_secs(10);

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

impl ExchangeTarget {
    /// What tells two targets apart, for the digest an exchanged token is kept by.
    fn parts(&self) -> [&str; 4] {
        [
            &self.resource,
            self.audience.as_deref().unwrap_or_default(),
            self.scope.as_deref().unwrap_or_default(),
            self.token_endpoint.as_deref().unwrap_or_default(),
        ]
    }
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

/// Exchanged tokens by the digest of the client's token and the server, and the exchanges in
/// flight. Bounded: past the bound, expired entries are dropped, and if none is, a new
/// exchanged token is used once instead of kept.
pub struct Exchanges {
    kept: DashMap<TokenDigest, Exchanged>,
    flights: Flights<TokenDigest, Result<HeaderValue, ExchangeError>>,
    capacity: usize,
}

impl Default for Exchanges {
    fn default() -> Self {
        Exchanges {
            kept: DashMap::new(),
            flights: Flights::default(),
            capacity: MAX_EXCHANGED,
        }
    }
}

impl Exchanges {
    /// The token kept for `key`, unless it is due for renewal by `now`.
    fn get(&self, key: &TokenDigest, now: f64) -> Option<HeaderValue> {
        let found = self.kept.get(key)?.clone();
        if found.until > now {
            return Some(found.authorization);
        }
        self.kept.remove(key);
        None
    }

    /// Keeps `exchanged` for `key`, if there is room (made by dropping expired ones).
    fn keep(&self, key: TokenDigest, exchanged: Exchanged, now: f64) {
        if self.kept.len() >= self.capacity {
            self.kept.retain(|_, kept| kept.until > now);
            if self.kept.len() >= self.capacity {
                return;
            }
        }
        self.kept.insert(key, exchanged);
    }

    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
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
        let key = self.digests.of_exchange(token, &target.parts());
        if let Some(kept) = self.exchanges.get(&key, unix_now()) {
            self.metrics.token_exchanges_reused.inc();
            return Ok(kept);
        }
        let flight = self
            .exchanges
            .flights
            .run(key, FOLLOW_WAIT, || {
                self.exchanged(key, verified, token, target)
            })
            .await;
        match flight {
            Ok((outcome, InFlight::Led)) => outcome,
            Ok((outcome, InFlight::Followed)) => {
                self.metrics.token_exchanges_coalesced.inc();
                outcome
            }
            Err(overdue) => Err(ExchangeError::Unavailable(format!(
                "another request's exchange of the same token: {overdue}"
            ))),
        }
    }

    /// A token for `target`, exchanged at the issuer and kept under `key`.
    async fn exchanged(
        &self,
        key: TokenDigest,
        verified: &Verified,
        token: &str,
        target: &ExchangeTarget,
    ) -> Result<HeaderValue, ExchangeError> {
        // A flight that landed between the look-up and this one kept its token.
        if let Some(kept) = self.exchanges.get(&key, unix_now()) {
            self.metrics.token_exchanges_reused.inc();
            return Ok(kept);
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
        let now = unix_now();
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
        let kept = Exchanged {
            authorization: authorization.clone(),
            // Never past the client's own token: it is not accepted after that anyway.
            until: until.min(verified.valid_until),
        };
        self.exchanges.keep(key, kept, now);
        self.metrics
            .tokens_exchanged_kept
            .set(self.exchanges.len() as i64);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::digest::Digests;

    fn exchanged(until: f64) -> Exchanged {
        Exchanged {
            authorization: HeaderValue::from_static("Bearer exchanged"),
            until,
        }
    }

    #[test]
    fn each_client_token_has_its_own_and_the_bound_holds() {
        let digests = Digests::default();
        let target = |resource: &str| ExchangeTarget {
            resource: resource.into(),
            audience: None,
            scope: None,
            token_endpoint: None,
        };
        let server = target("https://s/mcp");
        let [broad, narrow] = ["broad", "narrow"].map(|t| digests.of_exchange(t, &server.parts()));
        let elsewhere = digests.of_exchange("broad", &target("https://t/mcp").parts());
        let exchanges = Exchanges {
            capacity: 2,
            ..Exchanges::default()
        };
        exchanges.keep(broad, exchanged(10.0), 0.0);
        assert!(exchanges.get(&broad, 5.0).is_some());
        assert!(exchanges.get(&narrow, 5.0).is_none(), "another token's");
        assert!(exchanges.get(&elsewhere, 5.0).is_none(), "another server's");
        exchanges.keep(narrow, exchanged(20.0), 0.0);
        exchanges.keep(elsewhere, exchanged(30.0), 5.0);
        assert_eq!(exchanges.len(), 2, "no room");
        exchanges.keep(elsewhere, exchanged(30.0), 15.0);
        assert!(
            exchanges.get(&elsewhere, 15.0).is_some(),
            "an expired one made room"
        );
        assert!(exchanges.get(&narrow, 25.0).is_none(), "due for renewal");
    }
}
