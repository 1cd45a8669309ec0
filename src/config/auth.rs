//! `[auth]`: the proxy as an OAuth 2.1 resource server, off unless an issuer is named; and the
//! secrets the configuration names by where they are (an environment variable, a file), never
//! by value.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;

use http::{HeaderName, HeaderValue};

use super::file::{duration, Config, UpstreamConfig};
use crate::auth::exchange::ExchangeTarget;
use crate::auth::fetch::ClientCredentials;
use crate::auth::jwk::Algorithm;
use crate::auth::AuthSettings;
use crate::front::authorization::UpstreamCredentials;
use crate::upstream::credential::StaticHeader;

/// The longest `auth.jwks_refetch_floor`: a request may wait that long for a key.
const MAX_REFETCH_FLOOR: Duration = Duration::from_secs(10);

/// As the file spells it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// The authorization server whose tokens are accepted ("": no authorization).
    pub issuer: String,
    /// What a token's `aud` must name ("": the resource URL the client dialled).
    pub audience: String,
    /// The URL clients dial, e.g. `https://mcp.example.com` ("": `http://` and the `Host`).
    pub public_url: String,
    /// The issuer's JWK Set ("": from the issuer's metadata).
    pub jwks_uri: String,
    pub required_scopes: Vec<String>,
    /// RFC 7662 introspection of opaque tokens ("": only JWTs are accepted).
    pub introspection_endpoint: String,
    /// The proxy's own client at the issuer, for introspection and token exchange.
    pub client_id: String,
    pub client_secret: Option<SecretSource>,
    #[serde(deserialize_with = "duration")]
    pub clock_skew: Duration,
    pub algorithms: Vec<String>,
    /// Least time between two fetches of the issuer's keys (its former name is still read).
    #[serde(deserialize_with = "duration", alias = "jwks_refetch_interval")]
    pub jwks_refetch_floor: Duration,
    #[serde(deserialize_with = "duration")]
    pub jwks_max_age: Duration,
    /// How long past `jwks_max_age` the keys stay in use while the issuer cannot be reached.
    #[serde(deserialize_with = "duration")]
    pub jwks_stale_grace: Duration,
    /// Introspection requests per second at most (a second's worth at once).
    pub introspections_per_second: f64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        let settings = AuthSettings::default();
        AuthConfig {
            issuer: String::new(),
            audience: String::new(),
            public_url: String::new(),
            jwks_uri: String::new(),
            required_scopes: Vec::new(),
            introspection_endpoint: String::new(),
            client_id: String::new(),
            client_secret: None,
            clock_skew: settings.clock_skew,
            algorithms: settings
                .algorithms
                .iter()
                .map(|a| a.name().into())
                .collect(),
            jwks_refetch_floor: settings.jwks_refetch_floor,
            jwks_max_age: settings.jwks_max_age,
            jwks_stale_grace: settings.jwks_stale_grace,
            introspections_per_second: settings.introspections_per_second,
        }
    }
}

/// Where a secret is: `{ env = "NAME" }` or `{ file = "/path" }` (its first line).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum SecretSource {
    Env(String),
    File(PathBuf),
}

impl SecretSource {
    /// The secret's value; `key` names the setting in the error.
    pub fn read(&self, key: &str) -> anyhow::Result<String> {
        let value = match self {
            SecretSource::Env(name) => std::env::var(name)
                .with_context(|| format!("{key}: the environment variable {name} is not set"))?,
            SecretSource::File(path) => std::fs::read_to_string(path)
                .with_context(|| format!("{key}: cannot read {}", path.display()))?
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned(),
        };
        if value.trim().is_empty() {
            bail!("{key}: the secret is empty");
        }
        Ok(value.trim().to_owned())
    }
}

impl AuthConfig {
    pub fn is_on(&self) -> bool {
        !self.issuer.trim().is_empty()
    }

