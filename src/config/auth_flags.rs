//! The command-line options of `[auth]` and of `[upstream]`'s `auth_*` keys: each key has one
//! (`auth.issuer` is `--auth-issuer`, `upstream.auth_scope` is `--upstream-auth-scope`), a
//! secret by where it is (`--auth-client-secret-env NAME`, `…-file PATH`), never by value.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::auth::{AuthConfig, SecretSource, UpstreamAuth};
use super::duration::parse_duration;
use super::file::UpstreamConfig;

#[derive(Debug, Clone, Default, Args)]
pub struct AuthFlags {
    /// Accept only bearer tokens from this OAuth issuer on every served path: the proxy is then
    /// an OAuth 2.1 resource server, and a token's issuer and subject name its principal
    /// (auth.issuer) [default: none, no authorization].
    #[arg(long = "auth-issuer", value_name = "URL")]
    pub issuer: Option<String>,

    /// What a token's audience must name (auth.audience) [default: the resource URL the
    /// client dialled, e.g. https://host/mcp].
    #[arg(long = "auth-audience", value_name = "URI")]
    pub audience: Option<String>,

    /// The URL clients dial, behind a balancer (auth.public_url) [default: http:// and the
    /// request's Host].
    #[arg(long = "auth-public-url", value_name = "URL")]
    pub public_url: Option<String>,

    /// The issuer's JWK Set (auth.jwks_uri) [default: from the issuer's metadata].
    #[arg(long = "auth-jwks-uri", value_name = "URL")]
    pub jwks_uri: Option<String>,

    /// A scope every token must grant; repeatable (auth.required_scopes) [default: none].
    #[arg(long = "auth-required-scope", value_name = "SCOPE")]
    pub required_scopes: Vec<String>,

    /// RFC 7662 introspection of tokens that are not JWTs (auth.introspection_endpoint)
    /// [default: none, only JWTs].
    #[arg(long = "auth-introspection-endpoint", value_name = "URL")]
    pub introspection_endpoint: Option<String>,

    /// The proxy's own client at the issuer, for introspection and token exchange
    /// (auth.client_id).
    #[arg(long = "auth-client-id", value_name = "ID")]
    pub client_id: Option<String>,

    /// The environment variable holding that client's secret (auth.client_secret = { env }).
    #[arg(long = "auth-client-secret-env", value_name = "NAME")]
    pub client_secret_env: Option<String>,

    /// The file holding that client's secret (auth.client_secret = { file }).
    #[arg(long = "auth-client-secret-file", value_name = "PATH")]
    pub client_secret_file: Option<PathBuf>,

    /// Tolerance on a token's exp, nbf and iat (auth.clock_skew) [default: 60s].
    #[arg(long = "auth-clock-skew", value_name = "DURATION", value_parser = parse_duration)]
    pub clock_skew: Option<Duration>,

    /// A signature algorithm accepted; repeatable (auth.algorithms) [default: RS256, ES256,
    /// EdDSA; never none or HS*].
    #[arg(long = "auth-algorithm", value_name = "ALG")]
    pub algorithms: Vec<String>,

    /// Least time between two fetches of the issuer's keys: a token naming a key not yet known
    /// fetches them at once, or at the end of this floor when a fetch began within it
    /// (auth.jwks_refetch_floor, formerly jwks_refetch_interval) [default: 1s, at most 10s].
    #[arg(long = "auth-jwks-refetch-floor", alias = "auth-jwks-refetch-interval", value_name = "DURATION", value_parser = parse_duration)]
    pub jwks_refetch_floor: Option<Duration>,

    /// Keys older than this are fetched again at their next use (auth.jwks_max_age)
    /// [default: 1h].
    #[arg(long = "auth-jwks-max-age", value_name = "DURATION", value_parser = parse_duration)]
    pub jwks_max_age: Option<Duration>,

    /// How long past their maximum age the keys stay in use while the issuer cannot be reached
    /// (auth.jwks_stale_grace) [default: 6h].
    #[arg(long = "auth-jwks-stale-grace", value_name = "DURATION", value_parser = parse_duration)]
    pub jwks_stale_grace: Option<Duration>,

    /// Introspection requests the issuer gets per second at most, on average, with a second's
    /// worth at once; a new opaque token over it gets 503 (auth.introspections_per_second)
    /// [default: 100].
    #[arg(long = "auth-introspections-per-second", value_name = "RATE")]
    pub introspections_per_second: Option<f64>,

