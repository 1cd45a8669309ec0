//! The proxy as an OAuth 2.1 resource server (MCP authorization, 2025-06-18 onward): who a
//! bearer token names, after its signature (`jwt`, `jwk`, the issuer's keys in `keys`, found
//! by `discovery`) or the issuer's introspection (RFC 7662) says it is genuine, and its
//! claims that it is current. Verified tokens are kept until they expire (`tokens`), by digest
//! (`digest`); what the issuer is asked is asked once however many requests wait for it
//! (`flight`); tokens it called inactive are remembered a while (`inactive`), and new opaque
//! tokens cost it at most a rate of introspections (`budget`). What the wire sees of it (401,
//! 403, 503, the RFC 9728 metadata) is the front's.

pub mod budget;
pub mod digest;
pub mod discovery;
pub mod exchange;
pub mod fetch;
pub mod flight;
pub mod inactive;
pub mod jwk;
pub mod jwt;
pub mod keys;
pub mod members;
pub mod tokens;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use tokio::sync::OnceCell;

use crate::base::ids::Principal;
use crate::telemetry::metrics::AuthMetrics;
use budget::Budget;
use digest::{Digests, TokenDigest};
use discovery::{DiscoveryError, Endpoints};
use fetch::{ClientCredentials, FetchError, Fetcher};
use flight::{Flights, InFlight};
use inactive::InactiveTokens;
use jwk::Algorithm;
use jwt::Claims;
use keys::{KeyCache, KeyMiss, KeyPolicy, KeySetError};
use tokens::TokenCache;

/// How long an introspected token is believed without asking again, at most: an opaque token
/// is often chosen so that it can be revoked.
const INTROSPECTION_KEPT: f64 = 60.0;
/// Longest a request waits for the introspection of its token that another request began (that
/// one takes at most the fetcher's 5 s).
const INTROSPECTION_WAIT: Duration = Duration::from_secs(10);

/// The resource server's settings (`[auth]`).
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// The authorization server whose tokens are accepted (`iss`).
    pub issuer: String,
    /// What a token's `aud` must name; `None`: the resource URL the client dialled.
    pub audience: Option<String>,
    /// The URL clients reach the proxy at (scheme, host, port and any path prefix); `None`:
    /// `http://` and the request's `Host`.
    pub public_url: Option<String>,
    /// The issuer's JWK Set; `None`: from its metadata.
    pub jwks_uri: Option<String>,
    /// Scopes every token must grant.
    pub required_scopes: Vec<String>,
    /// RFC 7662 introspection of tokens that are not JWTs; `None`: they are refused.
    pub introspection_endpoint: Option<String>,
    /// The proxy's own client at the issuer (introspection, token exchange).
    pub client: Option<ClientCredentials>,
    /// Tolerance on `exp`, `nbf` and `iat`.
    pub clock_skew: Duration,
    pub algorithms: Vec<Algorithm>,
    /// Least time between two fetches of the keys: a token naming an unknown key within it
    /// waits for its end.
    pub jwks_refetch_floor: Duration,
    /// Keys older than this are fetched again at their next use.
    pub jwks_max_age: Duration,
    /// How long past `jwks_max_age` the keys stay in use while the issuer cannot be reached.
    pub jwks_stale_grace: Duration,
    /// Introspection requests the issuer gets per second at most, on average (a second's worth
    /// at once); a new opaque token over it is answered 503.
    pub introspections_per_second: f64,
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings {
            issuer: String::new(),
            audience: None,
            public_url: None,
            jwks_uri: None,
            required_scopes: Vec::new(),
            introspection_endpoint: None,
            client: None,
            clock_skew: Duration::from_secs(60),
            algorithms: vec![Algorithm::Rs256, Algorithm::Es256, Algorithm::EdDsa],
            jwks_refetch_floor: Duration::from_secs(1),
            jwks_max_age: Duration::from_secs(3600),
            jwks_stale_grace: Duration::from_secs(6 * 3600),
            introspections_per_second: 100.0,
        }
    }
}

