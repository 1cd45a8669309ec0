//! Configuration: a TOML file, command-line options over it, and validation whose messages
//! name the offending key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use serde::{Deserialize, Deserializer};

use crate::front::{HttpSettings, PostResponse};
use crate::session::log::Window;
use crate::session::SessionSettings;
use crate::upstream::http_client::HttpSpec;
use crate::upstream::stdio::StdioSpec;
use crate::upstream::UpstreamSpec;

/// A session-aware reverse proxy for MCP servers: it owns their sessions, keeps a replay window
/// per session and coalesces change notifications, so clients survive dropped streams.
#[derive(Debug, Parser)]
#[command(name = "mcp-session-proxy", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// TOML configuration file; options given here override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address to listen on [default: 127.0.0.1:8787].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Command line of the stdio MCP server to run per session (split like a shell would, never
    /// run by one) [default: the bundled demo server].
    #[arg(long, value_name = "COMMAND", conflicts_with_all = ["http", "sse"])]
    pub stdio: Option<String>,

    /// URL of a Streamable HTTP MCP server to front instead of a stdio one; each proxy session
    /// gets its own upstream session [default: none].
    #[arg(long, value_name = "URL", conflicts_with = "sse")]
    pub http: Option<String>,

    /// URL of the SSE endpoint of a legacy (2024-11-05) HTTP+SSE MCP server to front; each proxy
    /// session gets its own stream [default: none].
    #[arg(long, value_name = "URL")]
    pub sse: Option<String>,

    /// stdio: per-session (a child each) or shared (one child for all sessions, for servers that
    /// keep no per-client state) [default: per-session].
    #[arg(long, value_name = "MODE")]
    pub isolation: Option<Isolation>,

    /// stdio, per-session: children kept started ahead of sessions, so initialize does not
    /// wait for process start-up [default: 0].
    #[arg(long, value_name = "N")]
    pub warm: Option<usize>,

    /// Answer list requests from a per-server, per-principal cache (true/false) [default: on for
    /// shared isolation, off otherwise].
    #[arg(long, value_name = "BOOL")]
    pub cache_lists: Option<bool>,

    /// With --http or --sse: send the session creator's Authorization to the server [default:
    /// off: client credentials never leave the proxy].
    #[arg(long)]
    pub forward_authorization: bool,

    /// Longest a request waits for its server without hearing of it (a response, or progress, a
    /// message or a request on its stream); then the client gets an error and the server a
    /// cancellation. HTTP upstreams: also the longest wait for an answer to begin [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub request_timeout: Option<Duration>,

    /// End a session after this long without requests or attached streams [default: 10m].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub idle_ttl: Option<Duration>,

    /// Most sessions open at once; more are refused with 503 [default: 10000].
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<usize>,

    /// Replay window: most messages kept per session [default: 1024].
    #[arg(long, value_name = "N")]
    pub window_events: Option<usize>,

    /// Replay window: most bytes kept per session [default: 1048576].
    #[arg(long, value_name = "BYTES")]
    pub window_bytes: Option<usize>,

    /// Replay window: oldest message kept [default: 10m].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub window_age: Option<Duration>,

    /// Largest POST body accepted; larger ones get 413 [default: 4194304].
    #[arg(long, value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,

    /// Longest a request body may take to arrive; a slower one gets 408 [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub body_timeout: Option<Duration>,

    /// Longest line accepted from a stdio server [default: 4194304].
    #[arg(long, value_name = "BYTES")]
    pub max_line_bytes: Option<usize>,

    /// On release of a stdio server: close stdin, wait this long, SIGTERM, wait again, SIGKILL
    /// [default: 2s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub shutdown_grace: Option<Duration>,

    /// Let a newer progress notification replace an undelivered older one of the same token
    /// [default: off].
    #[arg(long)]
    pub coalesce_progress: bool,

    /// Interval of SSE keep-alive comments on idle streams [default: 15s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub sse_keep_alive: Option<Duration>,

    /// Reconnection delay announced to 2025-11-25 clients with `retry:` [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub sse_retry: Option<Duration>,

    /// Close the SSE streams of 2025-11-25 clients after this long; they resume with
    /// Last-Event-ID (0s: never) [default: 0s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub sse_close_after: Option<Duration>,

    /// How a POSTed request is answered: auto (JSON if the response is ready first, else SSE),
    /// sse, json [default: auto].
    #[arg(long, value_name = "MODE")]
    pub post_response: Option<PostResponse>,

    /// With --post-response auto: how long to wait for a response before answering with a
    /// stream instead of JSON [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub json_wait: Option<Duration>,

    /// An Origin to allow besides loopback ones (exact, or `*`); repeatable [default: none].
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,

    /// A Host to allow (host or host:port, or `*`); repeatable [default: loopback names when
    /// listening on loopback, else any].
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,

    /// A header, set by a trusted authenticating proxy in front, that names the principal
    /// owning a session [default: none: a digest of Authorization].
    #[arg(long, value_name = "HEADER")]
    pub principal_header: Option<String>,

    /// Most sessions one principal may hold; more are refused with 503 [default: no limit].
    #[arg(long, value_name = "N")]
    pub max_sessions_per_principal: Option<usize>,

    /// Log format [default: text].
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,

    /// On SIGTERM or SIGINT: the longest the proxy takes to close streams, release every server
    /// and exit [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub shutdown_timeout: Option<Duration>,

    /// Where session state lives: `memory` (this process only) or `redis://host:port/db`
    /// (replicas behind a balancer share sessions) [default: memory].
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,

    /// With a Redis store: this replica's name [default: a random one].
    #[arg(long, value_name = "NAME")]
    pub node_id: Option<String>,

    /// With a Redis store: the base URL the other replicas reach this one at [default:
    /// http://<listen>].
    #[arg(long, value_name = "URL")]
    pub advertise: Option<String>,

    /// With a Redis store: the secret the replicas share to authenticate their internal requests.
    #[arg(
        long,
        value_name = "SECRET",
        env = "MCP_PROXY_CLUSTER_SECRET",
        hide_env_values = true
    )]
    pub cluster_secret: Option<String>,

    /// With a Redis store: how often this replica tells the others it is alive [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub heartbeat: Option<Duration>,

    /// With a Redis store: how long a silent replica has until its sessions are taken over
    /// [default: 3s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub owner_timeout: Option<Duration>,

    /// Threads serving connections: 0 = one per CPU; 1 = a single-threaded runtime, the least
    /// CPU per request (no cross-thread wake-ups), for sidecars [default: 0].
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the bundled demo MCP server on stdio (protocol 2025-11-25).
    DemoServer {
        /// Serve it over Streamable HTTP on this address instead (prints its URL on stdout).
        #[arg(long, value_name = "ADDR")]
        http: Option<SocketAddr>,
    },
}

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
    #[serde(deserialize_with = "duration")]
    pub shutdown_timeout: Duration,
    /// Runtime threads: 0 = one per CPU, 1 = single-threaded.
    pub workers: usize,
    /// `memory`, or `redis://host:port/db` for replicas sharing sessions.
    pub store: String,
    pub cluster: ClusterConfig,
    pub upstream: UpstreamConfig,
    pub session: SessionConfig,
    pub http: HttpConfig,
    /// Gateway mode: named servers, each at `/servers/<name>/mcp` (and `/sse`).
    pub servers: BTreeMap<String, ServerConfig>,
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
    /// Prefix of every Redis key.
    pub namespace: String,
    /// How often this replica tells the others it is alive.
    #[serde(deserialize_with = "duration")]
    pub heartbeat: Duration,
    /// A replica silent for this long is dead: its sessions are taken over.
    #[serde(deserialize_with = "duration")]
    pub owner_timeout: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node_id: String::new(),
            advertise: String::new(),
            secret: String::new(),
            namespace: "mcp-proxy".into(),
            heartbeat: Duration::from_secs(1),
            owner_timeout: Duration::from_secs(3),
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
    /// stdio, per-session: children kept started ahead of sessions.
    pub warm: usize,
    /// Answer list requests from a per-server, per-principal cache; absent: on for `shared`
    /// isolation (one child: one set of lists), off otherwise.
    pub cache_lists: Option<bool>,
    pub max_line_bytes: usize,
    #[serde(deserialize_with = "duration")]
    pub shutdown_grace: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionConfig {
    #[serde(deserialize_with = "duration")]
    pub idle_ttl: Duration,
    pub max_sessions: usize,
    pub max_sessions_per_principal: Option<usize>,
    pub window_events: usize,
    pub window_bytes: usize,
    #[serde(deserialize_with = "duration")]
    pub window_age: Duration,
    pub coalesce_progress: bool,
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            log_format: LogFormat::Text,
            shutdown_timeout: Duration::from_secs(10),
            workers: 0,
            store: "memory".into(),
            cluster: ClusterConfig::default(),
            upstream: UpstreamConfig::default(),
            session: SessionConfig::default(),
            http: HttpConfig::default(),
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
            warm: 0,
            cache_lists: None,
            max_line_bytes: 4 << 20,
            shutdown_grace: Duration::from_secs(2),
        }
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        let session = SessionSettings::default();
        SessionConfig {
            idle_ttl: session.idle_ttl,
            max_sessions: session.max_sessions,
            max_sessions_per_principal: session.max_sessions_per_principal,
            window_events: session.window.max_events,
            window_bytes: session.window.max_bytes,
            window_age: session.window.max_age,
            coalesce_progress: session.coalesce_progress,
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
        }
    }
}

