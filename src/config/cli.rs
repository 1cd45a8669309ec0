//! The command line: every option of the TOML file, the demo server and health subcommands.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

use super::duration::parse_duration;
use super::file::{Isolation, LogFormat};
use crate::front::access::AccessLog;
use crate::front::PostResponse;

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

    /// The revision the server speaks: legacy (2024-11-05 … 2025-11-25), 2026-07-28 (its
    /// legacy clients are bridged to it) or auto (asked once at start) [default: auto].
    #[arg(long, value_name = "REVISION")]
    pub upstream_protocol: Option<crate::wire::era::Era>,

    /// How requests without a data-layer session find their server session: principal, or
    /// handle (also offer state handles: tools to open and close one, and a session_handle
    /// argument on every tool) [default: principal].
    #[arg(long, value_name = "RULE")]
    pub correlation: Option<super::file::Correlation>,

    /// Requests that reach the server's state must name a data-layer session
    /// (sessions/create); without one they get -32044 (true/false) [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub require_session: Option<bool>,

    /// stdio, per-session: children kept started ahead of sessions, so initialize does not
    /// wait for process start-up [default: 0].
    #[arg(long, value_name = "N")]
    pub warm: Option<usize>,

    /// stdio: a variable set in the child's environment, NAME=VALUE (repeatable) [default:
    /// none].
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env_pair)]
    pub env: Vec<(String, String)>,

    /// stdio: the child inherits only the variables --env-pass names (true/false) [default:
    /// false: it inherits the proxy's environment, less the proxy's own secrets].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub env_clear: Option<bool>,

    /// stdio, with --env-clear: a variable of the proxy's environment the child inherits
    /// (repeatable; never one of the proxy's secrets) [default: none].
    #[arg(long, value_name = "NAME")]
    pub env_pass: Vec<String>,

    /// stdio: the user the servers run as, a name or a number; the proxy must be root or hold
    /// CAP_SETUID, CAP_SETGID and CAP_KILL [default: the proxy's].
    #[arg(long, value_name = "USER")]
    pub upstream_user: Option<String>,

    /// stdio: the group the servers run as, a name or a number; they keep no supplementary
    /// groups [default: the user's own].
    #[arg(long, value_name = "GROUP")]
    pub upstream_group: Option<String>,

    /// Answer list requests from a per-server, per-principal cache (true/false) [default: on for
    /// shared isolation, off otherwise].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub cache_lists: Option<bool>,

    /// With --http or --sse: send the session creator's Authorization to the server
    /// (true/false) [default: false: client credentials never leave the proxy].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub forward_authorization: Option<bool>,

    /// 2026-07-28 clients: how long they may reuse list, read and discover results (ttlMs)
    /// [default: 0s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub cache_ttl: Option<Duration>,

    /// 2026-07-28 clients: who may reuse them: private (one credential) or public (anyone: only
    /// for servers whose lists and resources are the same for every user) [default: private].
    #[arg(long, value_name = "SCOPE")]
    pub cache_scope: Option<crate::front::modern::envelope::CacheScope>,

    /// HTTP servers: send the trace context as traceparent/tracestate headers too (true/false)
    /// [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub trace_headers: Option<bool>,

    /// Longest a request waits for its server without hearing of it (a response, or progress, a
    /// message or a request on its stream); then the client gets an error and the server a
    /// cancellation. HTTP upstreams: also the longest wait for an answer to begin, then to end;
    /// stdio: for a write to the child's stdin (one that stops reading is killed) [default: 60s].
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

    /// Largest message accepted from a server: a stdio line, an SSE event, an HTTP answer's body
    /// [default: 4194304].
    #[arg(long, value_name = "BYTES")]
    pub max_line_bytes: Option<usize>,

    /// On release of a stdio server: close stdin, wait this long, SIGTERM, wait again, SIGKILL
    /// [default: 2s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub shutdown_grace: Option<Duration>,

    /// Let a newer progress notification replace an undelivered older one of the same token
    /// (true/false) [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub coalesce_progress: Option<bool>,

    /// 2026-07-28 requests with no principal: an upstream session each (per-request), or one
    /// shared by all (shared: only for servers that keep nothing per client) [default:
    /// per-request].
    #[arg(long, value_name = "MODE")]
    pub anonymous: Option<crate::session::correlate::Anonymous>,

    /// 2026-07-28 clients: how long a call held for the client's input waits for its retry
    /// [default: 5m].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub input_ttl: Option<Duration>,

    /// 2026-07-28 clients: calls one principal may have waiting for its input at once; more are
    /// refused (429) [default: 32].
    #[arg(long, value_name = "N")]
    pub max_held_per_principal: Option<usize>,

    /// A data-layer session or handle ends after this long unused [default: 30m].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub data_session_idle_ttl: Option<Duration>,

    /// And at the latest this long after it was created [default: 24h].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub data_session_lifetime: Option<Duration>,

    /// Data-layer sessions and handles one principal may hold (per replica) [default: 32].
    #[arg(long, value_name = "N")]
    pub max_data_sessions_per_principal: Option<usize>,

    /// The longest state a data-layer session's cookie may carry, in bytes [default: 4096].
    #[arg(long, value_name = "N")]
    pub max_session_state_bytes: Option<usize>,

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
    #[arg(long, value_name = "MODE", value_parser = post_response())]
    pub post_response: Option<PostResponse>,

    /// With --post-response auto: how long to wait for a response before answering with a
    /// stream instead of JSON [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub json_wait: Option<Duration>,

    /// Requests one principal may send per second, on average, to each served server (a
    /// second's worth at once); over it: 429 with Retry-After (limits.requests_per_second)
    /// [default: 0, no limit].
    #[arg(long = "rate-limit", value_name = "N")]
    pub rate_limit: Option<f64>,

    #[command(flatten)]
    pub auth: super::auth_flags::AuthFlags,

    /// Only the default server's tools matching this glob (`*`, `?`) are seen by clients;
    /// repeatable (tools.allow) [default: all].
    #[arg(long = "allow-tool", value_name = "GLOB")]
    pub allow_tools: Vec<String>,

    /// The default server's tools matching this glob are never seen by clients, nor called;
    /// repeatable (tools.deny) [default: none].
    #[arg(long = "deny-tool", value_name = "GLOB")]
    pub deny_tools: Vec<String>,

    /// Only the default server's resources whose URI matches this glob (`*`, `?`) are seen by
    /// clients; repeatable (resources.allow) [default: all].
    #[arg(long = "allow-resource", value_name = "GLOB")]
    pub allow_resources: Vec<String>,

    /// The default server's resources whose URI matches this glob are never seen by clients,
    /// nor read or subscribed to; repeatable (resources.deny) [default: none].
    #[arg(long = "deny-resource", value_name = "GLOB")]
    pub deny_resources: Vec<String>,

    /// An Origin to allow besides loopback ones (exact, or `*`); repeatable [default: none].
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,

    /// A Host to allow (host or host:port, or `*`); repeatable, or a comma-separated list in
    /// MCP_PROXY_ALLOWED_HOSTS [default: loopback names when listening on loopback, else any].
    #[arg(
        long = "allowed-host",
        value_name = "HOST",
        env = "MCP_PROXY_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,

    /// A header, set by a trusted authenticating proxy in front, that names the principal
    /// owning a session [default: none: a digest of Authorization].
    #[arg(long, value_name = "HEADER")]
    pub principal_header: Option<String>,

    /// A peer (network, CIDR: 10.0.0.0/8, ::1/128) that may send the principal header: a
    /// balancer or the authenticating gateway; repeatable, or a comma-separated list in
    /// MCP_PROXY_TRUSTED_PROXIES (http.trusted_proxies) [default: loopback peers only].
    #[arg(
        long = "trusted-proxy",
        value_name = "CIDR",
        env = "MCP_PROXY_TRUSTED_PROXIES",
        value_delimiter = ','
    )]
    pub trusted_proxies: Vec<crate::front::cidr::Cidr>,

    /// Most sessions one principal with a credential (or a trusted principal header) may hold,
    /// on all the replicas sharing a Redis store together; more are refused with 503
    /// [default: 100].
    #[arg(long, value_name = "N")]
    pub max_sessions_per_principal: Option<usize>,

    /// Most sessions clients without a credential may hold together (they are one principal,
    /// the anonymous one), on each replica; more are refused with 503 [default: 256].
    #[arg(long, value_name = "N")]
    pub max_anonymous_sessions: Option<usize>,

    /// 2026-07-28 requests without a credential, in front of a stdio server with a child per
    /// session: sessions started and initialized ahead of them, each serving one request and
    /// then ended and replaced (0: a child started and stopped per request) [default: 4].
    #[arg(long, value_name = "N")]
    pub anonymous_pool: Option<usize>,

    /// How long such a request waits for a pooled session to be ready; then 503 with
    /// Retry-After [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub anonymous_pool_wait: Option<Duration>,

    /// Pooled sessions go back to the pool after their request and serve the next ones
    /// (true/false): the server's process, and whatever state it keeps, is then shared by every
    /// client without a credential; only for servers that keep no per-client state [default:
    /// false: a session serves one request].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub anonymous_pool_reuse: Option<bool>,

    /// Most resources one session may be subscribed to at once (and 1 MiB of their URIs); a
    /// resources/subscribe to one more is refused with -32602 [default: 1000].
    #[arg(long, value_name = "N")]
    pub max_subscriptions: Option<usize>,

    /// Most requests one session may have in flight to its server at once (WebSocket clients
    /// pipeline without waiting); one more is refused with 503 and Retry-After without
    /// reaching the server (session.max_inflight) [default: 256].
    #[arg(long, value_name = "N")]
    pub max_inflight: Option<usize>,

    /// Most client connections open at once, WebSocket connections and SSE streams included;
    /// one more is answered 503 with Retry-After and closed (http.max_connections) [default:
    /// 16384].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,

    /// Log format [default: text].
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,

    /// Which requests get an access line: all, errors (status 400 or more) or off [default:
    /// all].
    #[arg(long, value_name = "WHICH", value_parser = access_log())]
    pub access_log: Option<AccessLog>,

    /// With --access-log all: the share of requests answered below 400 that get their line, 0
    /// to 1 (0.1: one in ten; every error gets one) [default: 1].
    #[arg(long, value_name = "SHARE")]
    pub access_log_sample: Option<f64>,

    /// On SIGTERM or SIGINT: the longest the proxy takes to stop (requests in flight get half of
    /// it to be answered), release every server and exit [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub shutdown_timeout: Option<Duration>,

    /// On SIGTERM, how long to serve on, unready (/readyz 503) and closing connections after
    /// their current exchange, before handing sessions over [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub drain_delay: Option<Duration>,

    /// Where session state lives: `memory` (this process only) or `redis://host:port/db`
    /// (replicas behind a balancer share sessions); a password (`redis://:PASSWORD@host…`)
    /// belongs in MCP_PROXY_STORE or the configuration file, not on the command line
    /// [default: memory].
    #[arg(
        long,
        value_name = "URL",
        env = "MCP_PROXY_STORE",
        hide_env_values = true
    )]
    pub store: Option<String>,

    /// With a Redis store: this replica's name [default: a random one].
    #[arg(long, value_name = "NAME")]
    pub node_id: Option<String>,

    /// With a Redis store: the base URL the other replicas reach this one at [default:
    /// http://<listen>].
    #[arg(long, value_name = "URL")]
    pub advertise: Option<String>,

    /// With a Redis store: the secret the replicas share to authenticate their internal requests.
    /// Give it in MCP_PROXY_CLUSTER_SECRET or --cluster-secret-file: on the command line every
    /// local user can read it.
    #[arg(
        long,
        value_name = "SECRET",
        env = "MCP_PROXY_CLUSTER_SECRET",
        hide_env_values = true
    )]
    pub cluster_secret: Option<String>,

    /// With a Redis store: the file holding that secret (its first line), e.g. a mounted
    /// Kubernetes or Docker secret.
    #[arg(long, value_name = "PATH")]
    pub cluster_secret_file: Option<PathBuf>,

    /// With a Redis store: the prefix of every key, so that deployments can share one Redis
    /// [default: mcp-proxy].
    #[arg(long, value_name = "PREFIX")]
    pub namespace: Option<String>,

    /// With a Redis store: how often this replica tells the others it is alive [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub heartbeat: Option<Duration>,

    /// With a Redis store: how long a silent replica has until its sessions are taken over
    /// [default: 3s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub owner_timeout: Option<Duration>,

    /// With a Redis store: how long a request for a session whose owner cannot be reached is
    /// held while the owner is found dead and the session taken over, instead of a 503
    /// [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub takeover_wait: Option<Duration>,

    /// With a Redis store: how long this replica's writes wait to go to Redis together; what a
    /// later write undoes within it is never sent (0: each write at once) [default: 1ms].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub write_delay: Option<Duration>,

    /// With a Redis store: writes queued for Redis at most; past it, new sessions and requests
    /// wait, and the servers whose messages are queued are not read until there is room
    /// [default: 50000].
    #[arg(long, value_name = "N")]
    pub max_write_queue: Option<usize>,

    /// With a Redis store: nonces of the hops taken from other replicas kept at most, for the
    /// 30 s a hop's signature is valid, so that none is taken twice; past it, hops are refused
    /// (503) until older ones expire [default: 1000000].
    #[arg(long, value_name = "N")]
    pub max_hop_nonces: Option<usize>,

    /// The OTLP/HTTP collector spans are exported to (`http://host:4318`; `/v1/traces` is
    /// added) [default: none: tracing off].
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// service.name of every span [default: OTEL_SERVICE_NAME, else mcp-session-proxy].
    #[arg(long, value_name = "NAME")]
    pub service_name: Option<String>,

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
        /// `legacy` (2024-11-05 … 2025-11-25, initialized first) or `2026-07-28` (modern only:
        /// no initialize, per-request metadata, subscriptions/listen, input_required).
        #[arg(long, default_value = "legacy")]
        protocol: crate::wire::era::Era,
    },
    /// Ask a running proxy whether it is alive: GET its /healthz and exit 0 on a 2xx answer, 1
    /// on anything else or none within --timeout (a container's health check).
    Health {
        /// The endpoint asked (plain HTTP; /readyz asks whether it takes traffic).
        #[arg(
            long,
            value_name = "URL",
            default_value = "http://127.0.0.1:8787/healthz"
        )]
        url: String,
        /// The Host header sent: the proxy refuses names it does not allow, health checks
        /// included [default: the first of MCP_PROXY_ALLOWED_HOSTS, as the proxy reads it,
        /// unless `*`; else the URL's host and port].
        #[arg(long, value_name = "HOST")]
        host: Option<String>,
        /// The hosts the proxy allows, as it reads them (repeatable, or a comma-separated list
        /// in MCP_PROXY_ALLOWED_HOSTS): the default Host is the first.
        #[arg(
            long = "allowed-host",
            value_name = "HOST",
            env = "MCP_PROXY_ALLOWED_HOSTS",
            value_delimiter = ','
        )]
        allowed_hosts: Vec<String>,
        /// The longest wait for the whole answer.
        #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
        timeout: Duration,
    },
}

