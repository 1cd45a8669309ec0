//! Validation: every value checked, and a message naming the offending key.

use anyhow::bail;

/// The slowest rate a limit may have: one request per 1000 s.
const MIN_RATE: f64 = 0.001;

use super::file::{Config, Isolation};
use super::keys::check::Checked;
use super::UpstreamConfig;
use crate::base::ids::{is_node_name, MAX_NODE_NAME};
use crate::base::keys::{MAKE_A_SECRET, MIN_SECRET_BYTES};
use crate::upstream::stdio::StdioSpec;
use crate::wire::era::Era;

impl Config {
    pub fn validate(&self) -> anyhow::Result<()> {
        // What each key declares (`#[check(…)]`), at the top level and in every named server.
        self.check_keys("")?;
        for (name, server) in &self.servers {
            let upstream = format!("servers.{name}.upstream");
            server.upstream.check_keys(&upstream)?;
            server
                .session
                .check_keys(&format!("servers.{name}.session"))?;
        }
        self.upstream.validate("upstream")?;
        self.validate_store()?;
        self.validate_tls()?;
        self.validate_virtual()?;
        self.validate_limits()?;
        self.auth.validate()?;
        self.validate_upstream_auth()?;
        if !self.tracing.otlp_endpoint.trim().is_empty() {
            self.exporter_settings("")?;
        }
        if !(0.0..=1.0).contains(&self.access_log_sample) {
            bail!(
                "access_log_sample must be a share from 0 to 1 (0.1: one request in ten), not {}",
                self.access_log_sample
            );
        }
        self.validate_identity()?;
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
        }
        Ok(())
    }

    /// Who may name a principal, and what a token must be issued for: neither is left to
    /// whoever reaches a port beyond loopback. The principal header needs the proxies that set
    /// it; with `[auth]`, the resource is configured unless every Host is a loopback name.
    fn validate_identity(&self) -> anyhow::Result<()> {
        let (listen, http) = (self.listen, &self.http);
        let loopback = listen.ip().is_loopback();
        if let Some(name) = &http.principal_header {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                bail!("http.principal_header: {name:?} is not a valid header name");
            }
            if !loopback && http.trusted_proxies.is_empty() {
                bail!(
                    "http.principal_header = {name:?} on {listen}, beyond loopback, needs \
                     http.trusted_proxies (--trusted-proxy): the networks (CIDR) of the \
                     balancers or gateway that set it; without them anyone who reaches the \
                     port could name any principal"
                );
            }
        }
        let auth = &self.auth;
        let resource_named = !auth.public_url.trim().is_empty() || !auth.audience.trim().is_empty();
        if auth.is_on() && !resource_named && !(loopback && http.allowed_hosts.is_empty()) {
            let hosts = match http.allowed_hosts.is_empty() {
                true => "any Host".to_owned(),
                false => format!("the Hosts {:?}", http.allowed_hosts),
            };
            bail!(
                "auth.public_url: with [auth] on {listen} and {hosts}, set the URL clients dial \
                 (auth.public_url, --auth-public-url; or auth.audience, what every token must \
                 name): without it the resource follows each request's Host, and a token \
                 issued for another server would be taken from a client that sends that \
                 server's name as Host"
            );
        }
        Ok(())
    }

    /// The cluster secret: required with a Redis store (it authenticates the replicas' hops),
    /// and never guessable.
    /// A rate is 0 (no limit) or from one request per 1000 s up.
    fn validate_limits(&self) -> anyhow::Result<()> {
        let rates = std::iter::once((
            "limits.requests_per_second".to_owned(),
            self.limits.requests_per_second,
        ))
        .chain(
            self.limits
                .tools
                .iter()
                .map(|(tool, rate)| (format!("limits.tools.{tool}"), *rate)),
        );
        for (key, rate) in rates {
            if !(rate == 0.0 || (rate.is_finite() && rate >= MIN_RATE)) {
                bail!("{key} must be 0 (no limit) or at least {MIN_RATE} requests per second, not {rate}");
            }
        }
        Ok(())
    }

    fn validate_secret(&self) -> anyhow::Result<()> {
        let secret = &self.cluster.secret;
        if self.store != "memory" && secret.is_empty() {
            bail!(
                "cluster.secret: replicas sharing a Redis store need a shared secret \
                 (MCP_PROXY_CLUSTER_SECRET or --cluster-secret-file) to authenticate their \
                 internal requests; make one with `{MAKE_A_SECRET}`"
            );
        }
        if !secret.is_empty() && secret.len() < MIN_SECRET_BYTES {
            bail!(
                "cluster.secret is {} bytes long; it must be at least {MIN_SECRET_BYTES} \
                 (make one with `{MAKE_A_SECRET}`)",
                secret.len()
            );
        }
        Ok(())
    }

    /// Each virtual server composes named servers, at a name of its own; at most one is also
    /// at `/mcp`, where no server of the top level is.
    fn validate_virtual(&self) -> anyhow::Result<()> {
        let mut at_root = Vec::new();
        for (name, composed) in &self.r#virtual {
            let key = format!("virtual.{name}");
            if self.servers.contains_key(name) {
                bail!("{key}: [servers.{name}] has that name too; a path serves one server");
            }
            if composed.servers.is_empty() {
                bail!("{key}.servers: name the [servers.<name>] it composes");
            }
            for (i, member) in composed.servers.iter().enumerate() {
                if !self.servers.contains_key(member) {
                    bail!(
                        "{key}.servers: {member:?} is not a [servers.<name>] of this configuration"
                    );
                }
                if composed.servers[..i].contains(member) {
                    bail!("{key}.servers: {member:?} is named twice");
                }
            }
            if composed.separator.is_empty() {
                bail!("{key}.separator: members' names need something between them and their tools' (default \"__\")");
            }
            if composed.default {
                at_root.push(name.as_str());
            }
        }
        match at_root.as_slice() {
            [] => Ok(()),
            [_] if self.upstream.names_a_server() => bail!(
                "virtual.{}.default: /mcp serves the top-level [upstream] already",
                at_root[0]
            ),
            [_] => Ok(()),
            several => bail!("virtual.<name>.default: one server at /mcp, not {several:?}"),
        }
    }

    /// A client certificate names principals only where the clients' CA vouches for them
    /// and nothing else names them; the hop's server name is one rustls can verify.
    fn validate_tls(&self) -> anyhow::Result<()> {
        if self.tls.principal_from_client_cert {
            if self.tls.client_ca_file.is_none() {
                bail!("tls.principal_from_client_cert needs tls.client_ca_file: only certificates of that CA name principals");
            }
            if self.auth.is_on() || self.http.principal_header.is_some() {
                bail!("tls.principal_from_client_cert: a principal comes from one place, and [auth] or http.principal_header names it already");
            }
        }
        let hop_name = crate::tls::ClientTls {
            server_name: self.cluster.server_name.clone(),
            ..crate::tls::ClientTls::default()
        };
        hop_name
            .server_name()
            .map_err(|e| anyhow::anyhow!("cluster.server_name: {e}"))?;
        Ok(())
    }

    /// The store's credentials and TLS: a password given one way, TLS settings only for a
    /// rediss:// store and usable (every file read now).
    fn validate_store_access(&self) -> anyhow::Result<()> {
        let cluster = &self.cluster;
        let connection = cluster.store_connection(&self.store)?;
        if !connection.has_known_scheme() {
            bail!(
                "store: {:?} is neither \"memory\" nor a redis://, rediss://, \
                 redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster:// URL",
                connection.shown()
            );
        }
        if cluster.store_password.is_some()
            && crate::telemetry::redact::url_password(&self.store).is_some()
        {
            bail!(
                "store: the URL holds a password and cluster.store_password is given too: give \
                 it one way, in cluster.store_password (--store-password-env or \
                 --store-password-file)"
            );
        }
        if connection.is_sentinel() {
            // The URL's form, checked now rather than at the first connection.
            connection.check()?;
        } else if cluster.store_sentinel_password.is_some() {
            bail!("cluster.store_sentinel_password is for a redis+sentinel:// store");
        }
        let tls_set = connection.tls != crate::tls::ClientTls::default();
        match (connection.is_tls(), tls_set) {
            (false, true) => bail!(
                "cluster.store_ca_file, store_platform_roots, store_client_cert_file and \
                 store_client_key_file are for a rediss:// store (TLS); the store is redis://"
            ),
            (true, _) => {
                connection
                    .tls
                    .config()
                    .map_err(|e| anyhow::anyhow!("cluster.store_*: {e}"))?;
            }
            (false, false) => {}
        }
        Ok(())
    }

    fn validate_store(&self) -> anyhow::Result<()> {
        self.validate_secret()?;
        if self.store == "memory" {
            return Ok(());
        }
        self.validate_store_access()?;
        if self.cluster.heartbeat.is_zero() || self.cluster.owner_timeout <= self.cluster.heartbeat
        {
            bail!("cluster.owner_timeout must be longer than cluster.heartbeat, which must not be zero");
        }
        if self.cluster.write_delay >= self.cluster.heartbeat {
            bail!("cluster.write_delay must be shorter than cluster.heartbeat (it is how late a write may go to Redis)");
        }
        if self.cluster.max_write_queue == 0 {
            bail!("cluster.max_write_queue must be at least 1");
        }
        if self.cluster.max_hop_nonces == 0 {
            bail!("cluster.max_hop_nonces must be at least 1");
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
        let advertised = self.cluster.advertise.trim().parse::<http::Uri>().ok();
        let https = advertised.is_some_and(|url| url.scheme() == Some(&http::uri::Scheme::HTTPS));
        if https && self.tls.cert_file.is_none() {
            bail!("cluster.advertise is https:// but the listener speaks plain HTTP: give it [tls] cert_file and key_file");
        }
        if let Some(ca_file) = &self.cluster.ca_file {
            let hop = crate::tls::ClientTls {
                ca_file: Some(ca_file.clone()),
                platform_roots: false,
                ..crate::tls::ClientTls::default()
            };
            hop.config()
                .map_err(|e| anyhow::anyhow!("cluster.ca_file: {e}"))?;
        }
        Ok(())
    }
}

