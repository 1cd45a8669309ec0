//! A replica that leaves hands its sessions to the others: each session, once nothing is in
//! flight on it (or when the drain runs out), is written out whole, then given to a live replica
//! in the store (its owner epoch one more, so nothing more of this replica's is written to it),
//! and let go here (a Streamable HTTP server's session is not ended: the new owner goes on in
//! it). The replica it was given to takes it over at its first request; a request that still
//! reaches this replica follows it there. Without a live replica to take them, the sessions are
//! left as they are, and the others take them over once this replica's heartbeat key is gone.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use crate::session::EndReason;
use crate::session::{Registry, Session};
use crate::store::Fence;

/// The longest a handover waits for what the sessions wrote to be in Redis.
const WRITTEN_WITHIN: Duration = Duration::from_secs(2);

/// Sessions handed over per round trip.
const HANDED_AT_ONCE: usize = 256;

impl Registry {
    /// Hands to the other replicas every session here with nothing in flight, or all of them
    /// with `all`. False when sessions cannot be handed over now (Redis is behind or cannot
    /// answer, or no other replica takes sessions): they are left for the others to take over
    /// once this replica has left.
    pub(in crate::session) async fn hand_over(&self, all: bool) -> bool {
        let Some(redis) = self.store.redis() else {
            return false;
        };
        let sessions: Vec<(Arc<Session>, Arc<Fence>)> = self
            .sessions
            .iter()
            .map(|entry| entry.value().clone())
            .filter(|session| all || session.in_flight() == 0)
            .filter_map(|session| session.fence().map(|fence| (session, fence)))
            .collect();
        if sessions.is_empty() {
            return true;
        }
        if !redis.synced(WRITTEN_WITHIN).await {
            warn!("Redis has not taken everything the sessions wrote: they are left for the other replicas to take over");
            return false;
        }
        let takers = match redis.takers().await {
            Ok(takers) if !takers.is_empty() => takers,
            Ok(_) => return false, // no one to take them: taken over once this replica is gone
            Err(error) => {
                warn!(%error, "could not find the replicas to hand sessions to");
                return false;
            }
        };
        for batch in sessions.chunks(HANDED_AT_ONCE) {
            let given: Vec<(&str, &Fence, &str)> = batch
                .iter()
                .enumerate()
                .map(|(n, (session, fence))| {
                    // Its writes refused from now on are no deposal: it is being given away.
                    fence.retire();
                    (
                        session.id(),
                        fence.as_ref(),
                        takers[n % takers.len()].as_str(),
                    )
                })
                .collect();
            let handed = match redis.hand_to(&self.server, &given).await {
                Ok(handed) => handed,
                Err(error) => {
                    batch.iter().for_each(|(_, fence)| fence.reinstate());
                    warn!(%error, "could not hand sessions over; they are left for the other replicas to take over");
                    return false;
                }
            };
            for (((session, _), (_, _, to)), handed) in batch.iter().zip(&given).zip(handed) {
                match handed {
                    // Said first: its last line is the `session ended` that closing it logs.
                    true if self.owned_exactly(session) => {
                        session
                            .span()
                            .in_scope(|| info!(to = %to, "session handed over"));
                        if self.close_exactly(session, false, EndReason::HandedOver) {
                            self.metrics.sessions_handed_over_total.inc();
                        }
                    }
                    true => {}
                    false => {
                        self.drop_deposed(session, "taken over by another replica as this one left")
                    }
                }
            }
        }
        true
    }
}