/// An option whose value held a secret on the command line, where every local user can read it
/// (`/proc/<pid>/cmdline`), and where the secret belongs instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExposedSecret {
    pub option: &'static str,
    pub instead: &'static str,
}

impl Cli {
    /// Parses the process's arguments as [`Parser::parse`] does (exiting on an error or
    /// `--help`), and names the options that gave a secret there.
    pub fn parse_noting_exposed_secrets() -> (Cli, Vec<ExposedSecret>) {
        let matches = Cli::command().get_matches();
        let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        let exposed = cli.exposed_secrets(&matches);
        (cli, exposed)
    }

    /// The options of `matches` given on the command line (not by environment) whose value is
    /// or holds a secret: the cluster secret, a password in a URL.
    pub fn exposed_secrets(&self, matches: &ArgMatches) -> Vec<ExposedSecret> {
        let typed = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
        let with_password = |url: &Option<String>| {
            url.as_deref()
                .and_then(crate::telemetry::redact::url_password)
                .is_some()
        };
        let mut exposed = Vec::new();
        if typed("cluster_secret") {
            exposed.push(ExposedSecret {
                option: "--cluster-secret",
                instead: "MCP_PROXY_CLUSTER_SECRET or --cluster-secret-file",
            });
        }
        if typed("store") && with_password(&self.store) {
            exposed.push(ExposedSecret {
                option: "--store",
                instead: "MCP_PROXY_STORE or `store` in the configuration file",
            });
        }
        for (id, option, url) in [("http", "--http", &self.http), ("sse", "--sse", &self.sse)] {
            if typed(id) && with_password(url) {
                exposed.push(ExposedSecret {
                    option,
                    instead: "the configuration file's [upstream]",
                });
            }
        }
        exposed
    }
}

/// `--post-response`: auto, sse or json.
fn post_response() -> impl TypedValueParser<Value = PostResponse> {
    PossibleValuesParser::new(["auto", "sse", "json"]).map(|mode| match mode.as_str() {
        "sse" => PostResponse::Sse,
        "json" => PostResponse::Json,
        _ => PostResponse::Auto,
    })
}

/// `--access-log`: all, errors or off.
fn access_log() -> impl TypedValueParser<Value = AccessLog> {
    PossibleValuesParser::new(["all", "errors", "off"]).map(|which| match which.as_str() {
        "errors" => AccessLog::Errors,
        "off" => AccessLog::Off,
        _ => AccessLog::All,
    })
}

/// `NAME=VALUE`, as `--env` takes it.
fn parse_env_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not NAME=VALUE")),
    }
}
