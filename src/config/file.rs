//! The configuration as the TOML file spells it, and its defaults.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use clap::ValueEnum;
use serde::{Deserialize, Deserializer};

use super::duration::parse_duration;
use crate::front::access::AccessLog;
use crate::front::modern::envelope::CacheScope;
use crate::front::{HttpSettings, PostResponse};
use crate::session::correlate::Anonymous;
use crate::session::exposure::{Exposure, ResourceExposure};
use crate::session::rate::RateLimits;
use crate::session::SessionSettings;
use crate::wire::era::Era;

/// How stdio children are shared among sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// One child per session: stateful servers stay correct.
    PerSession,
    /// One child for all sessions, for servers that keep no per-client state.
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The whole configuration, as the TOML file spells it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub listen: SocketAddr,
    pub log_format: LogFormat,
    /// Which requests get an access line (target `access`, level INFO).
    pub access_log: AccessLog,
    /// With `access_log = "all"`: the share of requests answered below 400 that get their
    /// line (0 to 1; every answer of 400 or more gets one).
    pub access_log_sample: f64,
    #[serde(deserialize_with = "duration")]
    pub shutdown_timeout: Duration,
    /// On SIGTERM: how long the proxy serves on, unready (`/readyz` 503) and closing each
    /// connection after its current exchange, while balancers and endpoints notice; then it
    /// stops accepting and hands its sessions over within `shutdown_timeout`.
    #[serde(deserialize_with = "duration")]
    pub drain_delay: Duration,
    /// Runtime threads: 0 = one per CPU, 1 = single-threaded.
    pub workers: usize,
    /// `memory`, or `redis://host:port/db` for replicas sharing sessions.
    pub store: String,
    pub cluster: ClusterConfig,
    pub upstream: UpstreamConfig,
    pub session: SessionConfig,
    pub http: HttpConfig,
    pub tracing: TracingConfig,
    /// Which of the default server's tools clients see, and under which names.
    pub tools: Exposure,
    /// Which of the default server's prompts clients see, and under which names.
    pub prompts: Exposure,
    /// Which of the default server's resources clients see, by URI.
    pub resources: ResourceExposure,
    /// Requests per second per principal (and per principal and tool), for every served server.
    pub limits: RateLimits,
    /// The proxy as an OAuth 2.1 resource server: tokens from this issuer on every request.
    pub auth: super::AuthConfig,
    /// Gateway mode: named servers, each at `/servers/<name>/mcp` (and `/sse`).
    pub servers: BTreeMap<String, ServerConfig>,
}

/// Spans exported over OTLP/HTTP (protobuf). Off unless a collector is named here or in
/// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// The collector's OTLP/HTTP base URL (`http://host:4318`; `/v1/traces` is added).
    pub otlp_endpoint: String,
    /// `service.name` of every span ("": `OTEL_SERVICE_NAME`, else `mcp-session-proxy`).
    pub service_name: String,
}

/// Replicas sharing sessions through a Redis store.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// This replica's name; empty: a random one at start.
    pub node_id: String,
    /// The base URL the other replicas reach this one at; empty: `http://<listen>`.
    pub advertise: String,
    /// Authenticates the replicas' internal requests to each other.
    pub secret: String,
    /// The file holding that secret (its first line), read at start; instead of `secret`.
    pub secret_file: Option<std::path::PathBuf>,
    /// Prefix of every Redis key.
    pub namespace: String,
    /// How often this replica tells the others it is alive.
    #[serde(deserialize_with = "duration")]
    pub heartbeat: Duration,
    /// A replica silent for this long is dead: its sessions are taken over.
    #[serde(deserialize_with = "duration")]
    pub owner_timeout: Duration,
    /// How long a request for a session whose owner cannot be reached is held while the owner
    /// is found dead and the session taken over here (then 503).
    #[serde(deserialize_with = "duration")]
    pub takeover_wait: Duration,
    /// How long an owner's writes to the store wait to be sent together (0: sent at once).
    #[serde(deserialize_with = "duration")]
    pub write_delay: Duration,
    /// Writes queued for the store and not yet written, at most: past it, new sessions and
    /// requests wait, and so do the servers' messages (their servers are not read meanwhile).
    pub max_write_queue: usize,
    /// Nonces of the hops taken that this replica keeps, at most, while their signatures are
    /// valid (a replayed hop is refused): when they are all in use, hops are refused (503).
    pub max_hop_nonces: usize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node_id: String::new(),
            advertise: String::new(),
            secret: String::new(),
            secret_file: None,
            namespace: "mcp-proxy".into(),
            heartbeat: Duration::from_secs(1),
            owner_timeout: Duration::from_secs(3),
            takeover_wait: Duration::from_secs(5),
            write_delay: Duration::from_millis(1),
            max_write_queue: 50_000,
            max_hop_nonces: crate::hop::DEFAULT_MAX_NONCES,
        }
    }
}

