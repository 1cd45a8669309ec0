//! Why a session did not take a message, a subscription or a read.

use std::time::Duration;

use super::rate;
use crate::upstream::owner::HopError;
use crate::upstream::UpstreamError;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error("the limit of {0} open sessions is reached")]
    TooManySessions(usize),
    #[error("this principal already holds its limit of {0} open sessions (session.max_sessions_per_principal)")]
    TooManyForPrincipal(usize),
    #[error("clients without credentials already hold their limit of {0} open sessions (session.max_anonymous_sessions)")]
    TooManyAnonymous(usize),
    /// The session has as many requests in flight to its server as it may.
    #[error("this session already has its limit of {0} requests in flight (session.max_inflight); retry once one is answered")]
    TooManyInFlight(usize),
    #[error(transparent)]
    SubscriptionRefused(#[from] SubscriptionRefused),
    #[error("the session store (Redis) is unreachable; new sessions are refused until it is back")]
    StoreUnavailable,
    #[error("the session store (Redis) is {0} writes behind; new work waits until it catches up")]
    StoreBehind(usize),
    /// Another replica owns the session and cannot serve it right now (dead and not yet taken
    /// over, restarted, or moving it).
    #[error("the replica owning this session cannot serve it right now: {0}")]
    OwnerUnavailable(OwnerUnavailable),
    /// The session was found, then turned out to be gone (ended on its owner).
    #[error("the session is gone")]
    Gone,
    /// This proxy is shutting down: it takes no new sessions or requests (another replica, or
    /// this one restarted, will).
    #[error("this proxy is shutting down; retry shortly")]
    ShuttingDown,
    /// The principal is over a rate limit: the request reached no session.
    #[error("Too Many Requests: {}", rate_limited(.0))]
    RateLimited(rate::Exceeded),
    /// No session prepared for requests without credentials was ready in time.
    #[error(
        "none of the {size} server sessions for requests without credentials \
         (session.anonymous_pool) was ready within {waited:?}"
    )]
    AnonymousPoolBusy { size: usize, waited: Duration },
    /// The principal holds as many sessions named in messages as it may.
    #[error("this principal holds its limit of {0} named sessions")]
    TooManyNamed(usize),
    /// The session a message names is unknown, another principal's, expired or ended.
    #[error("session {0} is unknown, expired or deleted")]
    NamedNotFound(String),
}

/// Why the replica owning a session cannot serve it right now.
#[derive(Debug, thiserror::Error)]
pub enum OwnerUnavailable {
    /// Its record changed under every attempt to claim it.
    #[error("the session is changing hands")]
    ChangingHands,
    /// The replica that created it could not say whether it has it.
    #[error(transparent)]
    Hop(HopError),
    #[error("its owner described it in a form this replica does not read")]
    Unreadable,
}

/// A `resources/subscribe` to one resource more than a session may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubscriptionRefused {
    #[error(
        "Invalid params: this session is already subscribed to its limit of {0} resources \
         (session.max_subscriptions); unsubscribe from one first"
    )]
    TooMany(usize),
    #[error(
        "Invalid params: this session's subscribed URIs would take more than {0} bytes; \
         unsubscribe from one first"
    )]
    TooLarge(usize),
    /// A resource the server's clients do not see (`[resources]`): never subscribed to.
    #[error("Invalid params: Resource not found")]
    NotShown,
}

impl SessionError {
    /// Its owning replica cannot serve the session right now (unreachable, restarted, moving
    /// it), and the message was not carried out: a retry shortly may be served.
    pub fn owner_unavailable(&self) -> bool {
        matches!(
            self,
            SessionError::OwnerUnavailable(_)
                | SessionError::Upstream(UpstreamError::Hop(
                    HopError::Unreachable(_) | HopError::Gone | HopError::Moved { .. },
                ))
        )
    }

    /// The session did not take the message (its owner or its store cannot serve it now, or it
    /// is gone): an answer about the session, not one from its server.
    pub fn not_taken(&self) -> bool {
        self.owner_unavailable()
            || matches!(
                self,
                SessionError::Gone
                    | SessionError::StoreUnavailable
                    | SessionError::StoreBehind(_)
                    | SessionError::ShuttingDown
                    | SessionError::RateLimited(_)
                    | SessionError::TooManyInFlight(_)
            )
    }
}

/// Why a stream cannot be read from a position.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the position {after} is ahead of this session's newest event ({head})")]
    Ahead { after: u64, head: u64 },
}

/// What a refusal over a rate limit says.
fn rate_limited(exceeded: &rate::Exceeded) -> String {
    let wait = exceeded.retry_after().as_millis();
    match exceeded {
        rate::Exceeded::Requests { .. } => {
            format!("this principal is over limits.requests_per_second; retry in {wait} ms")
        }
        rate::Exceeded::Tool { tool, .. } => {
            format!("this principal is over limits.tools.{tool}; retry in {wait} ms")
        }
    }
}
