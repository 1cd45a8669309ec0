//! What the configuration gives sessions: their settings, and the defaults named in one place
//! (the configuration takes them from here rather than from the tables that use them).

pub use super::correlate::held::DEFAULT_LIMIT as MAX_HELD_PER_PRINCIPAL;
pub use super::correlate::pool::{
    DEFAULT_SIZE as ANONYMOUS_POOL_SIZE, DEFAULT_WAIT as ANONYMOUS_POOL_WAIT,
};
pub use super::correlate::Anonymous;
pub use super::data_layer::DataLayerSettings;

use std::sync::Arc;
use std::time::Duration;

use super::log::Window;
use super::{exposure, rate};

/// Per-session behaviour, from configuration.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    pub window: Window,
    pub idle_ttl: Duration,
    pub max_sessions: usize,
    /// Most sessions one principal with a credential (or a trusted principal header) may hold.
    pub max_sessions_per_principal: usize,
    /// Most sessions clients without one may hold together (they are all one principal, the
    /// anonymous one: this is their limit instead of `max_sessions_per_principal`).
    pub max_anonymous_sessions: usize,
    /// Let a newer progress notification replace an undelivered older one of its token.
    pub coalesce_progress: bool,
    /// Answer list requests from a cache shared by the server's sessions.
    pub cache_lists: bool,
    /// The longest a request waits for its server without hearing of it (its response, or a
    /// progress notification, message or server request on its stream); then it fails and the
    /// server is told to cancel it. Not counted while the client owes the server an answer.
    pub request_timeout: Duration,
    /// Resources one session may be subscribed to at once (and `MAX_SUBSCRIPTION_BYTES` of
    /// their URIs); a `resources/subscribe` to one more is refused (-32602) without reaching the
    /// server.
    pub max_subscriptions: usize,
    /// Requests one session may have in flight to its server at once; one more is refused
    /// (`SessionError::TooManyInFlight`) without reaching the server.
    pub max_inflight: usize,
    /// Where the server's spans go (nowhere unless tracing is on).
    pub spans: crate::telemetry::spans::Spans,
    /// Which of the server's tools clients see, and under which names.
    pub tools: Arc<exposure::Exposure>,
    /// Which of the server's prompts clients see, and under which names.
    pub prompts: Arc<exposure::Exposure>,
    /// Which of the server's resources clients see, by URI.
    pub resources: Arc<exposure::ResourceExposure>,
    /// Requests per second per principal, and per principal and tool.
    pub limits: rate::RateLimits,
}

/// The bytes of URIs one session may be subscribed to at once (like the replay window's).
pub const MAX_SUBSCRIPTION_BYTES: usize = 1 << 20;

/// The defaults, each written once: the configuration's keys take theirs from here, and their
/// `[default: …]` texts are checked against these (`config::reference`).
impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            window: Window::default(),
            idle_ttl: Duration::from_secs(600),
            max_sessions: 10_000,
            max_sessions_per_principal: 100,
            max_anonymous_sessions: 256,
            coalesce_progress: false,
            cache_lists: false,
            request_timeout: Duration::from_secs(60),
            max_subscriptions: 1000,
            max_inflight: 256,
            spans: crate::telemetry::spans::Spans::default(),
            tools: Arc::default(),
            prompts: Arc::default(),
            resources: Arc::default(),
            limits: rate::RateLimits::default(),
        }
    }
}
