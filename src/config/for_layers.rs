//! What each layer takes from the configuration: the upstream spec, session and HTTP settings.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;

use super::file::{Config, Isolation};
use super::validate::parse_http_url;
use super::{Correlation, SecretSource, SessionConfig, UpstreamAuth, UpstreamConfig};
use crate::base::ids;
use crate::base::keys::Keys;
use crate::front::settings::HttpSettings;
use crate::session::exposure::{Exposure, ResourceExposure};
use crate::session::log::Window;
use crate::session::rate::RateLimits;
use crate::session::SessionSettings;
use crate::store::redis::RedisSettings;
use crate::telemetry::spans::ExporterSettings;
use crate::upstream::child_env::{ChildEnv, Secrets};
use crate::upstream::child_user::RunAs;
use crate::upstream::http_client::HttpSpec;
use crate::upstream::stdio::StdioSpec;
use crate::upstream::UpstreamSpec;

impl Config {
    /// With a Redis store: its settings, this replica named (a random name if none is
    /// configured) and reachable at `advertise` (or at `listen`, where it listens), its hops
    /// signed with `keys.hop`.
    pub fn redis_settings(
        &self,
        listen: SocketAddr,
        keys: &Keys,
    ) -> anyhow::Result<Option<RedisSettings>> {
        let cluster = &self.cluster;
        if self.store == "memory" {
            return Ok(None);
        }
        Ok(Some(RedisSettings {
            connection: cluster.store_connection(&self.store)?,
            node_id: match cluster.node_id.as_str() {
                "" => ids::mint_node(),
                name => name.to_owned(),
            },
            advertise: match (cluster.advertise.as_str(), &self.tls.cert_file) {
                ("", None) => format!("http://{listen}"),
                ("", Some(_)) => format!("https://{listen}"),
                (url, _) => url.to_owned(),
            },
            hop_tls: crate::tls::ClientTls {
                ca_file: cluster.ca_file.clone(),
                platform_roots: cluster.ca_file.is_none(),
                client_cert_file: self.tls.cert_file.clone(),
                client_key_file: self.tls.key_file.clone(),
                server_name: cluster.server_name.clone(),
            },
            hop_key: keys.hop.clone(),
            namespace: cluster.namespace.clone(),
            heartbeat: cluster.heartbeat,
            owner_timeout: cluster.owner_timeout,
            takeover_wait: cluster.takeover_wait,
            write_delay: cluster.write_delay,
            max_write_queue: cluster.max_write_queue,
            max_hop_answer_bytes: crate::hop::max_answer_bytes(
                self.max_line_bytes(),
                self.http.max_body_bytes,
            ),
            idle_ttl: self.session.idle_ttl,
        }))
    }

    /// The largest message any served server may send (`upstream.max_line_bytes`, of the
    /// top-level server and of each named one).
    fn max_line_bytes(&self) -> usize {
        std::iter::once(&self.upstream)
            .chain(self.servers.values().map(|server| &server.upstream))
            .map(|upstream| upstream.max_line_bytes)
            .max()
            .unwrap_or_default()
    }

    /// Whether `/mcp` serves a server of its own: always without named servers; with them, only
    /// when the top-level `[upstream]` names one.
    pub fn serves_default(&self) -> bool {
        self.servers.is_empty() || self.upstream.names_a_server()
    }

    /// The server sessions on `/mcp` get.
    pub fn upstream_spec(&self) -> anyhow::Result<UpstreamSpec> {
        self.upstream.spec(&self.child_secrets())
    }