/// A token found genuine and current: who it names and what it grants.
#[derive(Debug, Clone, Default)]
pub struct Verified {
    /// (issuer, subject), as sessions are bound to it.
    pub principal: Principal,
    pub audiences: Vec<String>,
    pub scopes: Vec<String>,
    /// Until when (seconds since the epoch) it is accepted: `exp` and the clock skew.
    pub valid_until: f64,
    /// Until when (seconds since the epoch) it is taken without verifying it again.
    pub kept_until: f64,
}

impl Verified {
    /// Whether the token was issued for any of `resources`.
    pub fn names_any(&self, resources: &[String]) -> bool {
        self.audiences
            .iter()
            .any(|aud| resources.iter().any(|r| same_resource(aud, r)))
    }

    /// The required scopes the token does not grant.
    pub fn lacks<'s>(&self, required: &'s [String]) -> Vec<&'s str> {
        required
            .iter()
            .filter(|scope| !self.scopes.contains(scope))
            .map(String::as_str)
            .collect()
    }

    /// How long until the token is no longer accepted (zero if it is not).
    pub fn remaining(&self) -> Duration {
        Duration::try_from_secs_f64(self.valid_until - unix_now()).unwrap_or_default()
    }
}

/// Resource URLs compare equal when they differ only by a trailing slash.
fn same_resource(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// Why a token is refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenError {
    #[error("the token is not a well-formed JWT")]
    Malformed,
    #[error("the token's algorithm {0:?} is not accepted")]
    Algorithm(String),
    #[error("the token is signed with a key the issuer does not publish")]
    UnknownKey,
    #[error("the token's signature does not verify")]
    Signature,
    #[error("the token was issued by another issuer")]
    Issuer,
    #[error("the token names no subject")]
    NoSubject,
    #[error("the token has no expiry")]
    NoExpiry,
    #[error("the token expired")]
    Expired,
    #[error("the token is not valid yet")]
    NotYetValid,
    #[error("the token is issued in the future")]
    IssuedInFuture,
    #[error("the token is not active")]
    Inactive,
    #[error("the token was not issued for this resource")]
    Audience,
    /// Passthrough: the token does not name the server it would be passed on to.
    #[error("the token's audience does not name the server {0}, and a token issued for the proxy is never passed on")]
    NotForServer(String),
    /// The authorization server could not say: the request may be retried.
    #[error("the authorization server could not be reached to check the token: {0}")]
    Unavailable(String),
    /// More new opaque tokens than `auth.introspections_per_second` allows: the request may be
    /// retried.
    #[error("too many new tokens to check with the authorization server at the moment (auth.introspections_per_second); retry shortly")]
    Throttled,
}

impl TokenError {
    /// The reason a metric counts it under.
    pub fn reason(&self) -> &'static str {
        match self {
            TokenError::Expired | TokenError::NotYetValid | TokenError::IssuedInFuture => "expired",
            TokenError::Audience | TokenError::NotForServer(_) => "audience",
            TokenError::Unavailable(_) => "unavailable",
            TokenError::Throttled => "throttled",
            _ => "invalid",
        }
    }
}

/// Verifies tokens for one proxy: the issuer's endpoints and keys, and the tokens verified.
pub struct Authority {
    pub settings: AuthSettings,
    fetcher: Fetcher,
    endpoints: OnceCell<Endpoints>,
    keys: KeyCache,
    tokens: TokenCache,
    exchanges: exchange::Exchanges,
    /// Opaque tokens the issuer called inactive, remembered a while.
    inactive: InactiveTokens,
    /// Introspections in flight, one per token.
    introspections: Flights<TokenDigest, Result<Claims, TokenError>>,
    /// What the issuer's introspection endpoint gets at most.
    introspection_budget: Budget,
    /// What tokens are kept by in the maps above.
    digests: Digests,
    metrics: AuthMetrics,
}

