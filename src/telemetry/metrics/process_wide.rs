//! The process-wide figures: one store, one span exporter, one issuer, one listener, one hop,
//! one kernel for every server, each a struct of its own registered once.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::latency_histogram;

/// A struct of process-wide figures, each registered under its name with its help (the
/// field's doc too).
macro_rules! process_wide {
    ($(#[$doc:meta])* $figures:ident { $($field:ident: $kind:ty = $new:expr, $name:literal, $help:literal;)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $figures {
            $(#[doc = $help] pub $field: $kind,)*
        }

        impl $figures {
            pub(super) fn register(registry: &mut Registry) -> $figures {
                let figures = $figures { $($field: $new,)* };
                $(registry.register($name, $help.trim_end_matches('.'), figures.$field.clone());)*
                figures
            }
        }
    };
}

process_wide! {
    /// The store's figures (process-wide: every server shares one store).
    StoreMetrics {
        up: Gauge = Gauge::default(), "store_up",
            "1 while the Redis store answers (always 0 with the memory store).";
        errors: Counter = Counter::default(), "store_errors",
            "Failed Redis commands (writes, heartbeats, reads).";
        round_trips: Counter = Counter::default(), "store_round_trips",
            "Round trips to Redis (a batch of writes, a read, a heartbeat).";
        round_trip_duration: Histogram = latency_histogram(), "store_round_trip_duration_seconds",
            "How long each round trip to Redis took.";
        write_queue: Gauge = Gauge::default(), "store_write_queue",
            "Owners' writes queued for Redis and not yet written (past store_write_queue_limit, new work and the servers' messages wait).";
        write_queue_limit: Gauge = Gauge::default(), "store_write_queue_limit",
            "Writes that may be queued for Redis before new sessions and requests wait and servers are no longer read (cluster.max_write_queue).";
        upstream_reads_paused: Counter = Counter::default(), "store_upstream_reads_paused",
            "Times a server's messages were left unread because the writes queued for Redis were over store_write_queue_limit (reading went on once they were written).";
        write_lag_ms: Gauge = Gauge::default(), "store_write_lag_ms",
            "How long the oldest write of the last batch waited before it reached Redis, in milliseconds.";
        failovers: Counter = Counter::default(), "store_failovers",
            "Times the store's master changed (a Sentinel failover followed, or a cluster's masters changed): the owners then write their sessions to the new master.";
        master: Family<Vec<(&'static str, String)>, Gauge> = Family::default(), "store_master",
            "1 for each Redis master in use, by address (host:port): the one named by the URL, the one the Sentinels named last, or each master of a cluster.";
        node_up: Family<Vec<(&'static str, String)>, Gauge> = Family::default(), "store_node_up",
            "1 for each node of the store that is up, 0 for one that is down, by node (host:port): the master, or every node of a cluster as the cluster tells.";
        node_round_trips: Family<Vec<(&'static str, String)>, Counter> = Family::default(), "store_node_round_trips",
            "Round trips to Redis, by node (host:port; on a cluster, the master serving the command's slot).";
        node_errors: Family<Vec<(&'static str, String)>, Counter> = Family::default(), "store_node_errors",
            "Round trips to Redis that failed, by node (host:port).";
    }
}

impl StoreMetrics {
    /// The masters in use are now those at `addresses`.
    pub fn masters_are(&self, addresses: Vec<String>) {
        self.master.clear();
        for address in addresses {
            self.master
                .get_or_create(&vec![("address", address)])
                .set(1);
        }
    }

    /// The nodes of the store, and whether each is up.
    pub fn nodes_are(&self, nodes: Vec<(String, bool)>) {
        self.node_up.clear();
        for (node, up) in nodes {
            self.node_up
                .get_or_create(&vec![("node", node)])
                .set(i64::from(up));
        }
    }
}

impl StoreMetrics {
    /// Counts a round trip to `node` that took `took`.
    pub fn round_trip(&self, node: &str, took: Duration) {
        self.round_trips.inc();
        self.round_trip_duration.observe(took.as_secs_f64());
        self.node_round_trips
            .get_or_create(&vec![("node", node.to_owned())])
            .inc();
    }

    /// Counts a round trip to `node` that failed.
    pub fn node_error(&self, node: &str) {
        self.node_errors
            .get_or_create(&vec![("node", node.to_owned())])
            .inc();
    }
}

process_wide! {
    /// The span exporter's figures (process-wide).
    SpanMetrics {
        exported: Counter = Counter::default(), "spans_exported",
            "Spans the OTLP collector accepted.";
        dropped: Counter = Counter::default(), "spans_dropped",
            "Spans dropped because the export queue was full or their export failed.";
        exports_failed: Counter = Counter::default(), "span_exports_failed",
            "Span exports (batches) that failed.";
    }
}

process_wide! {
    /// The resource server's figures (process-wide: one issuer for every server).
    AuthMetrics {
        refused: Family<Vec<(&'static str, &'static str)>, Counter> = Family::default(), "auth_refused_requests",
            "Requests refused for their bearer token, by reason: missing, invalid (malformed, forged, another issuer's), expired, audience (issued for another resource), scope (step-up needed), unavailable (the authorization server could not be reached), exchange (the token could not be exchanged for its server's: the issuer refused, or could not be reached), throttled (more new opaque tokens than auth.introspections_per_second).";
        tokens_cached: Gauge = Gauge::default(), "auth_tokens_cached",
            "Verified tokens kept until they expire, so that reusing one costs no signature check (at most 10,000).";
        tokens_exchanged_kept: Gauge = Gauge::default(), "auth_tokens_exchanged_kept",
            "Tokens exchanged for a server and kept per client token (by digest) and server until shortly before they expire (at most 10,000).";
        token_exchanges: Counter = Counter::default(), "auth_token_exchanges",
            "Tokens exchanged at the issuer (RFC 8693) for an upstream server's audience (kept per client token and server until shortly before they expire).";
        token_exchanges_reused: Counter = Counter::default(), "auth_token_exchanges_reused",
            "Requests whose server got the token already exchanged for the same client token and server, without asking the issuer.";
        token_exchanges_coalesced: Counter = Counter::default(), "auth_token_exchanges_coalesced",
            "Requests that waited for the exchange of the same client token another request had begun, instead of asking the issuer again.";
        introspections: Counter = Counter::default(), "auth_introspections",
            "Introspection requests (RFC 7662) made to the issuer for opaque tokens not yet known: at most auth.introspections_per_second, a second's worth at once; new tokens over it are refused 503 (auth_refused_requests, reason throttled).";
        introspections_spared: Counter = Counter::default(), "auth_introspections_spared",
            "Requests with an opaque token that did not ask the issuer: the token was found inactive less than 30 s before, or its introspection was in flight already.";
        inactive_tokens_kept: Gauge = Gauge::default(), "auth_inactive_tokens_kept",
            "Opaque tokens the issuer called inactive, remembered for 30 s (at most 10,000).";
        key_fetches: Counter = Counter::default(), "auth_key_fetches",
            "Fetches of the issuer's keys (JWKS): at first use, after auth.jwks_max_age, and for a key not yet known, at most one per auth.jwks_refetch_floor, and after a failure one per backoff (1 s doubling to 60 s).";
        key_fetch_failures: Counter = Counter::default(), "auth_key_fetch_failures",
            "Fetches of the issuer's keys that failed (its metadata or keys unreachable, or not a JWK Set); the next waits a backoff.";
        keys_stale_served: Counter = Counter::default(), "auth_keys_stale_served",
            "Tokens verified with keys past auth.jwks_max_age because the issuer could not be reached (within auth.jwks_stale_grace).";
    }
}

impl AuthMetrics {
    /// Counts a request refused for `reason`.
    pub fn refuse(&self, reason: &'static str) {
        self.refused.get_or_create(&vec![("reason", reason)]).inc();
    }
}

process_wide! {
    /// The listener's figures (process-wide: one listener for every server).
    HttpMetrics {
        connections_open: Gauge = Gauge::default(), "http_connections_open",
            "Client connections open (WebSocket connections and SSE streams included).";
        connections_refused: Counter = Counter::default(), "http_connections_refused",
            "Client connections answered 503 and closed because http.max_connections were open.";
        principal_headers_refused: Counter = Counter::default(), "http_principal_headers_refused",
            "Requests refused because they carried http.principal_header from a peer outside http.trusted_proxies (403), or carried it twice (400).";
        tls_reloads: Counter = Counter::default(), "http_tls_reloads",
            "Times the listener's certificate files changed and were read again (new connections get the new certificate; open ones keep theirs).";
        tls_reload_failures: Counter = Counter::default(), "http_tls_reload_failures",
            "Times the listener's certificate files changed but could not be used (the previous certificate stays; the warning logged says why).";
        tls_handshakes_failed: Counter = Counter::default(), "http_tls_handshakes_failed",
            "Client connections dropped because their TLS handshake failed (no certificate from tls.client_ca_file, a CA the client does not trust, not TLS at all) or did not finish within 10 s.";
    }
}

process_wide! {
    /// The internal hop's figures as the replica taking hops counts them (process-wide: one
    /// memory of nonces for every server).
    HopMetrics {
        nonces_kept: Gauge = Gauge::default(), "hop_nonces_kept",
            "Nonces of the hops this replica took that it keeps while their signatures are valid (at most cluster.max_hop_nonces).";
        replays_refused: Counter = Counter::default(), "hop_replays_refused",
            "Hops refused (403) because their nonce was taken already: a replay.";
        nonces_full: Counter = Counter::default(), "hop_nonces_full",
            "Hops refused (503) because this replica kept cluster.max_hop_nonces nonces already.";
        too_old_refused: Counter = Counter::default(), "hop_too_old_refused",
            "Hops refused (503) because they were signed before this replica started (or before the nonces it still keeps, its clock set back): a replay of them could not be told.";
    }
}

process_wide! {
    /// What the stdio sandbox cannot enforce on this host (process-wide: one kernel).
    SandboxMetrics {
        unenforced: Family<Vec<(&'static str, String)>, Gauge> = Family::default(), "sandbox_unenforced",
            "1 for each part of a server's upstream.sandbox this host cannot enforce (by server and what: landlock_filesystem, landlock_tcp_ports, landlock_scopes), as logged at start.";
    }
}