    /// The resource server's settings; `None` when it is off. Reads the client secret.
    pub fn settings(&self) -> anyhow::Result<Option<AuthSettings>> {
        if !self.is_on() {
            return Ok(None);
        }
        let algorithms = self
            .algorithms
            .iter()
            .map(|name| algorithm(name))
            .collect::<anyhow::Result<Vec<_>>>()?;
        if algorithms.is_empty() {
            bail!("auth.algorithms: name at least one (RS256, ES256, EdDSA, …)");
        }
        let client = match (self.client_id.as_str(), &self.client_secret) {
            ("", None) => None,
            ("", Some(_)) => bail!("auth.client_secret is set, but not auth.client_id"),
            (_, None) => bail!("auth.client_id is set, but not auth.client_secret"),
            (id, Some(secret)) => Some(ClientCredentials {
                id: id.to_owned(),
                secret: secret.read("auth.client_secret")?,
            }),
        };
        let optional = |text: &str| Some(text.trim().to_owned()).filter(|t| !t.is_empty());
        let introspection_endpoint = optional(&self.introspection_endpoint);
        if introspection_endpoint.is_some() && client.is_none() {
            bail!("auth.introspection_endpoint needs the proxy's client: auth.client_id and auth.client_secret");
        }
        Ok(Some(AuthSettings {
            issuer: self.issuer.trim().to_owned(),
            audience: optional(&self.audience),
            public_url: optional(&self.public_url),
            jwks_uri: optional(&self.jwks_uri),
            required_scopes: self.required_scopes.clone(),
            introspection_endpoint,
            client,
            clock_skew: self.clock_skew,
            algorithms,
            jwks_refetch_floor: self.jwks_refetch_floor,
            jwks_max_age: self.jwks_max_age,
            jwks_stale_grace: self.jwks_stale_grace,
            introspections_per_second: self.introspections_per_second,
        }))
    }

    /// Every URL well formed (the secret is read at start, not here).
    pub fn validate(&self) -> anyhow::Result<()> {
        if !self.is_on() {
            return Ok(());
        }
        for (key, value, required) in [
            ("auth.issuer", &self.issuer, true),
            ("auth.public_url", &self.public_url, false),
            ("auth.jwks_uri", &self.jwks_uri, false),
            (
                "auth.introspection_endpoint",
                &self.introspection_endpoint,
                false,
            ),
        ] {
            if required || !value.trim().is_empty() {
                check_url(key, value)?;
            }
        }
        for name in &self.algorithms {
            algorithm(name)?;
        }
        if self.jwks_refetch_floor > MAX_REFETCH_FLOOR {
            bail!(
                "auth.jwks_refetch_floor: {:?} is over {MAX_REFETCH_FLOOR:?} (a token naming a key \
                 published within it waits for its end)",
                self.jwks_refetch_floor
            );
        }
        if !(self.introspections_per_second.is_finite() && self.introspections_per_second > 0.0) {
            bail!(
                "auth.introspections_per_second: {} is not a rate above 0 (each new opaque token \
                 costs the issuer one request: this bounds them)",
                self.introspections_per_second
            );
        }
        if self
            .required_scopes
            .iter()
            .any(|s| s.is_empty() || s.contains(['"', ' ', '\\']))
        {
            bail!("auth.required_scopes: a scope is a non-empty word without spaces or quotes");
        }
        Ok(())
    }
}

fn algorithm(name: &str) -> anyhow::Result<Algorithm> {
    if name.eq_ignore_ascii_case("none") {
        bail!("auth.algorithms: \"none\" is never accepted: a token must be signed");
    }
    if name.to_ascii_uppercase().starts_with("HS") {
        bail!(
            "auth.algorithms: {name} is never accepted: an HMAC key would be the issuer's \
             published key, which anyone can read"
        );
    }
    Algorithm::named(name).with_context(|| {
        let known: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
        format!(
            "auth.algorithms: {name:?} is not one of {}",
            known.join(", ")
        )
    })
}