impl Authority {
    pub fn new(settings: AuthSettings, metrics: AuthMetrics) -> Authority {
        Authority {
            keys: KeyCache::new(KeyPolicy {
                refetch_floor: settings.jwks_refetch_floor,
                max_age: settings.jwks_max_age,
                stale_grace: settings.jwks_stale_grace,
            }),
            introspection_budget: Budget::per_second(settings.introspections_per_second),
            settings,
            fetcher: Fetcher::default(),
            endpoints: OnceCell::new(),
            tokens: TokenCache::default(),
            exchanges: exchange::Exchanges::default(),
            inactive: InactiveTokens::default(),
            introspections: Flights::default(),
            digests: Digests::default(),
            metrics,
        }
    }

    /// Who `token` names, if it is genuine and current.
    pub async fn verify(&self, token: &str) -> Result<Arc<Verified>, TokenError> {
        let now = unix_now();
        let digest = self.digests.of_token(token);
        if let Some(verified) = self.tokens.get(&digest, now) {
            return Ok(verified);
        }
        let verified = Arc::new(if jwt::looks_like_jwt(token) {
            let claims = self.signed_claims(token).await?;
            self.checked(claims, now, false)?
        } else {
            let claims = self.introspected(token, digest, now).await?;
            self.checked(claims, now, true)?
        });
        self.tokens.keep(digest, verified.clone(), now);
        self.metrics.tokens_cached.set(self.tokens.len() as i64);
        Ok(verified)
    }

    /// The issuer's metadata, fetched once.
    pub async fn endpoints(&self) -> Result<&Endpoints, DiscoveryError> {
        self.endpoints
            .get_or_try_init(|| discovery::discover(&self.fetcher, &self.settings.issuer))
            .await
    }

    /// The claims of a JWT whose signature one of the issuer's keys verifies.
    async fn signed_claims(&self, token: &str) -> Result<Claims, TokenError> {
        let jws = jwt::parse(token, &self.settings.algorithms)?;
        let fetch = || async {
            self.metrics.key_fetches.inc();
            let fetched = self.key_set().await;
            if fetched.is_err() {
                self.metrics.key_fetch_failures.inc();
            }
            fetched
        };
        let verdict = self
            .keys
            .verify(
                jws.alg,
                jws.kid.as_deref(),
                jws.signed,
                &jws.signature,
                fetch,
            )
            .await;
        match verdict {
            Ok(verdict) if verdict.genuine => {
                if verdict.stale {
                    self.metrics.keys_stale_served.inc();
                }
                Ok(jws.claims)
            }
            Ok(_) => Err(TokenError::Signature),
            Err(KeyMiss::Unknown) => Err(TokenError::UnknownKey),
            Err(KeyMiss::Unavailable(why)) => Err(TokenError::Unavailable(why.to_string())),
        }
    }

    /// The issuer's JWK Set document, from `jwks_uri` or the one its metadata names.
    async fn key_set(&self) -> Result<Vec<u8>, KeySetError> {
        let url = match &self.settings.jwks_uri {
            Some(url) => url.clone(),
            None => self
                .endpoints()
                .await
                .map_err(|e| KeySetError::Metadata(e.to_string()))?
                .jwks_uri
                .clone()
                .ok_or(KeySetError::NoJwksUri)?,
        };
        let set: serde_json::Value = self
            .fetcher
            .get_json(&url)
            .await
            .map_err(|e: FetchError| KeySetError::Fetch(e.to_string()))?;
        Ok(set.to_string().into_bytes())
    }

