//! An owner that may have been deposed: a replica paused or cut off past `owner_timeout` comes
//! back holding sessions another replica took over. Its writes are refused (each is
//! conditional on the owner epoch it holds, which the takeover changed), and the writer says so:
//! the session is dropped here (its server let go without ending the session a Streamable HTTP
//! server keeps, which the new owner goes on in) and requests follow it to its new owner. Reads
//! are bounded as well: after a lapse of its lease (its heartbeat may have expired), an owner
//! confirms in Redis that it still owns a session before it acts on it again.

use std::sync::Arc;

use tokio::time::Instant;
use tracing::warn;

use crate::session::EndReason;
use crate::session::{Registry, Session, SessionError};
use crate::store::Deposed;

/// What may be done now with a session owned here, before a client message is handed to it.
pub(in crate::session) enum OwnedNow {
    /// It is served here.
    Serve,
    /// It is no longer here (another replica owns it, or it was handed over): find it again.
    Moved,
    Refused(SessionError),
}

impl Registry {
    /// The writer found a write of `deposed` refused for a stale epoch: the session is dropped
    /// here if it is the one whose hold was refused (not a newer one, taken over again).
    pub(in crate::session) fn deposed(&self, deposed: &Deposed) {
        let Some(session) = self.owned(&deposed.session) else {
            return;
        };
        let refused = session
            .fence()
            .is_some_and(|fence| Arc::ptr_eq(&fence, &deposed.fence));
        if refused {
            self.drop_deposed(
                &session,
                "a write to Redis was refused for a stale owner epoch",
            );
        }
    }

    /// Drops `session`, which another replica owns now: its server is let go (a child ends; a
    /// Streamable HTTP server's session is left to the new owner), its readers stop (and
    /// resume through the new owner), and it is counted.
    pub(in crate::session) fn drop_deposed(&self, session: &Arc<Session>, why: &str) {
        if let Some(fence) = session.fence() {
            fence.retire();
        }
        if self.close_exactly(session, false, EndReason::Deposed) {
            self.metrics.sessions_deposed_total.inc();
            session.span().in_scope(|| {
                warn!(why, "session deposed: another replica took it over; its copy here is dropped and requests go to the new owner")
            });
        }
    }

    /// Whether `session`, owned here, may be acted on now: this replica's lease has held since
    /// its ownership was last confirmed, or Redis confirms it now (renewing the lease in the
    /// same round trip). False when another replica took it over meanwhile: it is dropped.
    /// While Redis cannot answer, the owner goes on serving, as through any outage; its writes
    /// stay conditional on its epoch all the same, and once Redis answers again what was taken
    /// over meanwhile is dropped (`after_outage`).
    pub(in crate::session) async fn still_owned(&self, session: &Arc<Session>) -> bool {
        let (Some(redis), Some(fence)) = (self.store.redis(), session.fence()) else {
            return true;
        };
        if redis.holds(&fence) || !redis.healthy() {
            return true;
        }
        match redis.confirm(&self.server, session.id(), &fence).await {
            Ok(true) => true,
            Ok(false) => {
                self.drop_deposed(session, "not confirmed after a lapse of the heartbeat");
                false
            }
            // Counted and logged as Redis being unreachable.
            Err(_) => true,
        }
    }

    /// What may be done now with `session`, owned here, for a client message: served, unless
    /// it was taken over meanwhile. While this replica leaves, a `request` waits (until
    /// `deadline`) for the session to be handed over and then follows it; answers to the
    /// server and notifications still reach the requests being drained here.
    pub(in crate::session) async fn owned_now(
        &self,
        session: &Arc<Session>,
        request: bool,
        deadline: Instant,
    ) -> OwnedNow {
        let handing_over = self.is_leaving() && (request || session.ended.is_cancelled());
        if !handing_over {
            return match self.still_owned(session).await {
                true => OwnedNow::Serve,
                false => OwnedNow::Moved,
            };
        }
        if self.store.redis().is_none() {
            return OwnedNow::Refused(SessionError::ShuttingDown);
        }
        let handed_over = tokio::time::timeout_at(deadline, session.ended.cancelled()).await;
        match handed_over {
            Ok(()) => OwnedNow::Moved,
            Err(_) => OwnedNow::Refused(SessionError::ShuttingDown),
        }
    }
}
