//! The values the configuration gives the front, and their defaults: declared once in
//! `config`, held here where the configuration may name them without reaching into the
//! front's workings.

use std::time::Duration;

use serde::Deserialize;

pub use super::cidr::Cidr;
use crate::auth::exchange::ExchangeTarget;

/// Which requests get an access line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AccessLog {
    /// Every request (of the share `access_log_sample` keeps; every refused one).
    #[default]
    All,
    /// Requests answered with a status of 400 or more.
    Errors,
    /// None.
    Off,
}

/// How a POST that carries a request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PostResponse {
    /// JSON when the response is the first thing ready within `json_wait`, else SSE.
    Auto,
    /// Always an SSE stream.
    Sse,
    /// Always waits for the response and answers JSON (server messages before it wait in the
    /// log for a GET stream resume).
    Json,
}

/// HTTP-facing settings.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub max_body_bytes: usize,
    /// Longest a request body may take to arrive; then 408.
    pub body_timeout: Duration,
    /// Longest a request's line and headers may take to arrive; then the connection is closed.
    pub header_timeout: Duration,
    pub sse_keep_alive: Duration,
    pub sse_retry: Duration,
    /// Close streams of 2025-11-25 clients after this long (zero: never).
    pub sse_close_after: Duration,
    pub post_response: PostResponse,
    pub json_wait: Duration,
    /// Extra allowed `Origin` values (exact, or `*`); loopback origins are always allowed.
    pub allowed_origins: Vec<String>,
    /// Allowed `Host` values (host or host:port, or `*`); empty: see `loopback_hosts_only`.
    pub allowed_hosts: Vec<String>,
    /// With no `allowed_hosts`: accept only loopback Host names (set when listening on a
    /// loopback address, against DNS rebinding).
    pub loopback_hosts_only: bool,
    /// A header set by a trusted authenticating proxy that names the principal; without it,
    /// the principal is a digest of `Authorization`.
    pub principal_header: Option<String>,
    /// The peers that may send `principal_header` (empty: loopback peers only); from anyone
    /// else it is refused.
    pub trusted_proxies: Vec<Cidr>,
    /// What a trusted proxy also sends (`x-trusted-proxy-token`) before its principal header
    /// is taken: `http.trusted_proxy_token_file`.
    pub trusted_proxy_token: Option<ProxyToken>,
    /// Client connections open at once; one more is answered 503 and closed.
    pub max_connections: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            max_body_bytes: 4 << 20,
            body_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(30),
            sse_keep_alive: Duration::from_secs(15),
            sse_retry: Duration::from_secs(1),
            sse_close_after: Duration::ZERO,
            post_response: PostResponse::Auto,
            json_wait: Duration::from_secs(1),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            loopback_hosts_only: true,
            principal_header: None,
            trusted_proxies: Vec::new(),
            trusted_proxy_token: None,
            max_connections: 16_384,
        }
    }
}

/// The header a trusted proxy proves itself by, with `http.trusted_proxy_token_file`.
pub const TRUSTED_PROXY_TOKEN: &str = "x-trusted-proxy-token";

/// The token a trusted proxy sends, kept as its digest: a request's is compared digest to
/// digest, so the time taken says nothing of the token.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyToken([u8; 32]);

impl ProxyToken {
    pub fn new(token: &str) -> ProxyToken {
        use sha2::Digest;
        ProxyToken(sha2::Sha256::digest(token.as_bytes()).into())
    }

    /// Whether `headers` carry the token, once.
    pub fn proven_by(&self, headers: &http::HeaderMap) -> bool {
        let mut sent = headers.get_all(TRUSTED_PROXY_TOKEN).iter();
        match (sent.next(), sent.next()) {
            (Some(token), None) => {
                use sha2::Digest;
                let digest: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
                digest == self.0
            }
            _ => false,
        }
    }
}

impl std::fmt::Debug for ProxyToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProxyToken(..)")
    }
}

/// Who may reuse a cached result: anyone (`public`), or the same credential (`private`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CacheScope {
    Public,
    #[default]
    Private,
}

/// What a served server gets of a verified client's token, in place of its `Authorization`.
#[derive(Debug, Clone, Default)]
pub enum UpstreamCredentials {
    /// Nothing (the server may get a header of the operator's instead).
    #[default]
    Withheld,
    /// The token itself, when its audience names the server's resource (else 401).
    Passthrough { resource: String },
    /// A token for the server, exchanged for the client's at the issuer.
    Exchange(ExchangeTarget),
    /// A virtual server's: each member's own (by name), made for it as for its own path.
    Members(Vec<(String, UpstreamCredentials)>),
}
