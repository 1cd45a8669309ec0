//! `[auth]`: the proxy as an OAuth 2.1 resource server, off unless an issuer is named; and the
//! secrets the configuration names by where they are (an environment variable, a file), never
//! by value.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;

use super::duration::parse_duration;
use super::file::duration;
use super::keys::merge::SecretFlags;
use super::keys::settings;
use crate::auth::fetch::ClientCredentials;
use crate::auth::jwk::Algorithm;
use crate::auth::AuthSettings;

/// The longest `auth.jwks_refetch_floor`: a request may wait that long for a key.
const MAX_REFETCH_FLOOR: Duration = Duration::from_secs(10);

settings! {
    /// The proxy as an OAuth 2.1 resource server, off unless an issuer is named.
    pub struct AuthConfig, flags AuthFlags {
        /// Accept only bearer tokens from this OAuth issuer on every served path: the proxy is then
        /// an OAuth 2.1 resource server, and a token's issuer and subject name its principal
        /// (auth.issuer) [default: none, no authorization].
        #[arg(long = "auth-issuer", value_name = "URL")]
        pub issuer: String = String::new(), set;

        /// What a token's audience must name (auth.audience) [default: the resource URL the
        /// client dialled, e.g. https://host/mcp].
        #[arg(long = "auth-audience", value_name = "URI")]
        pub audience: String = String::new(), set;

        /// The URL clients dial, behind a balancer (auth.public_url) [default: http:// and the
        /// request's Host].
        #[arg(long = "auth-public-url", value_name = "URL")]
        pub public_url: String = String::new(), set;

        /// The issuer's JWK Set (auth.jwks_uri) [default: from the issuer's metadata].
        #[arg(long = "auth-jwks-uri", value_name = "URL")]
        pub jwks_uri: String = String::new(), set;

        /// A scope every token must grant; repeatable (auth.required_scopes) [default: none].
        #[arg(long = "auth-required-scope", value_name = "SCOPE")]
        pub required_scopes: Vec<String> = Vec::new(), list(Vec<String>);

        /// RFC 7662 introspection of tokens that are not JWTs (auth.introspection_endpoint)
        /// [default: none, only JWTs].
        #[arg(long = "auth-introspection-endpoint", value_name = "URL")]
        pub introspection_endpoint: String = String::new(), set;

        /// The proxy's own client at the issuer, for introspection and token exchange
        /// (auth.client_id) [default: none].
        #[arg(long = "auth-client-id", value_name = "ID")]
        pub client_id: String = String::new(), set;

        /// That client's secret, by where it is: `{ env = "NAME" }` or `{ file = "/path" }`
        /// (--auth-client-secret-env NAME or --auth-client-secret-file PATH) [default: none].
        #[command(flatten)]
        pub client_secret: Option<SecretSource> = None, secret(ClientSecretFlags);

        /// Introspection requests the issuer gets per second at most, on average, with a second's
        /// worth at once; a new opaque token over it gets 503 (auth.introspections_per_second)
        /// [default: 100].
        #[arg(long = "auth-introspections-per-second", value_name = "RATE")]
        pub introspections_per_second: f64 = AuthSettings::default().introspections_per_second, set;

        /// Tolerance on a token's exp, nbf and iat (auth.clock_skew) [default: 60s].
        #[serde(deserialize_with = "duration")]
        #[arg(long = "auth-clock-skew", value_name = "DURATION", value_parser = parse_duration)]
        pub clock_skew: Duration = AuthSettings::default().clock_skew, set;

        /// A signature algorithm accepted; repeatable (auth.algorithms) [default: RS256, ES256,
        /// EdDSA; never none or HS*].
        #[arg(long = "auth-algorithm", value_name = "ALG")]
        pub algorithms: Vec<String> = default_algorithms(), list(Vec<String>);

        /// Least time between two fetches of the issuer's keys: a token naming a key not yet known
        /// fetches them at once, or at the end of this floor when a fetch began within it
        /// (auth.jwks_refetch_floor, formerly jwks_refetch_interval) [default: 1s, at most 10s].
        #[serde(deserialize_with = "duration", alias = "jwks_refetch_interval")]
        #[arg(
            long = "auth-jwks-refetch-floor",
            alias = "auth-jwks-refetch-interval",
            value_name = "DURATION",
            value_parser = parse_duration
        )]
        pub jwks_refetch_floor: Duration = AuthSettings::default().jwks_refetch_floor, set;

        /// Keys older than this are fetched again at their next use (auth.jwks_max_age)
        /// [default: 1h].
        #[serde(deserialize_with = "duration")]
        #[arg(long = "auth-jwks-max-age", value_name = "DURATION", value_parser = parse_duration)]
        pub jwks_max_age: Duration = AuthSettings::default().jwks_max_age, set;

        /// How long past their maximum age the keys stay in use while the issuer cannot be reached
        /// (auth.jwks_stale_grace) [default: 6h].
        #[serde(deserialize_with = "duration")]
        #[arg(long = "auth-jwks-stale-grace", value_name = "DURATION", value_parser = parse_duration)]
        pub jwks_stale_grace: Duration = AuthSettings::default().jwks_stale_grace, set;
    }
}

/// The algorithms accepted unless the configuration names others.
fn default_algorithms() -> Vec<String> {
    let settings = AuthSettings::default();
    settings
        .algorithms
        .iter()
        .map(|a| a.name().into())
        .collect()
}

/// `auth.client_secret` by where it is.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientSecretFlags {
    /// The environment variable holding that client's secret (auth.client_secret = { env }).
    #[arg(long = "auth-client-secret-env", value_name = "NAME")]
    pub client_secret_env: Option<String>,

    /// The file holding that client's secret (auth.client_secret = { file }).
    #[arg(long = "auth-client-secret-file", value_name = "PATH")]
    pub client_secret_file: Option<PathBuf>,
}

impl SecretFlags for ClientSecretFlags {
    fn source(&self) -> Option<SecretSource> {
        SecretSource::given(&self.client_secret_env, &self.client_secret_file)
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
    /// Where a secret is, from the `…-env` or `…-file` flag given (the variable first).
    pub fn given(env: &Option<String>, file: &Option<PathBuf>) -> Option<SecretSource> {
        match (env, file) {
            (Some(name), _) => Some(SecretSource::Env(name.clone())),
            (None, Some(path)) => Some(SecretSource::File(path.clone())),
            (None, None) => None,
        }
    }

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

pub(super) fn check_url(key: &str, value: &str) -> anyhow::Result<()> {
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