impl Config {
    /// Reads `--config` (if any), applies the other options over it, and validates.
    pub fn load(cli: &Cli) -> anyhow::Result<Config> {
        let mut config = match &cli.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        config.apply(cli);
        config.validate()?;
        // The secret usually comes from the environment, not from the file.
        if config.store != "memory" && config.cluster.secret.is_empty() {
            bail!(
                "cluster.secret: replicas sharing a Redis store need a shared secret (or \
                 MCP_PROXY_CLUSTER_SECRET) to authenticate their internal requests"
            );
        }
        Ok(config)
    }

    pub fn from_file(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        Config::from_toml(&text).with_context(|| format!("in {}", path.display()))
    }

    pub fn from_toml(text: &str) -> anyhow::Result<Config> {
        let config: Config = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        config.validate()?;
        Ok(config)
    }

    fn apply(&mut self, cli: &Cli) {
        fn set<T: Clone>(target: &mut T, value: &Option<T>) {
            if let Some(value) = value {
                *target = value.clone();
            }
        }
        set(&mut self.listen, &cli.listen);
        set(&mut self.log_format, &cli.log_format);
        set(&mut self.shutdown_timeout, &cli.shutdown_timeout);
        set(&mut self.workers, &cli.workers);
        set(&mut self.store, &cli.store);
        set(&mut self.cluster.node_id, &cli.node_id);
        set(&mut self.cluster.advertise, &cli.advertise);
        set(&mut self.cluster.secret, &cli.cluster_secret);
        set(&mut self.cluster.heartbeat, &cli.heartbeat);
        set(&mut self.cluster.owner_timeout, &cli.owner_timeout);
        // One server is fronted: naming one on the command line replaces the file's.
        if cli.stdio.is_some() || cli.http.is_some() || cli.sse.is_some() {
            self.upstream.stdio = cli.stdio.clone();
            self.upstream.http = cli.http.clone();
            self.upstream.sse = cli.sse.clone();
        }
        set(&mut self.upstream.request_timeout, &cli.request_timeout);
        set(&mut self.upstream.isolation, &cli.isolation);
        if cli.forward_authorization {
            self.upstream.forward_authorization = true;
        }
        set(&mut self.upstream.warm, &cli.warm);
        if cli.cache_lists.is_some() {
            self.upstream.cache_lists = cli.cache_lists;
        }
        set(&mut self.upstream.max_line_bytes, &cli.max_line_bytes);
        set(&mut self.upstream.shutdown_grace, &cli.shutdown_grace);
        if cli.coalesce_progress {
            self.session.coalesce_progress = true;
        }
        set(&mut self.http.json_wait, &cli.json_wait);
        if !cli.allowed_origins.is_empty() {
            self.http.allowed_origins = cli.allowed_origins.clone();
        }
        if !cli.allowed_hosts.is_empty() {
            self.http.allowed_hosts = cli.allowed_hosts.clone();
        }
        if cli.principal_header.is_some() {
            self.http.principal_header = cli.principal_header.clone();
        }
        if cli.max_sessions_per_principal.is_some() {
            self.session.max_sessions_per_principal = cli.max_sessions_per_principal;
        }
        set(&mut self.session.idle_ttl, &cli.idle_ttl);
        set(&mut self.session.max_sessions, &cli.max_sessions);
        set(&mut self.session.window_events, &cli.window_events);
        set(&mut self.session.window_bytes, &cli.window_bytes);
        set(&mut self.session.window_age, &cli.window_age);
        set(&mut self.http.max_body_bytes, &cli.max_body_bytes);
        set(&mut self.http.body_timeout, &cli.body_timeout);
        set(&mut self.http.sse_keep_alive, &cli.sse_keep_alive);
        set(&mut self.http.sse_retry, &cli.sse_retry);
        set(&mut self.http.sse_close_after, &cli.sse_close_after);
        set(&mut self.http.post_response, &cli.post_response);
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        self.session.validate("session")?;
        self.upstream.validate("upstream")?;
        self.validate_store()?;
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
        let node = &self.cluster.node_id;
        if !node.is_empty() && !crate::session::id::is_node_name(node) {
            bail!(
                "cluster.node_id: {node:?} must be 1 to {} letters, digits, '-' and '_' (it \
                 becomes part of session ids)",
                crate::session::id::MAX_NODE_NAME
            );
        }
        if !self.cluster.advertise.is_empty() {
            parse_http_url(&self.cluster.advertise)
                .map_err(|e| anyhow::anyhow!("cluster.advertise: {e}"))?;
        }
        Ok(())
    }