/// One named server of a gateway.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub upstream: UpstreamConfig,
    /// Its own session limits and window; absent: the top-level `[session]`.
    pub session: Option<SessionConfig>,
    /// Which of its tools clients see, and under which names.
    pub tools: Exposure,
    /// Which of its prompts clients see, and under which names.
    pub prompts: Exposure,
    /// Which of its resources clients see, by URI.
    pub resources: ResourceExposure,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// Command line of the stdio server; absent (and no `http`): the bundled demo server.
    pub stdio: Option<String>,
    /// URL of a Streamable HTTP server, instead of a stdio one.
    pub http: Option<String>,
    /// URL of a legacy HTTP+SSE server's SSE endpoint, instead.
    pub sse: Option<String>,
    /// Longest a request waits for its server without hearing of it; HTTP: also the longest
    /// wait for an answer to begin.
    #[serde(deserialize_with = "duration")]
    pub request_timeout: Duration,
    /// stdio: a child per session, or one shared by all sessions.
    pub isolation: Isolation,
    /// HTTP and SSE upstreams: send the session creator's `Authorization` to the server.
    pub forward_authorization: bool,
    /// HTTP and SSE servers: what the server gets to authenticate the proxy's requests:
    /// `none`, `static` (a header of the operator's), and with `[auth]`, `passthrough` (the
    /// client's token, only when its audience names the server) or `exchange` (RFC 8693: a
    /// token for the server, from the issuer).
    pub auth: super::UpstreamAuth,
    /// `static`: the header (`Authorization` is sent as `Bearer <secret>`).
    pub auth_header: String,
    /// `static`: where the header's secret is: `{ env = "NAME" }` or `{ file = "/path" }`.
    pub auth_secret: Option<super::SecretSource>,
    /// `passthrough`, `exchange`: the server's resource URL ("": its `http` or `sse` URL).
    pub auth_resource: String,
    /// `exchange`: an `audience` to ask for besides the resource.
    pub auth_audience: String,
    /// `exchange`: the scopes to ask for ("": the issuer's choice).
    pub auth_scope: String,
    /// `exchange`: the issuer's token endpoint ("": from its metadata).
    pub auth_token_endpoint: String,
    /// stdio, per-session: children kept started ahead of sessions.
    pub warm: usize,
    /// The revision the server speaks: `legacy` (2024-11-05 … 2025-11-25), `2026-07-28` (the
    /// proxy then bridges its legacy clients to it) or `auto` (asked at start; an HTTP+SSE
    /// server is legacy). A server that later refuses one naming the other is switched.
    pub protocol: Era,
    /// Answer list requests from a per-server, per-principal cache; absent: on for `shared`
    /// isolation (one child: one set of lists), off otherwise.
    pub cache_lists: Option<bool>,
    pub max_line_bytes: usize,
    #[serde(deserialize_with = "duration")]
    pub shutdown_grace: Duration,
    /// 2026-07-28 clients: how long they may reuse list, read and discover results (`ttlMs`).
    #[serde(deserialize_with = "duration")]
    pub cache_ttl: Duration,
    /// 2026-07-28 clients: who may reuse them: `private` (one credential) or `public` (anyone:
    /// only for servers whose lists and resources are the same for every user).
    pub cache_scope: CacheScope,
    /// HTTP servers: send the trace context as `traceparent`/`tracestate` headers too (it is
    /// always in each request's `params._meta`, which every server can read).
    pub trace_headers: bool,
    /// stdio: variables set for the child, over what it inherits.
    pub env: BTreeMap<String, String>,
    /// stdio: the child inherits only the variables `env_pass` names (else all but the
    /// proxy's own secrets, which a child never gets).
    pub env_clear: bool,
    pub env_pass: Vec<String>,
    /// stdio: the user children run as, a name or a number ("": the proxy's); needs a proxy
    /// that may switch users (root, or CAP_SETUID, CAP_SETGID and CAP_KILL), else start-up
    /// stops.
    pub user: String,
    /// stdio: their group, a name or a number ("": the user's own); no supplementary groups.
    pub group: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionConfig {
    #[serde(deserialize_with = "duration")]
    pub idle_ttl: Duration,
    pub max_sessions: usize,
    /// Sessions one principal with a credential may hold; one more is refused (503).
    pub max_sessions_per_principal: usize,
    /// Sessions clients without a credential may hold together; one more is refused (503).
    pub max_anonymous_sessions: usize,
    /// 2026-07-28 requests with no principal (`anonymous = "per-request"`) in front of a stdio
    /// server with a child per session: sessions started and initialized ahead of them, each
    /// serving one request (0: a child started and stopped for each request).
    pub anonymous_pool: usize,
    /// How long such a request waits for a pooled session to be ready; then 503.
    #[serde(deserialize_with = "duration")]
    pub anonymous_pool_wait: Duration,
    /// Pooled sessions serve request after request, sharing their server's process (and its
    /// state) between clients without a credential: only for servers that keep none.
    pub anonymous_pool_reuse: bool,
    pub window_events: usize,
    pub window_bytes: usize,
    #[serde(deserialize_with = "duration")]
    pub window_age: Duration,
    pub coalesce_progress: bool,
    /// 2026-07-28 requests with no principal: an upstream session each (`per-request`), or one
    /// shared by all of them (`shared`: only for servers that keep nothing per client).
    pub anonymous: Anonymous,
    /// 2026-07-28 clients: how long a request held for the client's input (`input_required`)
    /// waits for its retry; the `requestState` expires with it.
    #[serde(deserialize_with = "duration")]
    pub input_ttl: Duration,
    /// 2026-07-28 clients: calls one principal may have waiting for its input at once; more
    /// are refused (429).
    pub max_held_per_principal: usize,
    /// How requests without a data-layer session find their upstream session: by principal
    /// (`principal`), or that plus state handles (`handle`: tools to open and close a handle,
    /// and a handle argument on every tool).
    pub correlation: Correlation,
    /// Requests that reach the server's state must name a data-layer session (-32044).
    pub require_session: bool,
    /// A data-layer session or handle ends after this long unused.
    #[serde(deserialize_with = "duration")]
    pub data_session_idle_ttl: Duration,
    /// And at the latest this long after it was created.
    #[serde(deserialize_with = "duration")]
    pub data_session_lifetime: Duration,
    /// Data-layer sessions and handles one principal may hold (per replica).
    pub max_data_sessions_per_principal: usize,
    /// The longest `state` a data-layer session's cookie may carry, in bytes.
    pub max_session_state_bytes: usize,
    /// Resources one session may be subscribed to at once; one more is refused (-32602).
    pub max_subscriptions: usize,
    /// Requests one session may have in flight to its server at once; one more is refused
    /// (503 with `Retry-After`) without reaching the server.
    pub max_inflight: usize,
}