    /// What the HTTP server gets to authenticate the proxy's requests: none, static,
    /// passthrough, exchange (upstream.auth) [default: none].
    #[arg(long = "upstream-auth", value_name = "MODE")]
    pub upstream_auth: Option<UpstreamAuth>,

    /// static: the header sent (upstream.auth_header) [default: Authorization, as Bearer].
    #[arg(long = "upstream-auth-header", value_name = "NAME")]
    pub upstream_auth_header: Option<String>,

    /// static: the environment variable holding the header's secret (upstream.auth_secret =
    /// { env }).
    #[arg(long = "upstream-auth-secret-env", value_name = "NAME")]
    pub upstream_auth_secret_env: Option<String>,

    /// static: the file holding it (upstream.auth_secret = { file }).
    #[arg(long = "upstream-auth-secret-file", value_name = "PATH")]
    pub upstream_auth_secret_file: Option<PathBuf>,

    /// passthrough, exchange: the server's resource URL (upstream.auth_resource) [default:
    /// its URL].
    #[arg(long = "upstream-auth-resource", value_name = "URL")]
    pub upstream_auth_resource: Option<String>,

    /// exchange: an audience to ask for besides the resource (upstream.auth_audience).
    #[arg(long = "upstream-auth-audience", value_name = "URI")]
    pub upstream_auth_audience: Option<String>,

    /// exchange: the scopes to ask for (upstream.auth_scope) [default: the issuer's choice].
    #[arg(long = "upstream-auth-scope", value_name = "SCOPES")]
    pub upstream_auth_scope: Option<String>,

    /// exchange: the issuer's token endpoint (upstream.auth_token_endpoint) [default: from
    /// its metadata].
    #[arg(long = "upstream-auth-token-endpoint", value_name = "URL")]
    pub upstream_auth_token_endpoint: Option<String>,
}

/// A value given replaces the file's.
fn set<T: Clone>(target: &mut T, value: &Option<T>) {
    if let Some(value) = value {
        *target = value.clone();
    }
}

/// Where a secret is, from the `-env` or `-file` option given.
fn secret(env: &Option<String>, file: &Option<PathBuf>) -> Option<SecretSource> {
    match (env, file) {
        (Some(name), _) => Some(SecretSource::Env(name.clone())),
        (None, Some(path)) => Some(SecretSource::File(path.clone())),
        (None, None) => None,
    }
}

impl AuthFlags {
    pub fn apply(&self, auth: &mut AuthConfig, upstream: &mut UpstreamConfig) {
        set(&mut auth.issuer, &self.issuer);
        set(&mut auth.audience, &self.audience);
        set(&mut auth.public_url, &self.public_url);
        set(&mut auth.jwks_uri, &self.jwks_uri);
        set(
            &mut auth.introspection_endpoint,
            &self.introspection_endpoint,
        );
        set(&mut auth.client_id, &self.client_id);
        set(&mut auth.clock_skew, &self.clock_skew);
        set(&mut auth.jwks_refetch_floor, &self.jwks_refetch_floor);
        set(&mut auth.jwks_max_age, &self.jwks_max_age);
        set(&mut auth.jwks_stale_grace, &self.jwks_stale_grace);
        set(
            &mut auth.introspections_per_second,
            &self.introspections_per_second,
        );
        if !self.required_scopes.is_empty() {
            auth.required_scopes = self.required_scopes.clone();
        }
        if !self.algorithms.is_empty() {
            auth.algorithms = self.algorithms.clone();
        }
        if let Some(source) = secret(&self.client_secret_env, &self.client_secret_file) {
            auth.client_secret = Some(source);
        }
        set(&mut upstream.auth, &self.upstream_auth);
        set(&mut upstream.auth_header, &self.upstream_auth_header);
        set(&mut upstream.auth_resource, &self.upstream_auth_resource);
        set(&mut upstream.auth_audience, &self.upstream_auth_audience);
        set(&mut upstream.auth_scope, &self.upstream_auth_scope);
        set(
            &mut upstream.auth_token_endpoint,
            &self.upstream_auth_token_endpoint,
        );
        let upstream_secret = secret(
            &self.upstream_auth_secret_env,
            &self.upstream_auth_secret_file,
        );
        if let Some(source) = upstream_secret {
            upstream.auth_secret = Some(source);
        }
    }
}