    /// The proxy's secrets, which no child's environment may hold: the cluster secret, the
    /// passwords in the store's and the servers' URLs, the store's password, the client and
    /// upstream secrets and the OTLP headers (however they were given).
    pub fn child_secrets(&self) -> Arc<Secrets> {
        let otlp = [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ]
        .into_iter()
        .filter_map(|name| std::env::var(name).ok());
        let mut values = vec![self.cluster.secret.clone()];
        // Passwords in URLs: the Redis store's, the HTTP servers'.
        let servers = std::iter::once(&self.upstream)
            .chain(self.servers.values().map(|server| &server.upstream))
            .flat_map(|upstream| [&upstream.http, &upstream.sse])
            .flatten();
        let urls = std::iter::once(&self.store).chain(servers);
        values.extend(
            urls.filter_map(|url| crate::telemetry::redact::url_password(url))
                .flat_map(|password| [password.to_owned(), percent_decoded(password)]),
        );
        // Read again at start, where a missing one is an error; here only what is there.
        if let Some(secret) = &self.auth.client_secret {
            values.extend(secret.read("auth.client_secret").ok());
        }
        let store_passwords = [
            &self.cluster.store_password,
            &self.cluster.store_sentinel_password,
        ];
        for password in store_passwords.into_iter().flatten() {
            values.extend(password.read("cluster.store_password").ok());
        }
        let upstreams = std::iter::once(&self.upstream)
            .chain(self.servers.values().map(|server| &server.upstream));
        for upstream in upstreams {
            if let Some(secret) = &upstream.auth_secret {
                values.extend(secret.read("auth_secret").ok());
            }
        }
        for list in otlp {
            let decoded = list
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .map(|(_, value)| percent_decoded(value.trim()));
            values.extend(decoded.collect::<Vec<_>>());
            values.push(list);
        }
        Arc::new(Secrets::new(values))
    }

    /// The settings of the sessions of the server at `/mcp`, spans going nowhere.
    pub fn session_settings(&self) -> SessionSettings {
        self.session.settings(ServedBy {
            upstream: &self.upstream,
            exposure: super::exposure::exposure(&self.tools, &self.prompts, &self.resources),
            limits: self.limits.rates(),
            spans: crate::telemetry::spans::Spans::default(),
        })
    }

    /// The front's HTTP settings; reads the trusted proxy's token.
    pub fn http_settings(&self) -> anyhow::Result<HttpSettings> {
        let trusted_proxy_token = match &self.http.trusted_proxy_token_file {
            Some(path) => {
                let token =
                    SecretSource::File(path.clone()).read("http.trusted_proxy_token_file")?;
                if token.len() < 16 {
                    anyhow::bail!(
                        "http.trusted_proxy_token_file: the token in {} is {} bytes; at least 16",
                        path.display(),
                        token.len()
                    );
                }
                Some(crate::front::settings::ProxyToken::new(&token))
            }
            None => None,
        };
        Ok(HttpSettings {
            max_body_bytes: self.http.max_body_bytes,
            body_timeout: self.http.body_timeout,
            header_timeout: self.http.header_timeout,
            sse_keep_alive: self.http.sse_keep_alive,
            sse_retry: self.http.sse_retry,
            sse_close_after: self.http.sse_close_after,
            post_response: self.http.post_response,
            json_wait: self.http.json_wait,
            allowed_origins: self.http.allowed_origins.clone(),
            allowed_hosts: self.http.allowed_hosts.clone(),
            loopback_hosts_only: self.listen.ip().is_loopback(),
            principal_header: self.http.principal_header.clone(),
            trusted_proxies: self.http.trusted_proxies.clone(),
            trusted_proxy_token,
            max_connections: self.http.max_connections,
        })
    }
}

impl UpstreamConfig {
    /// Whether the list cache is on, explicitly or by the isolation's default.
    pub fn caches_lists(&self) -> bool {
        let shared_stdio =
            self.isolation == Isolation::Shared && self.http.is_none() && self.sse.is_none();
        self.cache_lists.unwrap_or(shared_stdio)
    }

    pub(super) fn names_a_server(&self) -> bool {
        self.stdio.is_some() || self.http.is_some() || self.sse.is_some()
    }

