//! The configuration as the TOML file spells it: its top-level keys and the tables declared
//! beside it (`cluster`, `upstream`, `session`, `http`, `auth`, …), and how a duration is read.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use clap::ValueEnum;
use serde::{Deserialize, Deserializer};

use super::duration::parse_duration;
use super::exposure::{
    LimitsConfig, LimitsFlags, PromptsConfig, PromptsFlags, ResourcesConfig, ResourcesFlags,
    ToolsConfig, ToolsFlags,
};
use super::keys::settings;
use super::parsers::access_log;
use super::tls::{ListenerTlsConfig, ListenerTlsFlags};
use super::{
    AuthConfig, AuthFlags, ClusterConfig, ClusterFlags, HttpConfig, HttpFlags, SessionConfig,
    SessionFlags, TracingConfig, TracingFlags, UpstreamConfig, UpstreamFlags,
};
use crate::front::settings::AccessLog;

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

settings! {
    /// The whole configuration, as the TOML file spells it.
    pub struct Config, flags ConfigFlags {
        /// Address to listen on [default: 127.0.0.1:8787].
        #[arg(long, value_name = "ADDR")]
        pub listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 8787)), set;

        /// Log format [default: text].
        #[arg(long, value_name = "FORMAT")]
        pub log_format: LogFormat = LogFormat::Text, set;

        /// Which requests get an access line: all, errors (status 400 or more) or off [default:
        /// all].
        #[arg(long, value_name = "WHICH", value_parser = access_log())]
        pub access_log: AccessLog = AccessLog::All, set;

        /// With --access-log all: the share of requests answered below 400 that get their line, 0
        /// to 1 (0.1: one in ten; every error gets one) [default: 1].
        #[arg(long, value_name = "SHARE")]
        pub access_log_sample: f64 = 1.0, set;

        /// On SIGTERM, how long to serve on, unready (/readyz 503) and closing connections after
        /// their current exchange, before handing sessions over [default: 5s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded)]
        pub drain_delay: Duration = Duration::from_secs(5), set;

        /// On SIGTERM or SIGINT: the longest the proxy takes to stop (requests in flight get half of
        /// it to be answered), release every server and exit [default: 10s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded)]
        pub shutdown_timeout: Duration = Duration::from_secs(10), set;

        /// Threads serving connections: 0 = one per CPU; 1 = a single-threaded runtime, the least
        /// CPU per request (no cross-thread wake-ups), for sidecars [default: 0].
        #[arg(long, value_name = "N")]
        pub workers: usize = 0, set;

        /// Where session state lives: `memory` (this process only), or a Redis store that
        /// replicas behind a balancer share sessions through: `redis://host:port/db`
        /// (`rediss://` over TLS), `redis+sentinel://host:port,host:port/<service>[/<db>]`,
        /// `redis+cluster://host:port,host:port` (`rediss+sentinel://`, `rediss+cluster://`); a
        /// password (`redis://:PASSWORD@host…`) belongs in MCP_PROXY_STORE or the configuration
        /// file, not on the command line [default: memory].
        #[arg(long, value_name = "URL", env = "MCP_PROXY_STORE", hide_env_values = true)]
        pub store: String = "memory".into(), set;

        /// The listener over TLS: its certificate, and the CA clients' certificates must come
        /// from (mutual TLS).
        #[command(flatten)]
        pub tls: ListenerTlsConfig = ListenerTlsConfig::default(), section(ListenerTlsFlags);

        /// Replicas sharing sessions through a Redis store.
        #[command(flatten)]
        pub cluster: ClusterConfig = ClusterConfig::default(), section(ClusterFlags);

        /// The server fronted on `/mcp`, and how.
        #[command(flatten)]
        pub upstream: UpstreamConfig = UpstreamConfig::default(), section(UpstreamFlags);

        /// Sessions: their limits, replay window, and the sessions clients name.
        #[command(flatten)]
        pub session: SessionConfig = SessionConfig::default(), section(SessionFlags);

        /// Spans exported over OTLP/HTTP.
        #[command(flatten)]
        pub tracing: TracingConfig = TracingConfig::default(), section(TracingFlags);

        /// The client-facing HTTP listener.
        #[command(flatten)]
        pub http: HttpConfig = HttpConfig::default(), section(HttpFlags);

        /// Which of the default server's tools clients see, and under which names.
        #[command(flatten)]
        pub tools: ToolsConfig = ToolsConfig::default(), section(ToolsFlags);

        /// Which of the default server's prompts clients see, and under which names.
        #[command(flatten)]
        pub prompts: PromptsConfig = PromptsConfig::default(), section(PromptsFlags);

        /// Which of the default server's resources clients see, by URI.
        #[command(flatten)]
        pub resources: ResourcesConfig = ResourcesConfig::default(), section(ResourcesFlags);

        /// Requests per second per principal (and per principal and tool), for every served
        /// server.
        #[command(flatten)]
        pub limits: LimitsConfig = LimitsConfig::default(), section(LimitsFlags);

        /// The proxy as an OAuth 2.1 resource server: tokens from this issuer on every request.
        #[command(flatten)]
        pub auth: AuthConfig = AuthConfig::default(), section(AuthFlags);

        /// Gateway mode: named servers, each at `/servers/<name>/mcp` (and `/sse`).
        #[arg(skip)]
        pub servers: BTreeMap<String, ServerConfig> = BTreeMap::new(),
            named_sections(ServerFlags);

        /// Virtual servers: each one endpoint at `/servers/<name>/mcp` composing several named
        /// servers with one session, their tools and prompts seen as
        /// `<member><separator><name>`.
        #[arg(skip)]
        pub r#virtual: BTreeMap<String, VirtualConfig> = BTreeMap::new(),
            named_sections(VirtualFlags);
    }
}