impl UpstreamConfig {
    fn validate(&self, key: &str) -> anyhow::Result<()> {
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
        self.validate_env(key)?;
        if self.forward_authorization && self.http.is_none() && self.sse.is_none() {
            bail!("{key}.forward_authorization applies to http and sse servers only");
        }
        self.validate_auth(key)?;
        if self.isolation == Isolation::Shared && (self.http.is_some() || self.sse.is_some()) {
            bail!("{key}.isolation = \"shared\" applies to stdio servers only");
        }
        if self.protocol == Era::Modern && self.sse.is_some() {
            bail!(
                "{key}.protocol = \"2026-07-28\" does not apply to an HTTP+SSE server (2024-11-05)"
            );
        }
        Ok(())
    }
}

impl UpstreamConfig {
    /// `env`, `env_clear`, `env_pass`, `user`, `group` and `user_range`: stdio only; names a
    /// child's environment can hold.
    fn validate_env(&self, key: &str) -> anyhow::Result<()> {
        let configured = !self.env.is_empty() || self.env_clear || !self.env_pass.is_empty();
        if configured && (self.http.is_some() || self.sse.is_some()) {
            bail!("{key}.env, env_clear and env_pass apply to stdio servers only");
        }
        if !self.env_pass.is_empty() && !self.env_clear {
            bail!("{key}.env_pass applies with env_clear = true (without it the child inherits every variable but the proxy's secrets)");
        }
        let names = self.env.keys().map(|name| ("env", name));
        for (field, name) in names.chain(self.env_pass.iter().map(|name| ("env_pass", name))) {
            if name.is_empty() || name.contains(['=', '\0']) {
                bail!("{key}.{field}: {name:?} is not a variable name (no '=' or NUL, not empty)");
            }
        }
        if self.env.values().any(|value| value.contains('\0')) {
            bail!("{key}.env: a value cannot hold a NUL byte");
        }
        let switched =
            !self.user.is_empty() || !self.group.is_empty() || !self.user_range.is_empty();
        if switched && (self.http.is_some() || self.sse.is_some()) {
            bail!("{key}.user, {key}.group and {key}.user_range apply to stdio servers only");
        }
        Ok(())
    }
}

/// An `http://` or `https://` URL with a host.
pub(super) fn parse_http_url(text: &str) -> anyhow::Result<http::Uri> {
    let url = crate::telemetry::redact::url(text);
    let uri: http::Uri = text
        .parse()
        .map_err(|e| anyhow::anyhow!("upstream URL {url:?} is not a URL: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        bail!("upstream URL {url:?} must be an http:// or https:// URL with a host");
    }
    Ok(uri)
}