    /// The server sessions get: the configured HTTP, SSE or stdio server, else this binary's
    /// demo server.
    pub fn spec(&self, secrets: &Arc<Secrets>) -> anyhow::Result<UpstreamSpec> {
        let http = |url: &str| -> anyhow::Result<HttpSpec> {
            let url = parse_http_url(url)?;
            let tls = self.tls.client_tls();
            if url.scheme_str() == Some("https") {
                // Read now, so that a file missing or wrong stops the start, naming it.
                tls.config()
                    .map_err(|e| anyhow::anyhow!("upstream.tls: {e}"))?;
            }
            Ok(HttpSpec {
                url,
                request_timeout: self.request_timeout,
                max_event_bytes: self.max_line_bytes,
                forward_authorization: self.forward_authorization
                    || matches!(
                        self.auth,
                        UpstreamAuth::Passthrough | UpstreamAuth::Exchange
                    ),
                static_header: self.static_header()?,
                protocol: self.protocol,
                trace_headers: self.trace_headers,
                tls,
            })
        };
        match (&self.http, &self.sse) {
            (Some(url), _) => Ok(UpstreamSpec::Http(http(url)?)),
            (None, Some(url)) => Ok(UpstreamSpec::Sse(http(url)?)),
            (None, None) => match self.isolation {
                Isolation::PerSession => self
                    .stdio_spec(secrets)
                    .map(|spec| UpstreamSpec::Stdio(Arc::new(spec))),
                Isolation::Shared => self
                    .stdio_spec(secrets)
                    .map(|spec| UpstreamSpec::SharedStdio(Arc::new(spec))),
            },
        }
    }

    /// The stdio server to run: the configured command, or this binary's demo server.
    pub fn stdio_spec(&self, secrets: &Arc<Secrets>) -> anyhow::Result<StdioSpec> {
        let mut spec = match &self.stdio {
            Some(command) => StdioSpec::parse(command).map_err(|e| anyhow::anyhow!(e))?,
            None => {
                let exe = std::env::current_exe().context("cannot locate this executable")?;
                StdioSpec {
                    program: exe.to_string_lossy().into_owned(),
                    args: vec!["demo-server".into()],
                    ..StdioSpec::parse("demo-server").map_err(|e| anyhow::anyhow!(e))?
                }
            }
        };
        spec.max_line_bytes = self.max_line_bytes;
        spec.request_timeout = self.request_timeout;
        spec.shutdown_grace = self.shutdown_grace;
        spec.warm = self.warm;
        spec.protocol = self.protocol;
        spec.env = ChildEnv {
            clear: self.env_clear,
            pass: self.env_pass.clone(),
            set: self.env.clone(),
            secrets: secrets.clone(),
        };
        // Checked at start with the server's own key (`server::start`).
        spec.user = self.child_user("upstream")?;
        spec.capabilities = self.capabilities.clone();
        spec.sandbox = self.sandbox.spec();
        // The command's own directories, found once, here at start, as the start checks them
        // (`validate_sandbox_reach`): what a child writes later (a `pyvenv.cfg` in a writable
        // folder) widens no later child's reach.
        let program = spec.sandbox.as_ref().and_then(|_| spec.locate().ok());
        if let (Some(sandbox), Some(program)) = (&mut spec.sandbox, program) {
            let own = crate::upstream::stdio::own_directories(&program, &spec.args);
            sandbox.paths.read.extend(own);
        }
        if let Some(sandbox) = &spec.sandbox {
            sandbox
                .check()
                .map_err(|e| anyhow::anyhow!("upstream.sandbox: {e}"))?;
        }
        Ok(spec)
    }

    /// Who the stdio children of the server configured at `key` run as; an error names the key
    /// at fault (`<key>.user`, `<key>.group` or `<key>.user_range`).
    pub fn child_user(&self, key: &str) -> anyhow::Result<Option<RunAs>> {
        RunAs::resolve(&self.user, &self.group, &self.user_range)
            .map_err(|e| anyhow::anyhow!("{key}.{}: {e}", e.field(&self.user, &self.user_range)))
    }
}

