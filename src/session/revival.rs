//! A session whose server exited goes on with a new one: at the session's next request its
//! server is started again (`Upstream::restart`) and brought to where the session was (the
//! client's `initialize`, its subscriptions), one revival at a time. What the old server held
//! in flight has failed with the cause of its end.

use std::sync::Arc;

use tracing::warn;

use super::{Session, SessionError};
use crate::upstream::UpstreamError;

/// Why the session's server is down, and the turn revivals take.
#[derive(Debug)]
pub(super) struct Exited {
    pub(super) cause: UpstreamError,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Exited {
    pub(super) fn new(cause: UpstreamError) -> Box<Exited> {
        Box::new(Exited {
            cause,
            turn: Arc::default(),
        })
    }
}

/// Starts the session's server again if it exited (else returns at once); the request that
/// asked then goes to the new server. A failure is the request's; the next request tries again.
pub(in crate::session) async fn revive(session: &Session) -> Result<(), SessionError> {
    let turn = match &session.lock().upstream_failure {
        None => return Ok(()),
        Some(exited) => exited.turn.clone(),
    };
    let _one_at_a_time = turn.lock().await;
    let (cause, init) = {
        let state = session.lock();
        match &state.upstream_failure {
            None => return Ok(()), // revived meanwhile
            Some(exited) => (exited.cause.clone(), state.init.clone()),
        }
    };
    let (Some(upstream), Some(this)) = (session.upstream.upstream(), session.this.upgrade()) else {
        return Err(cause.into());
    };
    let Some(restarted) = upstream.restart() else {
        return Err(cause.into());
    };
    if restarted? {
        session.metrics.upstream_spawns_total.inc();
    }
    session.metrics.upstream_restarts_total.inc();
    session
        .span()
        .in_scope(|| warn!(%cause, "the server had exited; started again for the session"));
    super::handshake::reinitialize(&this, init.as_deref()).await?;
    session.lock().upstream_failure = None;
    Ok(())
}
