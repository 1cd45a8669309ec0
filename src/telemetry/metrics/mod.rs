//! The proxy's Prometheus figures (`prometheus-client`), rendered as OpenMetrics text at
//! `/metrics`: per-server figures carry a `server` label ("default" for `/mcp`, a gateway
//! server's name otherwise), store and span figures are process-wide. No label takes a value a
//! client chooses (methods outside a fixed list count as `other`), so the series stay bounded.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

mod process_wide;
mod reference;
pub use process_wide::{
    AuthMetrics, HopMetrics, HttpMetrics, SandboxMetrics, SpanMetrics, StoreMetrics,
};
pub use reference::reference_markdown;

/// Upper bounds of the latency buckets, in seconds.
const LATENCY_BOUNDS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BOUNDS)
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabel {
    server: Arc<str>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    server: Arc<str>,
    method: &'static str,
    status: u16,
}

/// A virtual server and one of its members.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    server: Arc<str>,
    member: String,
}

/// What befell a virtual server's member, counted by member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberEvent {
    /// It could not be opened or initialized for a session, or went away.
    Down,
    /// It offered a name (or URI) another member before it offered too: not seen.
    NameCollision,
}

/// A virtual server, one of its members, and what that member sent that was not its own.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ViolationLabels {
    server: Arc<str>,
    member: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    server: Arc<str>,
    reason: &'static str,
}

/// Why a new session (or a pooled one for an anonymous request) was refused: the `reason` of
/// `mcp_proxy_sessions_rejected_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `session.max_sessions` open already.
    MaxSessions,
    /// The principal holds `session.max_sessions_per_principal` already.
    PerPrincipal,
    /// Anonymous clients hold `session.max_anonymous_sessions` already.
    Anonymous,
    /// No session of `session.anonymous_pool` was ready for a request within
    /// `anonymous_pool_wait`.
    AnonymousPool,
    /// The shared store is unreachable or too far behind.
    Store,
}

impl Refusal {
    const ALL: [Refusal; 5] = [
        Refusal::MaxSessions,
        Refusal::PerPrincipal,
        Refusal::Anonymous,
        Refusal::AnonymousPool,
        Refusal::Store,
    ];

    fn label(self) -> &'static str {
        match self {
            Refusal::MaxSessions => "max_sessions",
            Refusal::PerPrincipal => "per_principal",
            Refusal::Anonymous => "anonymous",
            Refusal::AnonymousPool => "anonymous_pool",
            Refusal::Store => "store",
        }
    }
}

type PerServer<M> = Family<ServerLabel, M>;
/// Request counters a server's figures keep at hand (the methods and statuses met most: the
/// rest are found in their family).
const MAX_KNOWN_REQUEST_COUNTERS: usize = 64;
/// A gauge of seconds.
type Seconds = Gauge<f64, std::sync::atomic::AtomicU64>;
type Latency = Family<ServerLabel, Histogram, fn() -> Histogram>;

