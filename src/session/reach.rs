//! Where a session's client messages go: its own upstream, on this replica, or the replica that
//! owns the session (this one holds a view of it). The session decides; an `Upstream` is a
//! transport to a server and nothing else.

use crate::upstream::owner::OwnerLink;
use crate::upstream::{Upstream, UpstreamError};
use crate::wire::jsonrpc::Message;

#[derive(Debug, Clone)]
pub enum Reach {
    /// This replica serves the session: its messages go to its server.
    Here(Upstream),
    /// Another replica owns the session: its messages hop there.
    Owner(OwnerLink),
}

impl Reach {
    /// Sends one message to the server, or to the owner that carries it to the server.
    pub async fn send(&self, message: Message) -> Result<(), UpstreamError> {
        match self {
            Reach::Here(upstream) => upstream.send(message).await,
            Reach::Owner(owner) => owner
                .forward(&message)
                .await
                .map(|_| ())
                .map_err(Into::into),
        }
    }

    /// How the session's `initialize` went after its server forgot it (an owner re-initializes
    /// its own upstream).
    pub fn reestablished(&self, outcome: Result<(), UpstreamError>) {
        if let Reach::Here(upstream) = self {
            upstream.reestablished(outcome);
        }
    }

    /// Whether the server waits to be started by the session's `initialize`.
    pub fn awaits_initialize(&self) -> bool {
        matches!(self, Reach::Here(upstream) if upstream.awaits_initialize())
    }

    /// Lets the server go; a view going away leaves the owner's session alone.
    pub fn release(&self) {
        if let Reach::Here(upstream) = self {
            upstream.release();
        }
    }

    /// Lets the server go, leaving its session for another replica (`Upstream::detach`).
    pub fn detach(&self) {
        if let Reach::Here(upstream) = self {
            upstream.detach();
        }
    }

    /// The session's own upstream, when this replica serves it.
    pub fn upstream(&self) -> Option<&Upstream> {
        match self {
            Reach::Here(upstream) => Some(upstream),
            Reach::Owner(_) => None,
        }
    }

    /// The link to the owner, for a view.
    pub fn owner(&self) -> Option<&OwnerLink> {
        match self {
            Reach::Owner(owner) => Some(owner),
            Reach::Here(_) => None,
        }
    }
}