fn check_url(key: &str, value: &str) -> anyhow::Result<()> {
    let uri: http::Uri = value
        .trim()
        .parse()
        .map_err(|e| anyhow::anyhow!("{key}: {value:?} is not a URL: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        bail!("{key}: {value:?} must be an http:// or https:// URL with a host");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> AuthConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn off_without_an_issuer_and_checked_with_one() {
        assert!(AuthConfig::default().settings().unwrap().is_none());
        let on = parsed("issuer = \"http://127.0.0.1:9000\"\nclock_skew = \"5s\"\n");
        let settings = on.settings().unwrap().unwrap();
        assert_eq!(settings.clock_skew, Duration::from_secs(5));
        assert_eq!(settings.algorithms.len(), 3);
        assert!(parsed("issuer = \"ftp://x\"").validate().is_err());
        let former = parsed("issuer = \"http://a\"\njwks_refetch_interval = \"2s\"");
        assert_eq!(
            former.jwks_refetch_floor,
            Duration::from_secs(2),
            "the former name"
        );
        let long = parsed("issuer = \"http://a\"\njwks_refetch_floor = \"1m\"");
        let error = long.validate().unwrap_err().to_string();
        assert!(error.contains("auth.jwks_refetch_floor"), "{error}");
        let unbounded = parsed("issuer = \"http://a\"\nintrospections_per_second = 0");
        let error = unbounded.validate().unwrap_err().to_string();
        assert!(error.contains("auth.introspections_per_second"), "{error}");
    }

    #[test]
    fn none_and_hmac_are_refused_with_a_reason() {
        for (alg, says) in [("none", "must be signed"), ("HS256", "HMAC")] {
            let config = parsed(&format!("issuer = \"http://a\"\nalgorithms = [\"{alg}\"]"));
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains(says), "{error}");
        }
    }

    #[test]
    fn secrets_come_from_the_environment_or_a_file_never_inline() {
        let config = parsed(
            "issuer = \"http://a\"\nclient_id = \"proxy\"\n\
             client_secret = { env = \"MCP_PROXY_TEST_NO_SUCH_VARIABLE\" }",
        );
        let error = config.settings().unwrap_err().to_string();
        assert!(error.contains("MCP_PROXY_TEST_NO_SUCH_VARIABLE"), "{error}");
        assert!(toml::from_str::<AuthConfig>("client_secret = \"inline\"").is_err());
        let file = std::env::temp_dir().join(format!("mcp-proxy-secret-{}", std::process::id()));
        std::fs::write(&file, "s3cret\n").unwrap();
        let source = SecretSource::File(file.clone());
        assert_eq!(source.read("k").unwrap(), "s3cret");
        std::fs::remove_file(file).unwrap();
    }
}

/// What an HTTP server gets to authenticate the proxy's requests (`upstream.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamAuth {
    /// Nothing: the client's token never leaves the proxy.
    #[default]
    None,
    /// A header of the operator's (`auth_header`, its value from `auth_secret`).
    Static,
    /// The client's token, only when its audience names the server (else 401).
    Passthrough,
    /// A token for the server, exchanged at the issuer for the client's (RFC 8693).
    Exchange,
}

impl UpstreamConfig {
    /// `static`: the header every request to the server carries.
    pub(super) fn static_header(&self) -> anyhow::Result<Option<StaticHeader>> {
        let Some(secret) = self
            .auth_secret
            .as_ref()
            .filter(|_| self.auth == UpstreamAuth::Static)
        else {
            return Ok(None);
        };
        let name = HeaderName::from_bytes(self.auth_header.as_bytes())
            .with_context(|| format!("auth_header {:?} is not a header name", self.auth_header))?;
        let secret = secret.read("auth_secret")?;
        let text = match name == http::header::AUTHORIZATION {
            true => format!("Bearer {secret}"),
            false => secret,
        };
        let mut value =
            HeaderValue::try_from(text).context("auth_secret is not a valid header value")?;
        value.set_sensitive(true);
        Ok(Some(StaticHeader { name, value }))
    }