    /// Whether `/mcp` serves a server of its own: always without named servers; with them, only
    /// when the top-level `[upstream]` names one.
    pub fn serves_default(&self) -> bool {
        self.servers.is_empty() || self.upstream.names_a_server()
    }

    /// The server sessions on `/mcp` get.
    pub fn upstream_spec(&self) -> anyhow::Result<UpstreamSpec> {
        self.upstream.spec()
    }

    pub fn session_settings(&self) -> SessionSettings {
        SessionSettings {
            cache_lists: self.upstream.caches_lists(),
            request_timeout: self.upstream.request_timeout,
            ..self.session.settings()
        }
    }

    pub fn http_settings(&self) -> HttpSettings {
        HttpSettings {
            max_body_bytes: self.http.max_body_bytes,
            body_timeout: self.http.body_timeout,
            sse_keep_alive: self.http.sse_keep_alive,
            sse_retry: self.http.sse_retry,
            sse_close_after: self.http.sse_close_after,
            post_response: self.http.post_response,
            json_wait: self.http.json_wait,
            allowed_origins: self.http.allowed_origins.clone(),
            allowed_hosts: self.http.allowed_hosts.clone(),
            loopback_hosts_only: self.listen.ip().is_loopback(),
            principal_header: self.http.principal_header.clone(),
        }
    }
}