macro_rules! per_server {
    ($($name:ident: $kind:ident, $help:literal;)*) => {
        /// Every per-server family, registered once.
        #[derive(Debug)]
        struct ServerFamilies {
            $($name: PerServer<$kind>,)*
            requests: Family<RequestLabels, Counter>,
            sessions_rejected: Family<RefusalLabels, Counter>,
            request_duration: Latency,
            upstream_duration: Latency,
            members_down: Family<MemberLabels, Counter>,
            member_name_collisions: Family<MemberLabels, Counter>,
            member_violations: Family<ViolationLabels, Counter>,
        }

        /// One server's figures: handles resolved once, so counting is one atomic add.
        #[derive(Debug)]
        pub struct ServerMetrics {
            $(#[doc = $help] pub $name: $kind,)*
            /// Time from a client's request to its response head (for a stream, its start).
            pub request_duration: Histogram,
            /// Time from a request sent to the server to the server's answer.
            pub upstream_duration: Histogram,
            requests: Family<RequestLabels, Counter>,
            /// The counters of `requests` met so far, by method and status: found again
            /// without hashing their labels.
            request_counters: std::sync::Mutex<Vec<(&'static str, u16, Counter)>>,
            members_down: Family<MemberLabels, Counter>,
            member_name_collisions: Family<MemberLabels, Counter>,
            member_violations: Family<ViolationLabels, Counter>,
            /// By `Refusal` (its discriminant is its place in `Refusal::ALL`).
            sessions_rejected: [Counter; Refusal::ALL.len()],
            server: Arc<str>,
        }

        impl ServerFamilies {
            fn register(registry: &mut Registry) -> ServerFamilies {
                let families = ServerFamilies {
                    $($name: Family::default(),)*
                    requests: Family::default(),
                    sessions_rejected: Family::default(),
                    request_duration: Family::new_with_constructor(latency_histogram),
                    upstream_duration: Family::new_with_constructor(latency_histogram),
                    members_down: Family::default(),
                    member_name_collisions: Family::default(),
                    member_violations: Family::default(),
                };
                // The text format names a counter `<name>_total`, and ends each help with a
                // period of its own.
                $(registry.register(
                    stringify!($name).trim_end_matches("_total"),
                    $help.trim_end_matches('.'),
                    families.$name.clone(),
                );)*
                registry.register(
                    "requests",
                    "HTTP requests on MCP endpoints by JSON-RPC method (GET, DELETE for those) and status",
                    families.requests.clone(),
                );
                registry.register(
                    "sessions_rejected",
                    "Session creations refused (503), by reason: max_sessions, per_principal, anonymous (session.max_anonymous_sessions), anonymous_pool (no pooled session ready in time), store",
                    families.sessions_rejected.clone(),
                );
                registry.register(
                    "virtual_members_down",
                    "A virtual server's members that could not be opened or initialized for a session, or went away (each is tried again when next needed), by member",
                    families.members_down.clone(),
                );
                registry.register(
                    "virtual_name_collisions",
                    "Names (and URIs) a virtual server's member offered that a member before it offered too: the first member's is seen, by the member not seen",
                    families.member_name_collisions.clone(),
                );
                registry.register(
                    "virtual_member_violations",
                    "What a virtual server's member sent that was not its own to send, dropped: an answer to a request it was not sent (answer), progress on another member's request (progress), a resources/updated of a URI the session did not subscribe to at it (update), a notification a server may not send or of another's elicitation (notification), a request a server may not make of a client, one as a task, one with an id too long to remember or an elicitation under another member's id (request), a list item no client could read, left out (list); by member and kind",
                    families.member_violations.clone(),
                );
                registry.register(
                    "request_duration_seconds",
                    "Time from a client's request to its response head (for a stream, its start)",
                    families.request_duration.clone(),
                );
                registry.register(
                    "upstream_duration_seconds",
                    "Time from a request sent to the server to the server's answer",
                    families.upstream_duration.clone(),
                );
                families
            }

            fn resolve(&self, server: &str) -> ServerMetrics {
                let label = ServerLabel { server: server.into() };
                ServerMetrics {
                    $($name: self.$name.get_or_create_owned(&label),)*
                    request_duration: self.request_duration.get_or_create_owned(&label),
                    upstream_duration: self.upstream_duration.get_or_create_owned(&label),
                    requests: self.requests.clone(),
                    request_counters: Default::default(),
                    members_down: self.members_down.clone(),
                    member_name_collisions: self.member_name_collisions.clone(),
                    member_violations: self.member_violations.clone(),
                    sessions_rejected: Refusal::ALL.map(|reason| {
                        self.sessions_rejected.get_or_create_owned(&RefusalLabels {
                            server: label.server.clone(),
                            reason: reason.label(),
                        })
                    }),
                    server: label.server,
                }
            }
        }
    };
}

per_server! {
    sessions_open: Gauge, "Sessions currently open.";
    sessions_created_total: Counter, "Sessions created.";
    sessions_expired_total: Counter, "Sessions ended by idle expiry.";
    idle_sweep_looks_total: Counter, "Sessions the idle sweep looked at: those that could have been idle for their TTL by then, and those in use due a look (a few times per TTL), never every session open.";
    deadline_sweep_looks_total: Counter, "Sessions the sweep of request deadlines looked at: those with requests in flight since the sweep before.";
    idle_sweep_seconds: Seconds, "How long the last idle sweep took.";
    events_logged_total: Counter, "Server-to-client messages appended to event logs.";
    events_coalesced_total: Counter, "Logged messages replaced by a later one with the same coalesce key.";
    events_evicted_total: Counter, "Logged messages evicted from a replay window.";
    replays_total: Counter, "Resumptions from a known position (Last-Event-ID, or session/resume inside the window).";
    replay_gaps_total: Counter, "Reads that found messages evicted before delivery.";
    websocket_connections: Gauge, "WebSocket connections open.";
    sessions_forwarded_total: Counter, "Client messages forwarded to the replica owning their session.";
    sessions_taken_over_total: Counter, "Sessions taken over from a replica whose heartbeat lapsed.";
    hop_answers_refused_total: Counter, "Answers of a session's owner to a hop refused here: not signed with the hop key for this very request (altered, or another request's answer), or over their bound.";
    sessions_deposed_total: Counter, "Sessions this replica owned that another replica took over meanwhile (a write refused for a stale owner epoch, or ownership not confirmed after a lapse of the heartbeat): dropped here, served from their new owner.";
    sessions_handed_over_total: Counter, "Sessions this replica handed to another while shutting down.";
    upstream_spawns_total: Counter, "Upstream server processes started.";
    upstream_exits_total: Counter, "Upstream servers that exited on their own.";
    upstream_stderr_lines_dropped_total: Counter, "Lines stdio servers wrote to stderr past what is logged (100 a second, after a burst of 1,000, per child): read and dropped; and warnings of lines on their stdout that are not messages, past a budget of their own.";
    upstream_restarts_total: Counter, "Servers started again for a session whose server had exited, at its next request.";
    upstream_tls_failures_total: Counter, "TLS handshakes with an https:// server that failed: an untrusted issuer, a certificate for another name, expired or not yet valid, a client certificate wanted or refused (the warning logged names which).";
    upstreams_modern: Gauge, "1 when the server speaks 2026-07-28 (configured, found by upstream.protocol = auto, or named by the server when it refused the other revision), bridged for legacy clients.";
    upstream_protocol_switches_total: Counter, "Times the server refused the protocol revision it was sent (-32022) naming the other, which the proxy speaks to it from then on.";
    upstream_foreign_endpoints_total: Counter, "Endpoints a legacy SSE server's stream announced on another origin than the stream's (scheme, host, port): refused, nothing sent there.";
    requests_timed_out_total: Counter, "Requests failed because their server stayed silent past upstream.request_timeout.";
    input_required_held: Gauge, "Calls held for a 2026-07-28 client's retry after input_required.";
    list_cache_hits_total: Counter, "List requests answered from the list cache.";
    list_cache_misses_total: Counter, "Cacheable list requests sent to the server.";
    list_cache_evictions_total: Counter, "List cache entries dropped, least recently used first, to stay within its bounds (entries and bytes).";
    subscriptions_refused_total: Counter, "resources/subscribe refused because the session already held session.max_subscriptions subscriptions (or 1 MiB of subscribed URIs).";
    response_cache_hits_total: Counter, "2026-07-28 requests answered from a result the server (or upstream.cache_ttl) marked reusable (ttlMs, cacheScope).";
    response_cache_misses_total: Counter, "Cacheable 2026-07-28 requests sent to the server.";
    anonymous_pool_ready: Gauge, "Sessions of session.anonymous_pool started, initialized and ready for a 2026-07-28 request without a credential.";
    anonymous_pool_hits_total: Counter, "2026-07-28 requests without a credential served at once by a pooled session ready for them (session.anonymous_pool).";
    rate_limited_requests_total: Counter, "Requests refused (429) because their principal was over limits.requests_per_second.";
    rate_limited_tool_calls_total: Counter, "tools/call requests refused (429) because their principal was over the tool's rate in limits.tools.";
    rate_buckets: Gauge, "Rate-limit buckets (one per principal, and per principal and limited tool) this replica keeps of its own: with a shared store only while it cannot answer; at most 100000.";
    anonymous_pool_misses_total: Counter, "2026-07-28 requests without a credential that found no pooled session ready for them and waited for one (or were refused).";
    requests_inflight: Gauge, "Requests sent to the server and not answered yet, over all of its sessions.";
    requests_inflight_refused_total: Counter, "Requests refused (503) because their session already had session.max_inflight requests in flight.";
    server_requests_unremembered_total: Counter, "Requests of the server (sampling, elicitation, roots) riding a client request while the session already remembered 256 awaiting the client's answer: delivered, but not remembered (the request they ride goes on waiting for its server).";
}

impl ServerMetrics {
    /// The server these figures are of.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Counts a session refused for `reason`.
    pub fn session_refused(&self, reason: Refusal) {
        self.sessions_rejected[reason as usize].inc();
    }

    /// Counts `event` of this virtual server's member `member`.
    pub fn member(&self, member: &str, event: MemberEvent) {
        let labels = MemberLabels {
            server: self.server.clone(),
            member: member.to_owned(),
        };
        let family = match event {
            MemberEvent::Down => &self.members_down,
            MemberEvent::NameCollision => &self.member_name_collisions,
        };
        family.get_or_create(&labels).inc();
    }

    /// Counts what this virtual server's member `member` sent that was not its own (`kind`).
    pub fn member_violation(&self, member: &str, kind: &'static str) {
        let labels = ViolationLabels {
            server: self.server.clone(),
            member: member.to_owned(),
            kind,
        };
        self.member_violations.get_or_create(&labels).inc();
    }

    /// Counts one HTTP request on an MCP endpoint and the time to its response head.
    pub fn record_request(&self, method: &'static str, status: u16, latency: Duration) {
        self.count_request(method, status);
        self.request_duration.observe(latency.as_secs_f64());
    }

    /// Counts a request by `method` answered `status`.
    fn count_request(&self, method: &'static str, status: u16) {
        let mut known = self
            .request_counters
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, counter)) = known.iter().find(|(m, s, _)| *s == status && *m == method) {
            counter.inc();
            return;
        }
        let labels = RequestLabels {
            server: self.server.clone(),
            method,
            status,
        };
        let counter = self.requests.get_or_create(&labels).clone();
        counter.inc();
        if known.len() < MAX_KNOWN_REQUEST_COUNTERS {
            known.push((method, status, counter));
        }
    }
}