settings! {
    /// One virtual server: named servers composed into one endpoint.
    pub struct VirtualConfig, flags VirtualFlags {
        /// Its members, names of `[servers.<name>]`, in order: the first wins a name two offer
        /// [default: none].
        #[arg(skip)]
        pub servers: Vec<String> = Vec::new(), none(());

        /// Between a member's name and its tools' and prompts' names [default: __].
        #[arg(skip)]
        pub separator: String = "__".to_owned(), none(());

        /// Also served at `/mcp` [default: false].
        #[arg(skip)]
        pub default: bool = false, none(());

        /// Which composed tools clients see, and under which names (after the members' own
        /// rules) [default: all, as named].
        #[arg(skip)]
        pub tools: ToolsConfig = ToolsConfig::default(), none(());

        /// Which composed prompts clients see, and under which names [default: all, as named].
        #[arg(skip)]
        pub prompts: PromptsConfig = PromptsConfig::default(), none(());

        /// Which resources clients see, by URI [default: all].
        #[arg(skip)]
        pub resources: ResourcesConfig = ResourcesConfig::default(), none(());
    }
}

settings! {
    /// One named server of a gateway.
    pub struct ServerConfig, flags ServerFlags {
        /// Served at its own path (`/servers/<name>/mcp`); false: only as a member of virtual
        /// servers [default: true].
        #[arg(skip)]
        pub serve: bool = true, none(());

        /// Its server [default: the top-level `[upstream]`'s defaults].
        #[arg(skip)]
        pub upstream: UpstreamConfig = UpstreamConfig::default(), none(());

        /// Its own session limits and window [default: the top-level `[session]`].
        #[arg(skip)]
        pub session: Option<SessionConfig> = None, none(());

        /// Which of its tools clients see, and under which names [default: all, as named].
        #[arg(skip)]
        pub tools: ToolsConfig = ToolsConfig::default(), none(());

        /// Which of its prompts clients see, and under which names [default: all, as named].
        #[arg(skip)]
        pub prompts: PromptsConfig = PromptsConfig::default(), none(());

        /// Which of its resources clients see, by URI [default: all].
        #[arg(skip)]
        pub resources: ResourcesConfig = ResourcesConfig::default(), none(());
    }
}

pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}