    /// `passthrough` and `exchange`: the server's resource and how a token is had for it.
    pub fn upstream_credentials(&self) -> UpstreamCredentials {
        let resource = match self.auth_resource.trim() {
            "" => self
                .http
                .clone()
                .or_else(|| self.sse.clone())
                .unwrap_or_default(),
            resource => resource.to_owned(),
        };
        let optional = |text: &str| Some(text.trim().to_owned()).filter(|t| !t.is_empty());
        match self.auth {
            UpstreamAuth::None | UpstreamAuth::Static => UpstreamCredentials::Withheld,
            UpstreamAuth::Passthrough => UpstreamCredentials::Passthrough { resource },
            UpstreamAuth::Exchange => UpstreamCredentials::Exchange(ExchangeTarget {
                resource,
                audience: optional(&self.auth_audience),
                scope: optional(&self.auth_scope),
                token_endpoint: optional(&self.auth_token_endpoint),
            }),
        }
    }

    /// `{key}.auth` and its settings: HTTP and SSE servers only, each mode with what it needs.
    pub(super) fn validate_auth(&self, key: &str) -> anyhow::Result<()> {
        let http = self.http.is_some() || self.sse.is_some();
        if self.auth != UpstreamAuth::None && !http {
            bail!(
                "{key}.auth applies to http and sse servers only (a stdio server takes its \
                 credentials from its environment: {key}.env)"
            );
        }
        if self.auth == UpstreamAuth::Static {
            if self.auth_secret.is_none() {
                bail!("{key}.auth = \"static\" needs {key}.auth_secret = {{ env = \"NAME\" }} or {{ file = \"/path\" }}");
            }
            HeaderName::from_bytes(self.auth_header.as_bytes()).map_err(|_| {
                anyhow::anyhow!(
                    "{key}.auth_header {:?} is not a header name",
                    self.auth_header
                )
            })?;
        }
        if self.forward_authorization && self.auth != UpstreamAuth::None {
            bail!("{key}.forward_authorization and {key}.auth are exclusive: use {key}.auth");
        }
        for (name, value) in [
            ("auth_resource", &self.auth_resource),
            ("auth_token_endpoint", &self.auth_token_endpoint),
        ] {
            if !value.trim().is_empty() {
                check_url(&format!("{key}.{name}"), value)?;
            }
        }
        Ok(())
    }
}

impl Config {
    /// Passing a client's token on, or exchanging it, needs the token verified (`[auth]`), and
    /// an exchange the proxy's own client; and with `[auth]`, a token issued for the proxy is
    /// never forwarded unchecked.
    pub(super) fn validate_upstream_auth(&self) -> anyhow::Result<()> {
        let upstreams = std::iter::once(("upstream".to_owned(), &self.upstream)).chain(
            self.servers
                .iter()
                .map(|(name, server)| (format!("servers.{name}.upstream"), &server.upstream)),
        );
        for (key, upstream) in upstreams {
            let needs_auth = matches!(
                upstream.auth,
                UpstreamAuth::Passthrough | UpstreamAuth::Exchange
            );
            if needs_auth && !self.auth.is_on() {
                bail!("{key}.auth = \"{:?}\" needs [auth] (the client's token must be verified first)", upstream.auth);
            }
            if upstream.auth == UpstreamAuth::Exchange && self.auth.client_id.is_empty() {
                bail!("{key}.auth = \"exchange\" needs the proxy's client at the issuer: auth.client_id and auth.client_secret");
            }
            if upstream.forward_authorization && self.auth.is_on() {
                bail!(
                    "{key}.forward_authorization would send a token issued for the proxy to the \
                     server; with [auth], use {key}.auth = \"passthrough\" (checks the token's \
                     audience) or \"exchange\""
                );
            }
        }
        Ok(())
    }
}