/// How a served server's requests are correlated with upstream sessions, beyond data-layer
/// sessions (always honoured).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Correlation {
    /// One upstream session per principal (and declared capabilities).
    #[default]
    Principal,
    /// That, and state handles: tools that open and close one, a handle argument on every tool.
    Handle,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    pub max_body_bytes: usize,
    #[serde(deserialize_with = "duration")]
    pub body_timeout: Duration,
    #[serde(deserialize_with = "duration")]
    pub sse_keep_alive: Duration,
    #[serde(deserialize_with = "duration")]
    pub sse_retry: Duration,
    #[serde(deserialize_with = "duration")]
    pub sse_close_after: Duration,
    pub post_response: PostResponse,
    #[serde(deserialize_with = "duration")]
    pub json_wait: Duration,
    pub allowed_origins: Vec<String>,
    pub allowed_hosts: Vec<String>,
    pub principal_header: Option<String>,
    /// The peers (networks, CIDR) that may send `principal_header`: the balancers or the
    /// authenticating gateway in front. Empty: loopback peers only, and a listener beyond
    /// loopback with `principal_header` does not start.
    pub trusted_proxies: Vec<crate::front::cidr::Cidr>,
    /// Client connections open at once (WebSocket connections and SSE streams included); one
    /// more is answered 503 with `Retry-After` and closed.
    pub max_connections: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            log_format: LogFormat::Text,
            access_log: AccessLog::All,
            access_log_sample: 1.0,
            shutdown_timeout: Duration::from_secs(10),
            drain_delay: Duration::from_secs(5),
            workers: 0,
            store: "memory".into(),
            cluster: ClusterConfig::default(),
            upstream: UpstreamConfig::default(),
            session: SessionConfig::default(),
            http: HttpConfig::default(),
            tracing: TracingConfig::default(),
            tools: Exposure::default(),
            prompts: Exposure::default(),
            resources: ResourceExposure::default(),
            limits: RateLimits::default(),
            auth: super::AuthConfig::default(),
            servers: BTreeMap::new(),
        }
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            stdio: None,
            http: None,
            sse: None,
            request_timeout: SessionSettings::default().request_timeout,
            isolation: Isolation::PerSession,
            forward_authorization: false,
            auth: super::UpstreamAuth::None,
            auth_header: "Authorization".into(),
            auth_secret: None,
            auth_resource: String::new(),
            auth_audience: String::new(),
            auth_scope: String::new(),
            auth_token_endpoint: String::new(),
            warm: 0,
            protocol: Era::Auto,
            cache_lists: None,
            max_line_bytes: 4 << 20,
            shutdown_grace: Duration::from_secs(2),
            cache_ttl: Duration::ZERO,
            cache_scope: CacheScope::Private,
            trace_headers: true,
            env: BTreeMap::new(),
            env_clear: false,
            env_pass: Vec::new(),
            user: String::new(),
            group: String::new(),
        }
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        let session = SessionSettings::default();
        let layer = crate::session::correlate::named::DataLayerSettings::default();
        SessionConfig {
            idle_ttl: session.idle_ttl,
            max_sessions: session.max_sessions,
            max_sessions_per_principal: session.max_sessions_per_principal,
            max_anonymous_sessions: session.max_anonymous_sessions,
            anonymous_pool: crate::session::correlate::pool::DEFAULT_SIZE,
            anonymous_pool_wait: crate::session::correlate::pool::DEFAULT_WAIT,
            anonymous_pool_reuse: false,
            window_events: session.window.max_events,
            window_bytes: session.window.max_bytes,
            window_age: session.window.max_age,
            coalesce_progress: session.coalesce_progress,
            anonymous: Anonymous::PerRequest,
            input_ttl: Duration::from_secs(300),
            max_held_per_principal: crate::session::correlate::held::DEFAULT_LIMIT,
            correlation: Correlation::Principal,
            require_session: false,
            data_session_idle_ttl: layer.idle_ttl,
            data_session_lifetime: layer.lifetime,
            max_data_sessions_per_principal: layer.max_per_principal,
            max_session_state_bytes: layer.max_state_bytes,
            max_subscriptions: session.max_subscriptions,
            max_inflight: session.max_inflight,
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        let http = HttpSettings::default();
        HttpConfig {
            max_body_bytes: http.max_body_bytes,
            body_timeout: http.body_timeout,
            sse_keep_alive: http.sse_keep_alive,
            sse_retry: http.sse_retry,
            sse_close_after: http.sse_close_after,
            post_response: http.post_response,
            json_wait: http.json_wait,
            allowed_origins: http.allowed_origins,
            allowed_hosts: http.allowed_hosts,
            principal_header: http.principal_header,
            trusted_proxies: http.trusted_proxies,
            max_connections: http.max_connections,
        }
    }
}

pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}
