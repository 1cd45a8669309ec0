//! An upstream whose server starts at the session's `initialize`, not before: a client that
//! opens a session and never initializes it (a legacy SSE stream, 2024-11-05) costs no process
//! and no connection to the server. Messages before `initialize` go nowhere (the session
//! answers requests itself); `initialize` builds the real upstream, bound to the same session,
//! and everything after goes to it.

use std::sync::{Arc, Mutex};

use tracing::debug;

use super::factory::{Binding, UpstreamFactory};
use super::{Upstream, UpstreamError};
use crate::upstream::credential::Credential;
use crate::wire::jsonrpc::{Kind, Message};
use crate::wire::methods;

/// A session's upstream until and after its server starts.
#[derive(Clone)]
pub struct DeferredUpstream {
    inner: Arc<Inner>,
}

struct Inner {
    stage: Mutex<Stage>,
    factory: Arc<UpstreamFactory>,
    /// The session's binding: the started upstream's events reach the same session.
    binding: Arc<Binding>,
}

enum Stage {
    /// Not started; the client's credential, for an HTTP server that is to get it.
    Waiting(Credential),
    Started(Box<Upstream>),
    Released,
}

impl std::fmt::Debug for DeferredUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stage = match &*self.stage() {
            Stage::Waiting(_) => "waiting for initialize",
            Stage::Started(_) => "started",
            Stage::Released => "released",
        };
        f.debug_struct("DeferredUpstream")
            .field("stage", &stage)
            .finish()
    }
}

impl DeferredUpstream {
    /// An upstream for a new session that `factory` builds at its `initialize`, and the binding
    /// its events will reach the session by.
    pub fn build(
        factory: Arc<UpstreamFactory>,
        credential: Credential,
    ) -> (Upstream, Arc<Binding>) {
        let binding = Arc::new(Binding::default());
        let deferred = DeferredUpstream {
            inner: Arc::new(Inner {
                stage: Mutex::new(Stage::Waiting(credential)),
                factory,
                binding: binding.clone(),
            }),
        };
        (Upstream::Deferred(deferred), binding)
    }

    fn stage(&self) -> std::sync::MutexGuard<'_, Stage> {
        self.inner.stage.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the server has not been started yet (no `initialize` so far).
    pub fn waiting(&self) -> bool {
        matches!(&*self.stage(), Stage::Waiting(_))
    }

    /// Sends one message: `initialize` starts the server first; before it, a notification or
    /// response is dropped and a request refused (`UpstreamError::NotStarted`).
    pub async fn send(&self, message: Message) -> Result<(), UpstreamError> {
        let upstream = match self.started(&message)? {
            Some(upstream) => upstream,
            None => return Ok(()),
        };
        Box::pin(upstream.send(message)).await
    }

    /// The started upstream, started now if `message` is `initialize`; `None` for a message
    /// that goes nowhere before it.
    fn started(&self, message: &Message) -> Result<Option<Upstream>, UpstreamError> {
        let mut stage = self.stage();
        match &mut *stage {
            Stage::Started(upstream) => Ok(Some((**upstream).clone())),
            Stage::Released => Err(UpstreamError::Gone),
            Stage::Waiting(credential) if message.method() == Some(methods::INITIALIZE) => {
                let (upstream, binding) = self.inner.factory.build(credential.clone())?;
                self.inner.binding.bind_alike(&binding);
                *stage = Stage::Started(Box::new(upstream.clone()));
                Ok(Some(upstream))
            }
            Stage::Waiting(_) if message.kind() == Kind::Request => Err(UpstreamError::NotStarted),
            Stage::Waiting(_) => {
                debug!(
                    method = message.method().unwrap_or("response"),
                    "a message before initialize goes nowhere: the server is not started"
                );
                Ok(None)
            }
        }
    }

    /// How re-initializing went, for the started upstream.
    pub fn reestablished(&self, outcome: Result<(), UpstreamError>) {
        if let Stage::Started(upstream) = &*self.stage() {
            upstream.reestablished(outcome);
        }
    }

    /// [`Upstream::restart`] of the started upstream.
    pub fn restart(&self) -> Option<Result<bool, UpstreamError>> {
        match &*self.stage() {
            Stage::Started(upstream) => upstream.restart(),
            _ => None,
        }
    }

    /// [`Upstream::restartable`] of the started upstream.
    pub fn restartable(&self) -> bool {
        matches!(&*self.stage(), Stage::Started(upstream) if upstream.restartable())
    }

    /// The started upstream's upstream session, if any.
    pub fn upstream_session(&self) -> Option<super::UpstreamSession> {
        match &*self.stage() {
            Stage::Started(upstream) => upstream.upstream_session(),
            _ => None,
        }
    }

    /// Releases the server if it started; a later `initialize` starts none. Idempotent.
    pub fn release(&self) {
        if let Some(upstream) = self.stop() {
            upstream.release();
        }
    }

    /// [`Self::release`], leaving a server's session for another replica (`Upstream::detach`).
    pub fn detach(&self) {
        if let Some(upstream) = self.stop() {
            upstream.detach();
        }
    }

    /// No more sends; the started upstream, if any, to let go.
    fn stop(&self) -> Option<Box<Upstream>> {
        match std::mem::replace(&mut *self.stage(), Stage::Released) {
            Stage::Started(upstream) => Some(upstream),
            _ => None,
        }
    }
}