    /// The claims the issuer's introspection endpoint gives an opaque token (RFC 7662): asked
    /// once for all the requests with the token at the moment, not at all for a token it
    /// called inactive a moment ago, and not over the budget.
    async fn introspected(
        &self,
        token: &str,
        digest: TokenDigest,
        now: f64,
    ) -> Result<Claims, TokenError> {
        if self.settings.introspection_endpoint.is_none() || self.settings.client.is_none() {
            return Err(TokenError::Malformed);
        }
        if self.inactive.contains(&digest, now) {
            self.metrics.introspections_spared.inc();
            return Err(TokenError::Inactive);
        }
        let flight = self
            .introspections
            .run(digest, INTROSPECTION_WAIT, || {
                self.introspect(token, digest)
            })
            .await;
        match flight {
            Ok((claims, InFlight::Led)) => claims,
            Ok((claims, InFlight::Followed)) => {
                self.metrics.introspections_spared.inc();
                claims
            }
            Err(overdue) => Err(TokenError::Unavailable(format!(
                "another request's introspection of the same token: {overdue}"
            ))),
        }
    }

    /// Asks the introspection endpoint about `token`, budget allowing.
    async fn introspect(&self, token: &str, digest: TokenDigest) -> Result<Claims, TokenError> {
        let (Some(endpoint), Some(client)) =
            (&self.settings.introspection_endpoint, &self.settings.client)
        else {
            return Err(TokenError::Malformed);
        };
        #[derive(Deserialize)]
        struct Introspection {
            #[serde(default)]
            active: bool,
            #[serde(flatten)]
            claims: Claims,
        }
        if self
            .introspection_budget
            .take(tokio::time::Instant::now())
            .is_err()
        {
            return Err(TokenError::Throttled);
        }
        self.metrics.introspections.inc();
        let form = [("token", token), ("token_type_hint", "access_token")];
        let (status, answer) = self
            .fetcher
            .post_form(endpoint, &form, client)
            .await
            .map_err(|e| TokenError::Unavailable(e.to_string()))?;
        if !status.is_success() {
            return Err(TokenError::Unavailable(format!(
                "the introspection endpoint answered {status}"
            )));
        }
        let answer = serde_json::from_value::<Introspection>(answer)
            .ok()
            .filter(|answer| answer.active);
        match answer {
            Some(answer) => Ok(answer.claims),
            None => {
                self.inactive.remember(digest, unix_now());
                self.metrics
                    .inactive_tokens_kept
                    .set(self.inactive.len() as i64);
                Err(TokenError::Inactive)
            }
        }
    }

    /// `claims` checked against the issuer and the clock.
    fn checked(
        &self,
        claims: Claims,
        now: f64,
        introspected: bool,
    ) -> Result<Verified, TokenError> {
        let skew = self.settings.clock_skew.as_secs_f64();
        let issuer = match (claims.iss.as_deref(), introspected) {
            (Some(iss), _) if same_resource(iss, &self.settings.issuer) => iss.to_owned(),
            // An introspection answer need not name the issuer that gave it.
            (None, true) => self.settings.issuer.clone(),
            _ => return Err(TokenError::Issuer),
        };
        let subject = claims.sub.clone().ok_or(TokenError::NoSubject)?;
        let expires_at = match (claims.exp, introspected) {
            (Some(exp), _) => exp,
            (None, true) => now + INTROSPECTION_KEPT,
            (None, false) => return Err(TokenError::NoExpiry),
        };
        if expires_at + skew <= now {
            return Err(TokenError::Expired);
        }
        if claims.nbf.is_some_and(|nbf| nbf - skew > now) {
            return Err(TokenError::NotYetValid);
        }
        if claims.iat.is_some_and(|iat| iat - skew > now) {
            return Err(TokenError::IssuedInFuture);
        }
        let kept_until = match introspected {
            true => (expires_at + skew).min(now + INTROSPECTION_KEPT),
            false => expires_at + skew,
        };
        Ok(Verified {
            principal: Principal::from_subject(&issuer, &subject),
            scopes: claims.scopes(),
            audiences: claims.aud.into_vec(),
            valid_until: expires_at + skew,
            kept_until,
        })
    }
}

/// Seconds since the epoch, now.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}
