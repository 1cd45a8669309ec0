//! `upstream.auth`: what an HTTP server gets to authenticate the proxy's requests, and the
//! checks that tie it to `[auth]`.

use anyhow::{bail, Context};
use http::{HeaderName, HeaderValue};
use serde::Deserialize;

use super::auth::check_url;
use super::{Config, UpstreamConfig};
use crate::auth::exchange::ExchangeTarget;
use crate::front::settings::UpstreamCredentials;
use crate::upstream::credential::StaticHeader;

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
        self.validate_credentials_in_clear(key)
    }

    /// A credential for a resource named `https://` does not go to its server over plain
    /// `http://` (anyone on the way reads it) unless the operator says so.
    fn validate_credentials_in_clear(&self, key: &str) -> anyhow::Result<()> {
        let url = self
            .http
            .as_deref()
            .or(self.sse.as_deref())
            .unwrap_or_default();
        let sends_credentials = self.forward_authorization || self.auth != UpstreamAuth::None;
        let secure_resource = scheme_of(&self.auth_resource).as_deref() == Some("https");
        if sends_credentials
            && secure_resource
            && scheme_of(url).as_deref() == Some("http")
            && !self.credentials_over_http
        {
            bail!(
                "{key}: the server's resource is https:// ({key}.auth_resource) but its URL is \
                 http://: its credentials would cross the network in clear text; reach it over \
                 https://, or set {key}.credentials_over_http = true where the network between \
                 them is trusted"
            );
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

/// A URL's scheme as a URL reads it (`HTTPS://` is https), if it is one.
fn scheme_of(url: &str) -> Option<String> {
    let uri = url.trim().parse::<http::Uri>().ok()?;
    uri.scheme_str().map(str::to_ascii_lowercase)
}