/// Every figure of the process, and the registry that renders them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    servers: ServerFamilies,
    pub store: Arc<StoreMetrics>,
    pub spans: SpanMetrics,
    pub auth: AuthMetrics,
    pub http: HttpMetrics,
    pub hop: HopMetrics,
    pub sandbox: SandboxMetrics,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::with_prefix("mcp_proxy");
        let servers = ServerFamilies::register(&mut registry);
        let store = Arc::new(StoreMetrics::register(&mut registry));
        let spans = SpanMetrics::register(&mut registry);
        let auth = AuthMetrics::register(&mut registry);
        let http = HttpMetrics::register(&mut registry);
        let hop = HopMetrics::register(&mut registry);
        let sandbox = SandboxMetrics::register(&mut registry);
        Metrics {
            sandbox,
            auth,
            http,
            hop,
            registry,
            servers,
            store,
            spans,
        }
    }
}

impl Metrics {
    /// The figures of the server named `server`; its series exist (at 0) from here on.
    pub fn server(&self, server: &str) -> Arc<ServerMetrics> {
        Arc::new(self.servers.resolve(server))
    }

    /// The OpenMetrics text exposition of every figure.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The label for a JSON-RPC method: its name when the method table counts it, else `other`,
/// so a client cannot grow the label set.
pub use crate::wire::methods::metric_label as method_label;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_per_server_figures_with_their_server_label() {
        let metrics = Metrics::default();
        let default = metrics.server("default");
        let other = metrics.server("github");
        default.sessions_created_total.inc();
        other.sessions_open.inc();
        let text = metrics.render();
        assert!(
            text.contains("# TYPE mcp_proxy_sessions_created counter\n"),
            "{text}"
        );
        assert!(
            text.contains("mcp_proxy_sessions_created_total{server=\"default\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("mcp_proxy_sessions_created_total{server=\"github\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("mcp_proxy_sessions_open{server=\"github\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("mcp_proxy_store_up 0\n"), "{text}");
        default.session_refused(Refusal::Anonymous);
        let text = metrics.render();
        assert!(
            text.contains(
                "mcp_proxy_sessions_rejected_total{server=\"default\",reason=\"anonymous\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "mcp_proxy_sessions_rejected_total{server=\"github\",reason=\"per_principal\"} 0\n"
            ),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(
            text.contains("# HELP mcp_proxy_sessions_created Sessions created.\n"),
            "one period: {text}"
        );
    }

    #[test]
    fn counts_requests_by_server_bounded_method_and_status_with_a_histogram() {
        let metrics = Metrics::default();
        let default = metrics.server("default");
        default.record_request(method_label("tools/call"), 200, Duration::from_micros(700));
        default.record_request(method_label("tools/call"), 200, Duration::from_millis(30));
        default.record_request(
            method_label("x/made-up-by-a-client"),
            400,
            Duration::from_secs(60),
        );
        let text = metrics.render();
        for line in [
            "mcp_proxy_requests_total{server=\"default\",method=\"tools/call\",status=\"200\"} 2\n",
            "mcp_proxy_requests_total{server=\"default\",method=\"other\",status=\"400\"} 1\n",
            "mcp_proxy_request_duration_seconds_bucket{le=\"0.001\",server=\"default\"} 1\n",
            "mcp_proxy_request_duration_seconds_bucket{le=\"0.05\",server=\"default\"} 2\n",
            "mcp_proxy_request_duration_seconds_bucket{le=\"+Inf\",server=\"default\"} 3\n",
            "mcp_proxy_request_duration_seconds_count{server=\"default\"} 3\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
