//! An upstream made of several servers (a virtual server): to its session it is one server,
//! reached with `send` and heard through the session's sink like any other; what it is made of
//! (each member's own upstream, names and routes) is the session layer's, behind [`Compose`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::credential::Credential;
use super::{EventSink, UpstreamError};
use crate::wire::jsonrpc::Message;

/// A future an upstream made of others returns: boxed and `Send`.
pub type Sending<'a> = Pin<Box<dyn Future<Output = Result<(), UpstreamError>> + Send + 'a>>;

/// What composes a virtual server's members, once per served virtual server.
pub trait Compose: Send + Sync {
    /// One session's composed upstream: what its members say reaches `events`. `credential` is
    /// the client's, as the front made it for the virtual server. `resumed`: the record of a
    /// session taken over from another replica ([`Composed::record`]), whose members go on in
    /// the sessions their servers keep where they can.
    fn start(
        &self,
        credential: Credential,
        events: EventSink,
        resumed: Option<&str>,
    ) -> Arc<dyn Composed>;

    /// The members, for operators: `name (what it runs)`, in order.
    fn display(&self) -> String;
}

/// One session's composed upstream.
pub trait Composed: Send + Sync {
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

/// A virtual server, as a session's upstream is configured.
#[derive(Clone)]
pub struct ComposedSpec {
    compose: Arc<dyn Compose>,
}

impl ComposedSpec {
    pub fn new(compose: Arc<dyn Compose>) -> ComposedSpec {
        ComposedSpec { compose }
    }

    pub fn display(&self) -> String {
        self.compose.display()
    }

    /// A session's composed upstream (going on from `resumed`, a record of another
    /// replica's).
    pub fn start(
        &self,
        credential: Credential,
        events: EventSink,
        resumed: Option<&str>,
    ) -> ComposedUpstream {
        ComposedUpstream(self.compose.start(credential, events, resumed))
    }
}

impl fmt::Debug for ComposedSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ComposedSpec({})", self.display())
    }
}

/// One session's composed upstream, as the session holds it.
#[derive(Clone)]
pub struct ComposedUpstream(Arc<dyn Composed>);

impl ComposedUpstream {
    pub async fn send(&self, message: Message) -> Result<(), UpstreamError> {
        self.0.send(message).await
    }

    pub fn release(&self) {
        self.0.release();
    }

    pub fn detach(&self) {
        self.0.detach();
    }

    pub fn record(&self) -> Option<String> {
        self.0.record()
    }
}

impl fmt::Debug for ComposedUpstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ComposedUpstream")
    }
}