impl UpstreamConfig {
    /// Whether the list cache is on, explicitly or by the isolation's default.
    pub fn caches_lists(&self) -> bool {
        let shared_stdio =
            self.isolation == Isolation::Shared && self.http.is_none() && self.sse.is_none();
        self.cache_lists.unwrap_or(shared_stdio)
    }

    fn names_a_server(&self) -> bool {
        self.stdio.is_some() || self.http.is_some() || self.sse.is_some()
    }

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
        Ok(())
    }

    /// The server sessions get: the configured HTTP, SSE or stdio server, else this binary's
    /// demo server.
    pub fn spec(&self) -> anyhow::Result<UpstreamSpec> {
        let http = |url: &str| -> anyhow::Result<HttpSpec> {
            Ok(HttpSpec {
                url: parse_http_url(url)?,
                request_timeout: self.request_timeout,
                max_event_bytes: self.max_line_bytes,
                forward_authorization: self.forward_authorization,
            })
        };
        match (&self.http, &self.sse) {
            (Some(url), _) => Ok(UpstreamSpec::Http(http(url)?)),
            (None, Some(url)) => Ok(UpstreamSpec::Sse(http(url)?)),
            (None, None) => match self.isolation {
                Isolation::PerSession => self.stdio_spec().map(UpstreamSpec::Stdio),
                Isolation::Shared => self.stdio_spec().map(UpstreamSpec::SharedStdio),
            },
        }
    }

    /// The stdio server to run: the configured command, or this binary's demo server.
    pub fn stdio_spec(&self) -> anyhow::Result<StdioSpec> {
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
        spec.shutdown_grace = self.shutdown_grace;
        spec.warm = self.warm;
        Ok(spec)
    }
}