/// What a served server's sessions take from beyond `[session]`: its upstream's request
/// timeout and whether its lists may be cached, its exposure rules (`[tools]`, `[prompts]`,
/// `[resources]`), the rate limits (`[limits]`), and where its spans go.
pub struct ServedBy<'a> {
    pub upstream: &'a UpstreamConfig,
    pub exposure: (Exposure, Exposure, ResourceExposure),
    pub limits: RateLimits,
    pub spans: crate::telemetry::spans::Spans,
}

impl SessionConfig {
    /// The replay window of each session.
    pub fn window(&self) -> Window {
        Window {
            max_events: self.window_events,
            max_bytes: self.window_bytes,
            max_age: self.window_age,
        }
    }

    /// The settings of the sessions of the server `served` describes.
    pub fn settings(&self, served: ServedBy<'_>) -> SessionSettings {
        let (tools, prompts, resources) = served.exposure;
        SessionSettings {
            window: self.window(),
            idle_ttl: self.idle_ttl,
            max_sessions: self.max_sessions,
            max_sessions_per_principal: self.max_sessions_per_principal,
            max_anonymous_sessions: self.max_anonymous_sessions,
            coalesce_progress: self.coalesce_progress,
            cache_lists: served.upstream.caches_lists(),
            request_timeout: served.upstream.request_timeout,
            max_subscriptions: self.max_subscriptions,
            max_inflight: self.max_inflight,
            spans: served.spans,
            tools: Arc::new(tools),
            prompts: Arc::new(prompts),
            resources: Arc::new(resources),
            limits: served.limits,
        }
    }

    /// The settings of sessions named in messages (data-layer sessions, state handles).
    pub fn data_layer_settings(&self) -> crate::session::settings::DataLayerSettings {
        crate::session::settings::DataLayerSettings {
            require_session: self.require_session,
            handles: self.correlation == Correlation::Handle,
            idle_ttl: self.data_session_idle_ttl,
            lifetime: self.data_session_lifetime,
            max_per_principal: self.max_data_sessions_per_principal,
            max_state_bytes: self.max_session_state_bytes,
        }
    }
}

impl Config {
    /// With tracing on (a collector in `tracing.otlp_endpoint`, `--otlp-endpoint`,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`): where spans go
    /// and how they are batched (the standard `OTEL_BSP_*` and `OTEL_EXPORTER_OTLP_*`
    /// variables are read). `instance` names this replica in every span.
    pub fn exporter_settings(&self, instance: &str) -> anyhow::Result<Option<ExporterSettings>> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let endpoint = match (
            env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            self.tracing.otlp_endpoint.trim(),
        ) {
            (Some(traces), _) => traces,
            (None, "") => return Ok(None),
            (None, base) => format!("{}/v1/traces", base.trim_end_matches('/')),
        };
        let endpoint = parse_collector_url(&endpoint)?;
        let millis = |name: &str, default: u64| {
            std::time::Duration::from_millis(
                env(name)
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(default),
            )
        };
        let count = |name: &str, default: usize| {
            env(name)
                .and_then(|v| v.trim().parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or(default)
        };
        let headers = env("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            .or_else(|| env("OTEL_EXPORTER_OTLP_HEADERS"))
            .map(|list| otlp_headers(&list))
            .transpose()?
            .unwrap_or_default();
        let tls = collector_tls(env)?;
        Ok(Some(ExporterSettings {
            tls,
            endpoint,
            headers,
            service_name: match self.tracing.service_name.as_str() {
                "" => env("OTEL_SERVICE_NAME").unwrap_or_else(|| "mcp-session-proxy".into()),
                name => name.to_owned(),
            },
            instance: instance.to_owned(),
            max_queue: count("OTEL_BSP_MAX_QUEUE_SIZE", 2048),
            max_batch: count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
            delay: millis("OTEL_BSP_SCHEDULE_DELAY", 1000),
            timeout: millis("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000),
        }))
    }
}

/// The collector's URL: http:// or https:// with a host.
fn parse_collector_url(url: &str) -> anyhow::Result<http::Uri> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| anyhow::anyhow!("tracing.otlp_endpoint: {url:?} is not a URL: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        anyhow::bail!(
            "tracing.otlp_endpoint: {url:?} must be an http:// or https:// URL with a host"
        );
    }
    Ok(uri)
}

