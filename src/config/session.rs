//! `[session]`: how many sessions, how long they live, their replay window, and the sessions
//! clients name in their messages.

use std::time::Duration;

use clap::ValueEnum;
use serde::Deserialize;

use super::duration::parse_duration;
use super::file::duration;
use super::keys::settings;
use crate::session::settings::{
    Anonymous, DataLayerSettings, ANONYMOUS_POOL_SIZE, ANONYMOUS_POOL_WAIT, MAX_HELD_PER_PRINCIPAL,
};
use crate::session::SessionSettings;

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

settings! {
    /// Sessions: their limits, replay window, and the sessions clients name.
    pub struct SessionConfig, flags SessionFlags {
        /// End a session after this long without requests or attached streams [default: 10m].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded, positive)]
        pub idle_ttl: Duration = SessionSettings::default().idle_ttl, set;

        /// Most sessions open at once; more are refused with 503 [default: 10000].
        #[arg(long, value_name = "N")]
        #[check(positive)]
        pub max_sessions: usize = SessionSettings::default().max_sessions, set;

        /// Most sessions one principal with a credential (or a trusted principal header) may hold,
        /// on all the replicas sharing a Redis store together; more are refused with 503
        /// [default: 100].
        #[arg(long, value_name = "N")]
        #[check(positive)]
        pub max_sessions_per_principal: usize =
            SessionSettings::default().max_sessions_per_principal, set;

        /// Most sessions clients without a credential may hold together (they are one principal,
        /// the anonymous one), on each replica; more are refused with 503 [default: 256].
        #[arg(long, value_name = "N")]
        #[check(positive)]
        pub max_anonymous_sessions: usize = SessionSettings::default().max_anonymous_sessions, set;

        /// Replay window: most messages kept per session [default: 1024].
        #[arg(long, value_name = "N")]
        #[check(positive)]
        pub window_events: usize = SessionSettings::default().window.max_events, set;

        /// Replay window: most bytes kept per session [default: 1048576].
        #[arg(long, value_name = "BYTES")]
        #[check(positive)]
        pub window_bytes: usize = SessionSettings::default().window.max_bytes, set;

        /// Replay window: oldest message kept [default: 10m].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded, positive)]
        pub window_age: Duration = SessionSettings::default().window.max_age, set;

        /// Most resources one session may be subscribed to at once (and 1 MiB of their URIs); a
        /// resources/subscribe to one more is refused with -32602 [default: 1000].
        #[arg(long, value_name = "N")]
        #[check(positive)]
        pub max_subscriptions: usize = SessionSettings::default().max_subscriptions, set;

        /// Most requests one session may have in flight to its server at once (WebSocket clients
        /// pipeline without waiting); one more is refused with 503 and Retry-After without
        /// reaching the server (session.max_inflight) [default: 256].
        #[arg(long, value_name = "N")]
        #[check(positive)]
        pub max_inflight: usize = SessionSettings::default().max_inflight, set;

        /// Let a newer progress notification replace an undelivered older one of the same token
        /// (true/false) [default: false].
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub coalesce_progress: bool = SessionSettings::default().coalesce_progress, set;

        /// 2026-07-28 requests with no principal: an upstream session each (per-request), or one
        /// shared by all (shared: only for servers that keep nothing per client) [default:
        /// per-request].
        #[arg(long, value_name = "MODE")]
        pub anonymous: Anonymous = Anonymous::PerRequest, set;

        /// 2026-07-28 requests without a credential, in front of a stdio server with a child per
        /// session: sessions started and initialized ahead of them, each serving one request and
        /// then ended and replaced (0: a child started and stopped per request) [default: 4].
        #[arg(long, value_name = "N")]
        pub anonymous_pool: usize = ANONYMOUS_POOL_SIZE, set;

        /// How long such a request waits for a pooled session to be ready; then 503 with
        /// Retry-After [default: 5s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(positive)]
        pub anonymous_pool_wait: Duration = ANONYMOUS_POOL_WAIT, set;

        /// Pooled sessions go back to the pool after their request and serve the next ones
        /// (true/false): the server's process, and whatever state it keeps, is then shared by every
        /// client without a credential; only for servers that keep no per-client state [default:
        /// false: a session serves one request].
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub anonymous_pool_reuse: bool = false, set;

        /// 2026-07-28 clients: how long a call held for the client's input waits for its retry
        /// [default: 5m].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded, positive)]
        pub input_ttl: Duration = Duration::from_secs(300), set;

        /// 2026-07-28 clients: calls one principal may have waiting for its input at once; more are
        /// refused (429) [default: 32].
        #[arg(long, value_name = "N")]
        #[check(positive)]
        pub max_held_per_principal: usize = MAX_HELD_PER_PRINCIPAL, set;

        /// How requests without a data-layer session find their server session: principal, or
        /// handle (also offer state handles: tools to open and close one, and a session_handle
        /// argument on every tool) [default: principal].
        #[arg(long, value_name = "RULE")]
        pub correlation: Correlation = Correlation::Principal, set;

        /// Requests that reach the server's state must name a data-layer session
        /// (sessions/create); without one they get -32044 (true/false) [default: false].
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub require_session: bool = false, set;

        /// A data-layer session or handle ends after this long unused [default: 30m].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded, positive)]
        pub data_session_idle_ttl: Duration = DataLayerSettings::default().idle_ttl, set;

        /// And at the latest this long after it was created [default: 24h].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded, positive)]
        pub data_session_lifetime: Duration = DataLayerSettings::default().lifetime, set;

        /// Data-layer sessions and handles one principal may hold (per replica) [default: 32].
        #[arg(long, value_name = "N")]
        #[check(positive)]
        pub max_data_sessions_per_principal: usize =
            DataLayerSettings::default().max_per_principal, set;

        /// The longest state a data-layer session's cookie may carry, in bytes [default: 4096].
        #[arg(long, value_name = "N")]
        #[check(positive)]
        pub max_session_state_bytes: usize = DataLayerSettings::default().max_state_bytes, set;
    }
}