impl SessionConfig {
    fn validate(&self, key: &str) -> anyhow::Result<()> {
        let positive = [
            ("max_sessions", self.max_sessions),
            ("window_events", self.window_events),
            ("window_bytes", self.window_bytes),
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

    pub fn settings(&self) -> SessionSettings {
        SessionSettings {
            window: Window {
                max_events: self.window_events,
                max_bytes: self.window_bytes,
                max_age: self.window_age,
            },
            idle_ttl: self.idle_ttl,
            max_sessions: self.max_sessions,
            max_sessions_per_principal: self.max_sessions_per_principal,
            coalesce_progress: self.coalesce_progress,
            cache_lists: false,
            request_timeout: UpstreamConfig::default().request_timeout,
        }
    }
}

/// An `http://` URL with a host (the proxy speaks plain HTTP to its upstreams).
fn parse_http_url(url: &str) -> anyhow::Result<http::Uri> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| anyhow::anyhow!("upstream URL {url:?} is not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        bail!("upstream URL {url:?} must be an http:// URL with a host");
    }
    Ok(uri)
}

/// Parses `250ms`, `15s`, `10m`, `1h` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 250ms, 15s, 10m or 1h"))?;
    let scaled = |per: u64| {
        number
            .checked_mul(per)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{text:?} is too long a duration"))
    };
    match unit.trim() {
        "ms" => Ok(Duration::from_millis(number)),
        "" | "s" => scaled(1),
        "m" => scaled(60),
        "h" => scaled(3600),
        _ => Err(format!("{text:?} has an unknown unit (use ms, s, m or h)")),
    }
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(
            parse_duration("307445734561825861m").is_err(),
            "no overflow"
        );
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn reads_a_full_file() {
        let config = Config::from_toml(
            r#"
            listen = "127.0.0.1:9000"
            [upstream]
            stdio = "my-server --flag 'two words'"
            [session]
            idle_ttl = "30s"
            window_events = 16
            [http]
            post_response = "sse"
            "#,
        )
        .unwrap();
        assert_eq!(config.listen.port(), 9000);
        assert_eq!(config.session.idle_ttl, Duration::from_secs(30));
        assert_eq!(config.session.window_events, 16);
        assert_eq!(config.http.post_response, PostResponse::Sse);
        let spec = config.upstream.stdio_spec().unwrap();
        assert_eq!(spec.program, "my-server");
        assert_eq!(spec.args, ["--flag", "two words"]);
    }

    #[test]
    fn names_the_key_and_line_of_a_mistake() {
        let error = Config::from_toml("listen = \"127.0.0.1:1\"\n[session]\nidle_tll = \"1s\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("idle_tll") && error.contains("line 3"),
            "{error}"
        );
        let error = Config::from_toml("[session]\nwindow_events = \"many\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("window_events") && error.contains("line 2"),
            "{error}"
        );
        let error = Config::from_toml("[session]\nwindow_events = 0\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("session.window_events"), "{error}");
        let error = Config::from_toml("[session]\nidle_ttl = \"soon\"\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("idle_ttl"), "{error}");
    }

    #[test]
    fn the_shipped_example_is_valid_and_states_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/proxy.toml");
        let example = Config::from_file(&path).unwrap();
        let defaults = Config::default();
        assert_eq!(format!("{example:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn gateway_servers_are_checked_and_named_in_messages() {
        let config = Config::from_toml(
            "[servers.a.upstream]\nhttp = \"http://127.0.0.1:1/mcp\"\n[servers.b.session]\nwindow_events = 3\n",
        )
        .unwrap();
        assert!(
            !config.serves_default(),
            "no top-level server: /mcp serves nothing"
        );
        assert_eq!(
            config.servers["b"].session.as_ref().unwrap().window_events,
            3
        );
        let error = Config::from_toml("[servers.a.upstream]\nhttp = \"ftp://x\"\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("servers.a.upstream"), "{error}");
        let error = Config::from_toml("[servers.a.session]\nmax_sessions = 0\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("servers.a.session.max_sessions"), "{error}");
        let error = Config::from_toml("[servers.\"a b\".upstream]\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("servers.a b"), "{error}");
        let error = Config::from_toml("[servers.a]\nstdio = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("stdio") && error.contains("line 2"),
            "{error}"
        );
    }

    #[test]
    fn every_shipped_example_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        let mut loaded = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Config::from_file(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
                loaded += 1;
            }
        }
        assert!(loaded >= 4, "{loaded} examples");
    }

    #[test]
    fn command_line_overrides_the_file() {
        let cli = Cli::parse_from([
            "mcp-session-proxy",
            "--window-events",
            "8",
            "--listen",
            "127.0.0.1:1",
        ]);
        let mut config = Config::from_toml("[session]\nwindow_events = 99\n").unwrap();
        config.apply(&cli);
        assert_eq!(config.session.window_events, 8);
        assert_eq!(config.listen.port(), 1);
    }
}
