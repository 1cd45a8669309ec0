//! A server in the proxy's own process: each message a session sends is handed to a [`Serve`],
//! and what it says goes back to the session as a child's would: in order, from a task of its
//! own, waiting for room in the write-behind queue like any reader. No configuration names
//! one; it is how the session layer is tested without processes or sockets.

use std::fmt;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{room_to_read_unless, EventSink, UpstreamError, UpstreamEvent};
use crate::wire::jsonrpc::Message;

/// Messages sent to the server and not yet served.
const QUEUE: usize = 256;

/// What an in-process server does with each message a session sends it.
pub trait Serve: Send + Sync {
    /// What the server says to `message`, in order: notifications and requests of its own,
    /// and for a request its response, or nothing (a server that never answers).
    fn serve(&self, message: &Message) -> Vec<Message>;
}

/// An in-process server, as a session's upstream is configured.
#[derive(Clone)]
pub struct InProcessSpec {
    server: Arc<dyn Serve>,
}

impl InProcessSpec {
    pub fn new(server: impl Serve + 'static) -> InProcessSpec {
        InProcessSpec {
            server: Arc::new(server),
        }
    }
}

impl fmt::Debug for InProcessSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InProcessSpec")
    }
}

/// One session's connection to an in-process server.
#[derive(Debug, Clone)]
pub struct InProcessUpstream {
    to_server: mpsc::Sender<Message>,
    released: CancellationToken,
}

impl InProcessUpstream {
    /// Starts serving a session: what the server says reaches `events`.
    pub fn start(spec: &InProcessSpec, events: EventSink) -> InProcessUpstream {
        let (to_server, mut sent) = mpsc::channel::<Message>(QUEUE);
        let released = CancellationToken::new();
        let (server, stop) = (spec.server.clone(), released.clone());
        tokio::spawn(async move {
            loop {
                let message = tokio::select! {
                    message = sent.recv() => message,
                    () = stop.cancelled() => None,
                };
                let Some(message) = message else {
                    return;
                };
                for said in server.serve(&message) {
                    if !room_to_read_unless(&*events, &stop).await {
                        return;
                    }
                    events.deliver(UpstreamEvent::Message(Box::new(said)));
                }
            }
        });
        InProcessUpstream {
            to_server,
            released,
        }
    }

    /// Hands `message` to the server; waits while it is `QUEUE` messages behind.
    pub async fn send(&self, message: Message) -> Result<(), UpstreamError> {
        if self.released.is_cancelled() {
            return Err(UpstreamError::Gone);
        }
        self.to_server
            .send(message)
            .await
            .map_err(|_| UpstreamError::Gone)
    }

    /// Lets the server go: nothing more is served. Idempotent.
    pub fn release(&self) {
        self.released.cancel();
    }
}
