//! A virtual server as an upstream: to its session it is one server, reached with `send` and
//! heard through the session's sink like any other. What it is made of (each member's own
//! upstream, the router, the merging of answers) is the session layer's, behind these two
//! traits: [`VirtualServer`] opens a session's members, [`VirtualSession`] is what the session
//! holds.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::credential::Credential;
use super::{EventSink, UpstreamError};
use crate::wire::jsonrpc::Message;

/// A future a virtual session's `send` returns: boxed and `Send`.
pub type Sending<'a> = Pin<Box<dyn Future<Output = Result<(), UpstreamError>> + Send + 'a>>;

/// A configured virtual server: what opens its sessions' members.
pub trait VirtualServer: Send + Sync {
    /// One session's members: what they say reaches `events`. `credential` is the client's, as
    /// the front made it for the virtual server. `resumed`: the record of a session taken over
    /// from another replica ([`VirtualSession::record`]), whose members go on in the sessions
    /// their servers keep where they can.
    fn open(
        &self,
        credential: Credential,
        events: EventSink,
        resumed: Option<&str>,
    ) -> Arc<dyn VirtualSession>;

    /// The members, for operators: `name (what it runs)`, in order.
    fn display(&self) -> String;
}

/// One session of a virtual server: its members, as the session's upstream.
pub trait VirtualSession: Send + Sync {
    /// Takes one message of the session's, as a server would.
    fn send(&self, message: Message) -> Sending<'_>;

    /// Lets every member go (as `Upstream::release` does). Idempotent.
    fn release(&self);

    /// Lets every member go as `Upstream::detach` does: a Streamable HTTP member's session is
    /// left for another replica. Idempotent.
    fn detach(&self);

    /// The sessions its members' servers keep, as the shared store holds them; `None` when no
    /// member's server keeps one.
    fn record(&self) -> Option<String>;
}

impl fmt::Debug for dyn VirtualServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VirtualServer({})", self.display())
    }
}

impl fmt::Debug for dyn VirtualSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("VirtualSession")
    }
}
