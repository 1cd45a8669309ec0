//! Validation: every value checked, and a message naming the offending key.

use anyhow::bail;

use super::file::{Config, Isolation, SessionConfig, UpstreamConfig};
use crate::era::Era;
use crate::ids::{is_node_name, MAX_NODE_NAME};
use crate::upstream::stdio::StdioSpec;

impl Config {
    pub fn validate(&self) -> anyhow::Result<()> {
        self.session.validate("session")?;
        self.upstream.validate("upstream")?;
        self.validate_store()?;
        if !self.tracing.otlp_endpoint.trim().is_empty() {
            self.exporter_settings("")?;
        }
        if self.http.max_body_bytes == 0 {
            bail!("http.max_body_bytes must be at least 1");
        }
        if self.http.body_timeout.is_zero() {
            bail!("http.body_timeout must be longer than zero");
        }
        if self.http.sse_keep_alive.is_zero() {
            bail!("http.sse_keep_alive must be longer than zero");
        }
        if let Some(name) = &self.http.principal_header {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                bail!("http.principal_header: {name:?} is not a valid header name");
            }
        }
        for (name, server) in &self.servers {
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid {
                bail!("servers.{name}: a server name is letters, digits, '-' and '_' only");
            }
            server
                .upstream
                .validate(&format!("servers.{name}.upstream"))?;
            if let Some(session) = &server.session {
                session.validate(&format!("servers.{name}.session"))?;
            }
        }
        Ok(())
    }

    fn validate_store(&self) -> anyhow::Result<()> {
        if self.store == "memory" {
            return Ok(());
        }
        if !self.store.starts_with("redis://") {
            bail!(
                "store: {:?} is neither \"memory\" nor a redis:// URL",
                self.store
            );
        }
        if self.cluster.heartbeat.is_zero() || self.cluster.owner_timeout <= self.cluster.heartbeat
        {
            bail!("cluster.owner_timeout must be longer than cluster.heartbeat, which must not be zero");
        }
        if self.cluster.write_delay >= self.cluster.heartbeat {
            bail!("cluster.write_delay must be shorter than cluster.heartbeat (it is how late a write may go to Redis)");
        }
        let node = &self.cluster.node_id;
        if !node.is_empty() && !is_node_name(node) {
            bail!(
                "cluster.node_id: {node:?} must be 1 to {} letters, digits, '-' and '_' (it \
                 becomes part of session ids)",
                MAX_NODE_NAME
            );
        }
        if !self.cluster.advertise.is_empty() {
            parse_http_url(&self.cluster.advertise)
                .map_err(|e| anyhow::anyhow!("cluster.advertise: {e}"))?;
        }
        Ok(())
    }
}

impl UpstreamConfig {
    fn validate(&self, key: &str) -> anyhow::Result<()> {
        if self.max_line_bytes == 0 {
            bail!("{key}.max_line_bytes must be at least 1");
        }
        if self.request_timeout.is_zero() {
            bail!("{key}.request_timeout must be longer than zero");
        }
        if let Some(command) = &self.stdio {
            StdioSpec::parse(command).map_err(|e| anyhow::anyhow!("{key}.stdio: {e}"))?;
        }
        let named = [&self.stdio, &self.http, &self.sse];
        if named.iter().filter(|u| u.is_some()).count() > 1 {
            bail!("{key}.stdio, {key}.http and {key}.sse are exclusive: front one server");
        }
        for url in [&self.http, &self.sse].into_iter().flatten() {
            parse_http_url(url).map_err(|e| anyhow::anyhow!("{key}: {e}"))?;
        }
        if self.warm > 0
            && (self.isolation == Isolation::Shared || self.http.is_some() || self.sse.is_some())
        {
            bail!("{key}.warm applies to stdio servers in per-session isolation only");
        }
        if self.forward_authorization && self.http.is_none() && self.sse.is_none() {
            bail!("{key}.forward_authorization applies to http and sse servers only");
        }
        if self.isolation == Isolation::Shared && (self.http.is_some() || self.sse.is_some()) {
            bail!("{key}.isolation = \"shared\" applies to stdio servers only");
        }
        if self.protocol == Era::Modern && self.sse.is_some() {
            bail!(
                "{key}.protocol = \"2026-07-28\" does not apply to an HTTP+SSE server (2024-11-05)"
            );
        }
        if self.protocol == Era::Auto && self.sse.is_some() {
            bail!("{key}.protocol = \"auto\" does not apply to an HTTP+SSE server (2024-11-05)");
        }
        Ok(())
    }
}

impl SessionConfig {
    fn validate(&self, key: &str) -> anyhow::Result<()> {
        let positive = [
            ("max_sessions", self.max_sessions),
            ("window_events", self.window_events),
            ("window_bytes", self.window_bytes),
            (
                "max_data_sessions_per_principal",
                self.max_data_sessions_per_principal,
            ),
            ("max_session_state_bytes", self.max_session_state_bytes),
            ("max_subscriptions", self.max_subscriptions),
        ];
        for (name, value) in positive {
            if value == 0 {
                bail!("{key}.{name} must be at least 1");
            }
        }
        if self.max_sessions_per_principal == Some(0) {
            bail!(
                "{key}.max_sessions_per_principal must be at least 1 (leave it out for no limit)"
            );
        }
        for (name, value) in [("idle_ttl", self.idle_ttl), ("window_age", self.window_age)] {
            if value.is_zero() {
                bail!("{key}.{name} must be longer than zero");
            }
        }
        Ok(())
    }
}

/// An `http://` URL with a host (the proxy speaks plain HTTP to its upstreams).
pub(super) fn parse_http_url(url: &str) -> anyhow::Result<http::Uri> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| anyhow::anyhow!("upstream URL {url:?} is not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        bail!("upstream URL {url:?} must be an http:// URL with a host");
    }
    Ok(uri)
}
