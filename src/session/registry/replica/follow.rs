//! Keeping views current: each follows its owner's log in the store while read here, renews
//! with the owner the streams read here, moves to a new owner after a takeover elsewhere, and
//! takes the session over when its owner's heartbeat lapses; after a store outage, owned
//! sessions are written again.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn};

use crate::session::log::StreamKey;
use crate::session::{Registry, Session};
use crate::store::RedisStore;
use crate::upstream::owner::{Owner, OwnerLink};

impl Registry {
    /// Redis answers again after an outage: sessions another replica took over meanwhile (this
    /// one's heartbeat lapsed: another owner, or another owner epoch) are not this replica's
    /// any more and are dropped here; the others are written again, since a restarted Redis may
    /// have lost them.
    pub(in crate::session) async fn after_outage(&self) {
        let Some(redis) = self.store.redis() else {
            return;
        };
        let sessions: Vec<Arc<Session>> = self.sessions.iter().map(|s| s.value().clone()).collect();
        for session in sessions {
            let held = session.fence().map_or(0, |fence| fence.epoch());
            match redis.record(&self.server, session.id()).await {
                // (A record without an owner is a fragment: writes of this replica's that were
                // in flight across the outage, landing in an emptied Redis.)
                Ok(Some(record))
                    if !record.owner.is_empty()
                        && (record.owner != redis.node_id || record.epoch != held) =>
                {
                    self.drop_deposed(&session, "taken over while Redis was unreachable");
                }
                Ok(_) => session.rewrite_to_store(),
                Err(error) => warn!(%error, "could not check a session's owner after an outage"),
            }
        }
    }

    /// Every heartbeat, for each view here: renews with its owner the streams clients read
    /// (so it keeps the session and sends those streams everything); follows the session to a
    /// new owner after a takeover elsewhere; takes it over when its owner's heartbeat lapsed, so
    /// readers here are not left waiting for a dead replica.
    pub(in crate::session) async fn check_views(&self) {
        let Some(redis) = self.store.redis() else {
            return;
        };
        let views: Vec<Arc<Session>> = self.views.iter().map(|v| v.value().clone()).collect();
        for view in views {
            if view.ended.is_cancelled() {
                continue;
            }
            let Some(link) = view.owner().cloned() else {
                continue;
            };
            let Ok(Some(record)) = redis.record(&self.server, view.id()).await else {
                renew(&view, &link);
                continue;
            };
            let alive = match record.owner == redis.node_id {
                true => Ok(None),
                false => redis.node_url(&record.owner).await,
            };
            match alive {
                Ok(Some(url)) => {
                    if record.owner != link.owner().node {
                        link.retarget(Owner {
                            node: record.owner.clone(),
                            url,
                        });
                    }
                    renew(&view, &link);
                }
                Ok(None) => {
                    let caller = view.caller();
                    let taken = self.take_over(record, view.id(), &caller);
                    if let Err(error) = taken.await {
                        warn!(%error, "could not take over a session whose owner is gone");
                    }
                }
                Err(_) => {}
            }
        }
    }

    /// With a shared store, a few times per idle TTL: views read here keep their owner's
    /// session from expiring, and views nobody reads are dropped (the owner's session lives
    /// on). Owned sessions are told alive by the idle sweep, as they come due.
    pub(in crate::session) fn keep_views(&self, now: Instant) {
        let ttl = self.settings().idle_ttl;
        for view in self.views.iter() {
            if let Some(link) = view.value().owner() {
                renew(view.value(), link);
            }
        }
        self.views.retain(|_, view| {
            let idle = view
                .idle_since()
                .is_some_and(|since| now.saturating_duration_since(since) >= ttl);
            if idle {
                view.end();
            }
            !idle
        });
    }
}

/// Copies what the owner logs into a view's log until the view is dropped or ended.
pub(super) async fn tail(redis: Arc<RedisStore>, server: String, view: Weak<Session>) {
    let Some(id) = view.upgrade().map(|v| v.id().to_owned()) else {
        return;
    };
    let mut follower = redis.follow(&server, &id, TAIL_BLOCK);
    loop {
        let Some(followed) = view.upgrade() else {
            return;
        };
        let ended = followed.ended.clone();
        // Followed only while someone reads it here: a request forwarded to the owner gets its
        // answer back with the hop, and Redis is spared a reader nobody listens to.
        if !followed.has_readers() {
            let signal = followed.readers_signal();
            let attached = signal.notified();
            tokio::pin!(attached);
            attached.as_mut().enable();
            let idle = !followed.has_readers();
            drop(followed);
            if idle {
                tokio::select! {
                    () = attached => {}
                    () = ended.cancelled() => return,
                }
            }
            continue;
        }
        let after = followed.followed_through();
        drop(followed);
        let logged = tokio::select! {
            read = follower.next(after) => read,
            () = ended.cancelled() => return,
        };
        match (logged, view.upgrade()) {
            // Nothing new for a while: is the session still there at all?
            (Ok(logged), Some(view)) if logged.is_empty() => {
                if let Ok(None) = redis.record(&server, &id).await {
                    view.end();
                    return;
                }
            }
            (Ok(logged), Some(view)) => view.absorb_followed(logged),
            // Counted and logged by the follower, which reconnects.
            (Err(_), Some(_)) => {}
            (_, None) => return,
        }
    }
}

/// Tells a view's owner which streams clients read here (also keeping its session alive); a
/// failure marks the link suspect, so the next lookup checks where the session lives.
pub(super) fn renew(view: &Session, link: &OwnerLink) {
    let mut streams = view.attached_streams();
    if view.tapped() && !streams.contains(&StreamKey::Standalone) {
        streams.push(StreamKey::Standalone);
    }
    if streams.is_empty() {
        return;
    }
    let link = link.clone();
    tokio::spawn(async move {
        if let Err(error) = link.read(&streams).await {
            debug!(%error, "could not renew the streams read through a view");
        }
    });
}

/// How long one blocking read of a followed log waits.
const TAIL_BLOCK: Duration = Duration::from_secs(2);
