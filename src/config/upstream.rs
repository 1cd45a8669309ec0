//! `[upstream]`: the server fronted, how it is run or reached, and what it is sent.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::duration::parse_duration;
use super::file::{duration, Isolation};
use super::keys::merge::SecretFlags;
use super::keys::settings;
use super::parsers::{choices, parse_env_pair};
use super::sandbox::{SandboxConfig, SandboxFlags};
use super::tls::{UpstreamTlsConfig, UpstreamTlsFlags};
use super::{SecretSource, UpstreamAuth};
use crate::front::settings::CacheScope;
use crate::session::SessionSettings;
use crate::wire::era::{Era, MODERN_VERSION};

settings! {
    /// The server fronted, and how.
    pub struct UpstreamConfig, flags UpstreamFlags {
        /// Command line of the stdio MCP server to run per session (split like a shell would, never
        /// run by one) [default: the bundled demo server].
        #[arg(long, value_name = "COMMAND", conflicts_with_all = ["http", "sse"])]
        pub stdio: Option<String> = None, some(Option<String>);

        /// URL of a Streamable HTTP MCP server to front instead of a stdio one; each proxy session
        /// gets its own upstream session [default: none].
        #[arg(long, value_name = "URL", conflicts_with = "sse")]
        pub http: Option<String> = None, some(Option<String>);

        /// URL of the SSE endpoint of a legacy (2024-11-05) HTTP+SSE MCP server to front; each proxy
        /// session gets its own stream [default: none].
        #[arg(long, value_name = "URL")]
        pub sse: Option<String> = None, some(Option<String>);

        /// Longest a request waits for its server without hearing of it (a response, or progress, a
        /// message or a request on its stream); then the client gets an error and the server a
        /// cancellation. HTTP upstreams: also the longest wait for an answer to begin, then to end;
        /// stdio: for a write to the child's stdin (one that stops reading is killed) [default: 60s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded, positive)]
        pub request_timeout: Duration = SessionSettings::default().request_timeout, set;

        /// With --http or --sse: send the session creator's Authorization to the server
        /// (true/false) [default: false: client credentials never leave the proxy].
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub forward_authorization: bool = false, set;

        /// What the HTTP server gets to authenticate the proxy's requests: none, static,
        /// passthrough, exchange (upstream.auth) [default: none].
        #[arg(long = "upstream-auth", value_name = "MODE")]
        pub auth: UpstreamAuth = UpstreamAuth::None, set;

        /// static: the header sent (upstream.auth_header) [default: Authorization, as Bearer].
        #[arg(long = "upstream-auth-header", value_name = "NAME")]
        pub auth_header: String = "Authorization".into(), set;

        /// static: where the header's secret is, `{ env = "NAME" }` or `{ file = "/path" }`
        /// (--upstream-auth-secret-env NAME or --upstream-auth-secret-file PATH) [default: none].
        #[command(flatten)]
        pub auth_secret: Option<SecretSource> = None, secret(UpstreamSecretFlags);

        /// passthrough, exchange: the server's resource URL (upstream.auth_resource) [default:
        /// its URL].
        #[arg(long = "upstream-auth-resource", value_name = "URL")]
        pub auth_resource: String = String::new(), set;

        /// exchange: an audience to ask for besides the resource (upstream.auth_audience)
        /// [default: none].
        #[arg(long = "upstream-auth-audience", value_name = "URI")]
        pub auth_audience: String = String::new(), set;

        /// exchange: the scopes to ask for (upstream.auth_scope) [default: the issuer's choice].
        #[arg(long = "upstream-auth-scope", value_name = "SCOPES")]
        pub auth_scope: String = String::new(), set;

        /// exchange: the issuer's token endpoint (upstream.auth_token_endpoint) [default: from
        /// its metadata].
        #[arg(long = "upstream-auth-token-endpoint", value_name = "URL")]
        pub auth_token_endpoint: String = String::new(), set;

        /// Send credentials (forward_authorization, auth) over a plain http:// URL to a server
        /// whose auth_resource is https:// (true/false): only where the network between them is
        /// trusted [default: false: such a configuration is refused at start].
        #[arg(long = "upstream-credentials-over-http", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub credentials_over_http: bool = false, set;

        /// How https:// servers are verified, and the certificate the proxy shows them.
        #[command(flatten)]
        pub tls: UpstreamTlsConfig = UpstreamTlsConfig::default(), section(UpstreamTlsFlags);

        /// stdio: per-session (a child each) or shared (one child for all sessions, for servers that
        /// keep no per-client state) [default: per-session].
        #[arg(long, value_name = "MODE")]
        pub isolation: Isolation = Isolation::PerSession, set;

        /// stdio, with protocol = auto: stop the start when the server's child exits without
        /// answering the probe (else a warning names how it ended, and each session starts it
        /// again) (true/false) [default: false].
        #[arg(
            long = "upstream-require-start",
            value_name = "BOOL",
            num_args = 0..=1,
            default_missing_value = "true"
        )]
        pub require_start: bool = false, set;

        /// stdio, per-session: children kept started ahead of sessions, so initialize does not
        /// wait for process start-up [default: 0].
        #[arg(long, value_name = "N")]
        pub warm: usize = 0, set;

        /// The revision the server speaks: legacy (2024-11-05 … 2025-11-25), 2026-07-28 (its
        /// legacy clients are bridged to it) or auto (asked once at start) [default: auto].
        #[arg(long = "upstream-protocol", value_name = "REVISION", value_parser = choices::<Era>(&["legacy", MODERN_VERSION, "auto"]))]
        pub protocol: Era = Era::Auto, set;

        /// Answer list requests from a per-server, per-principal cache (true/false) [default: on for
        /// shared isolation, off otherwise].
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub cache_lists: Option<bool> = None, some(Option<bool>);

        /// Largest message accepted from a server: a stdio line, an SSE event, an HTTP answer's body
        /// [default: 4194304].
        #[arg(long, value_name = "BYTES")]
        #[check(positive)]
        pub max_line_bytes: usize = 4 << 20, set;

        /// On release of a stdio server: close stdin, wait this long, SIGTERM, wait again, SIGKILL
        /// [default: 2s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded)]
        pub shutdown_grace: Duration = Duration::from_secs(2), set;

        /// stdio: the child inherits only the variables --env-pass names (true/false) [default:
        /// false: it inherits the proxy's environment, less the proxy's own secrets].
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub env_clear: bool = false, set;

        /// stdio, with --env-clear: a variable of the proxy's environment the child inherits
        /// (repeatable; never one of the proxy's secrets) [default: none].
        #[arg(long, value_name = "NAME")]
        pub env_pass: Vec<String> = Vec::new(), list(Vec<String>);

        /// stdio: a variable set in the child's environment, NAME=VALUE (repeatable) [default:
        /// none].
        #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env_pair)]
        pub env: BTreeMap<String, String> = BTreeMap::new(), extend(Vec<(String, String)>);

        /// stdio: the user the servers run as, a name or a number; the proxy must be root or hold
        /// CAP_SETUID, CAP_SETGID and CAP_KILL [default: the proxy's].
        #[arg(long = "upstream-user", value_name = "USER")]
        pub user: String = String::new(), set;

        /// stdio: the group the servers run as, a name or a number; they keep no supplementary
        /// groups [default: the user's own].
        #[arg(long = "upstream-group", value_name = "GROUP")]
        pub group: String = String::new(), set;

        /// stdio: each child runs as a user of its own, an id from this range FIRST-LAST (no
        /// entry in the user database needed; its group: upstream.group, else the same id),
        /// taken while it runs; instead of upstream.user; the proxy must be root or hold
        /// CAP_SETUID, CAP_SETGID and CAP_KILL [default: none].
        #[arg(long = "upstream-user-range", value_name = "FIRST-LAST")]
        pub user_range: String = String::new(), set;

        /// stdio: a capability the children keep, by name (CAP_NET_BIND_SERVICE or
        /// net_bind_service; repeatable): of the proxy's own, for children that run as its user
        /// (not with upstream.user or user_range) [default: none: every child drops them all].
        #[arg(long = "upstream-capability", value_name = "NAME")]
        pub capabilities: Vec<String> = Vec::new(), list(Vec<String>);

        /// stdio: a proxy running as root without upstream.user or user_range runs its children
        /// as root (without capabilities) without warning at start (true/false) [default:
        /// false].
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub allow_root_children: bool = false, set;

        /// How each stdio child is confined.
        #[command(flatten)]
        pub sandbox: SandboxConfig = SandboxConfig::default(), section(SandboxFlags);

        /// 2026-07-28 clients: how long they may reuse list, read and discover results (ttlMs)
        /// [default: 0s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded)]
        pub cache_ttl: Duration = Duration::ZERO, set;

        /// 2026-07-28 clients: who may reuse them: private (one credential) or public (anyone: only
        /// for servers whose lists and resources are the same for every user) [default: private].
        #[arg(long, value_name = "SCOPE")]
        pub cache_scope: CacheScope = CacheScope::Private, set;

        /// HTTP servers: send the trace context as traceparent/tracestate headers too (true/false)
        /// [default: true].
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub trace_headers: bool = true, set;
    }
}

impl UpstreamFlags {
    /// One server is fronted: naming one on the command line replaces the file's (all three
    /// keys), before the flags are applied.
    pub(super) fn replace_server(&self, upstream: &mut UpstreamConfig) {
        if self.stdio.is_some() || self.http.is_some() || self.sse.is_some() {
            upstream.stdio = None;
            upstream.http = None;
            upstream.sse = None;
        }
    }
}

/// `upstream.auth_secret` by where it is.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UpstreamSecretFlags {
    /// static: the environment variable holding the header's secret (upstream.auth_secret =
    /// { env }).
    #[arg(long = "upstream-auth-secret-env", value_name = "NAME")]
    pub upstream_auth_secret_env: Option<String>,

    /// static: the file holding it (upstream.auth_secret = { file }).
    #[arg(long = "upstream-auth-secret-file", value_name = "PATH")]
    pub upstream_auth_secret_file: Option<PathBuf>,
}

impl SecretFlags for UpstreamSecretFlags {
    fn source(&self) -> Option<SecretSource> {
        SecretSource::given(
            &self.upstream_auth_secret_env,
            &self.upstream_auth_secret_file,
        )
    }
}