/// How an https:// collector is verified and what the proxy shows it, from the standard
/// variables (the traces-only ones first), read now so that a wrong file stops the start.
fn collector_tls(env: impl Fn(&str) -> Option<String>) -> anyhow::Result<crate::tls::ClientTls> {
    let file = |name: &str| {
        env(&format!("OTEL_EXPORTER_OTLP_TRACES_{name}"))
            .or_else(|| env(&format!("OTEL_EXPORTER_OTLP_{name}")))
            .map(std::path::PathBuf::from)
    };
    let tls = crate::tls::ClientTls {
        ca_file: file("CERTIFICATE"),
        client_cert_file: file("CLIENT_CERTIFICATE"),
        client_key_file: file("CLIENT_KEY"),
        ..crate::tls::ClientTls::default()
    };
    tls.config().map_err(|e| {
        anyhow::anyhow!(
            "the collector's TLS (OTEL_EXPORTER_OTLP_CERTIFICATE, \
             OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE, OTEL_EXPORTER_OTLP_CLIENT_KEY): {e}"
        )
    })?;
    Ok(tls)
}

/// `OTEL_EXPORTER_OTLP_HEADERS`: `key=value` pairs separated by commas, values URL-encoded.
fn otlp_headers(list: &str) -> anyhow::Result<Vec<(http::HeaderName, http::HeaderValue)>> {
    list.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').ok_or_else(|| {
                anyhow::anyhow!("OTEL_EXPORTER_OTLP_HEADERS: {pair:?} is not key=value")
            })?;
            let value = percent_decoded(value.trim());
            Ok((
                http::HeaderName::from_bytes(name.trim().as_bytes())
                    .with_context(|| format!("OTEL_EXPORTER_OTLP_HEADERS: {name:?}"))?,
                http::HeaderValue::from_str(&value).with_context(|| {
                    format!("OTEL_EXPORTER_OTLP_HEADERS: the value of {name:?}")
                })?,
            ))
        })
        .collect()
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otlp_headers_are_key_value_pairs_with_url_encoded_values() {
        let headers = otlp_headers("api-key=a%20b%3D1, x-tenant = acme ,").unwrap();
        let pairs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(pairs, [("api-key", "a b=1"), ("x-tenant", "acme")]);
        assert!(otlp_headers("no-equals-sign").is_err());
        assert!(otlp_headers("bad name=1").is_err());
        assert_eq!(percent_decoded("100%"), "100%", "a lone % stays");
    }

    #[test]
    fn the_collector_is_an_http_or_https_url_with_v1_traces_added() {
        let mut config = Config::default();
        assert!(
            config.exporter_settings("a").unwrap().is_none(),
            "off by default"
        );
        config.tracing.otlp_endpoint = "http://127.0.0.1:4318/".into();
        let settings = config.exporter_settings("a").unwrap().unwrap();
        assert_eq!(settings.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(settings.instance, "a");
        config.tracing.otlp_endpoint = "https://collector:4318".into();
        let settings = config.exporter_settings("a").unwrap().unwrap();
        assert_eq!(settings.endpoint, "https://collector:4318/v1/traces");
        config.tracing.otlp_endpoint = "ftp://collector:4318".into();
        let error = config.exporter_settings("a").unwrap_err().to_string();
        assert!(error.contains("tracing.otlp_endpoint"), "{error}");
    }
}
