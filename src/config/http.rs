//! `[http]`: the client-facing listener: bodies, streams, answers, and who may connect.

use std::path::PathBuf;

use std::time::Duration;

use super::duration::parse_duration;
use super::file::duration;
use super::keys::settings;
use super::parsers::post_response;
use crate::front::settings::{Cidr, HttpSettings, PostResponse};

settings! {
    /// The client-facing HTTP listener.
    pub struct HttpConfig, flags HttpFlags {
        /// Most client connections open at once, WebSocket connections and SSE streams included;
        /// one more is answered 503 with Retry-After and closed (http.max_connections) [default:
        /// 16384].
        #[arg(long, value_name = "N")]
        #[check(positive)]
        pub max_connections: usize = HttpSettings::default().max_connections, set;

        /// Largest POST body accepted; larger ones get 413 [default: 4194304].
        #[arg(long, value_name = "BYTES")]
        #[check(positive)]
        pub max_body_bytes: usize = HttpSettings::default().max_body_bytes, set;

        /// Longest a request body may take to arrive; a slower one gets 408 [default: 10s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded, positive)]
        pub body_timeout: Duration = HttpSettings::default().body_timeout, set;

        /// Longest a request's line and headers may take to arrive; a slower client's connection
        /// is closed unanswered [default: 30s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded, positive)]
        pub header_timeout: Duration = HttpSettings::default().header_timeout, set;

        /// Interval of SSE keep-alive comments on idle streams [default: 15s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded, positive)]
        pub sse_keep_alive: Duration = HttpSettings::default().sse_keep_alive, set;

        /// Reconnection delay announced to 2025-11-25 clients with `retry:` [default: 1s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded)]
        pub sse_retry: Duration = HttpSettings::default().sse_retry, set;

        /// Close the SSE streams of 2025-11-25 clients after this long; they resume with
        /// Last-Event-ID (0s: never) [default: 0s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded)]
        pub sse_close_after: Duration = HttpSettings::default().sse_close_after, set;

        /// How a POSTed request is answered: auto (JSON if the response is ready first, else SSE),
        /// sse, json [default: auto].
        #[arg(long, value_name = "MODE", value_parser = post_response())]
        pub post_response: PostResponse = HttpSettings::default().post_response, set;

        /// With --post-response auto: how long to wait for a response before answering with a
        /// stream instead of JSON [default: 1s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded)]
        pub json_wait: Duration = HttpSettings::default().json_wait, set;

        /// An Origin to allow besides loopback ones (exact, or `*`); repeatable [default: none].
        #[arg(long = "allowed-origin", value_name = "ORIGIN")]
        pub allowed_origins: Vec<String> = Vec::new(), list(Vec<String>);

        /// A Host to allow (host or host:port, or `*`); repeatable, or a comma-separated list in
        /// MCP_PROXY_ALLOWED_HOSTS [default: loopback names when listening on loopback, else any].
        #[arg(
            long = "allowed-host",
            value_name = "HOST",
            env = "MCP_PROXY_ALLOWED_HOSTS",
            value_delimiter = ','
        )]
        pub allowed_hosts: Vec<String> = Vec::new(), trimmed(Vec<String>);

        /// A header, set by a trusted authenticating proxy in front, that names the principal
        /// owning a session [default: none: a digest of Authorization].
        #[arg(long, value_name = "HEADER")]
        pub principal_header: Option<String> = None, some(Option<String>);

        /// A peer (network, CIDR: 10.0.0.0/8, ::1/128) that may send the principal header: a
        /// balancer or the authenticating gateway; repeatable, or a comma-separated list in
        /// MCP_PROXY_TRUSTED_PROXIES (http.trusted_proxies) [default: loopback peers only].
        #[arg(
            long = "trusted-proxy",
            value_name = "CIDR",
            env = "MCP_PROXY_TRUSTED_PROXIES",
            value_delimiter = ','
        )]
        pub trusted_proxies: Vec<Cidr> = Vec::new(), list(Vec<Cidr>);

        /// A file holding a token the trusted proxy also sends, in x-trusted-proxy-token, with
        /// the principal header: a proof the proxy's own stdio children (which share its
        /// loopback) cannot give [default: none].
        #[arg(long, value_name = "PATH")]
        pub trusted_proxy_token_file: Option<PathBuf> = None, some(Option<PathBuf>);
    }
}
