//! `messages/listen` (seed `002`): a long-lived answer (SSE over HTTP, frames on a WebSocket)
//! that starts with
//! `notifications/messages/listen`, then carries the notifications of one scope: a data-layer
//! session's (its resource updates and list changes, from its own upstream session), or, for a
//! global listen, those of the session that serves the client without one. Nothing of one
//! data-layer session ever reaches another's listen. At shutdown the listen ends with its
//! result.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::front::body::Body;
use crate::front::request::event_stream;
use crate::front::App;
use crate::jsonrpc;
use crate::session::layer::META_KEY;
use crate::session::{Reader, Session};
use crate::sse;

const ACKNOWLEDGED: &str = "notifications/messages/listen";

/// How a listen's messages are written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// SSE events, with keep-alive comments.
    Sse,
    /// Each message as it is (a WebSocket frame each).
    Raw,
}

/// Opens a listen on `session`'s notifications as an SSE response; `scoped` names the
/// data-layer session it is scoped to (none: global). `keep` lives as long as the listen (a
/// session of its own).
pub fn open<K: Send + 'static>(
    app: &App,
    session: Arc<Session>,
    id: Value,
    scoped: Option<String>,
    keep: K,
) -> http::Response<Body> {
    let (chunks, body) = mpsc::channel(64);
    spawn(app, session, id, scoped, chunks, Framing::Sse, keep);
    event_stream(Body::Stream(body))
}

/// Opens a listen whose messages go to `out` one by one, until `out` closes.
pub fn relay(
    app: &App,
    session: Arc<Session>,
    id: Value,
    scoped: Option<String>,
    out: mpsc::Sender<Bytes>,
) {
    spawn(app, session, id, scoped, out, Framing::Raw, ());
}

fn spawn<K: Send + 'static>(
    app: &App,
    session: Arc<Session>,
    id: Value,
    scoped: Option<String>,
    chunks: mpsc::Sender<Bytes>,
    framing: Framing,
    keep: K,
) {
    let reader = session.tap();
    let shutdown = app.shutdown.clone();
    let keep_alive = app.http.sse_keep_alive;
    tokio::spawn(async move {
        let listen = Listen {
            chunks,
            framing,
            keep_alive,
        };
        listen.run(reader, id, scoped, shutdown).await;
        drop(session);
        drop(keep);
    });
}

struct Listen {
    chunks: mpsc::Sender<Bytes>,
    framing: Framing,
    /// How often an idle SSE stream gets a comment (`http.sse_keep_alive`).
    keep_alive: Duration,
}

/// Whether a listen carries `message`: the server's notifications about what changed.
fn carried(message: &Value) -> bool {
    message.get("id").is_none()
        && message["method"]
            .as_str()
            .is_some_and(|m| m == "notifications/resources/updated" || m.ends_with("/list_changed"))
}

impl Listen {
    async fn run(
        &self,
        mut reader: Reader,
        id: Value,
        scoped: Option<String>,
        shutdown: CancellationToken,
    ) {
        let params = match &scoped {
            Some(session_id) => json!({ "_meta": { META_KEY: { "sessionId": session_id } } }),
            None => json!({}),
        };
        let ack = json!({ "jsonrpc": "2.0", "method": ACKNOWLEDGED, "params": params });
        if !self.send(&ack).await {
            return;
        }
        let mut keep_alive = tokio::time::interval(self.keep_alive);
        keep_alive.tick().await;
        loop {
            tokio::select! {
                delivery = reader.next() => {
                    let Some(delivery) = delivery else { break };
                    for event in delivery.events {
                        let Ok(message) = serde_json::from_slice::<Value>(&event.payload) else {
                            continue;
                        };
                        if carried(&message) && !self.send(&message).await {
                            return;
                        }
                    }
                }
                _ = keep_alive.tick(), if self.framing == Framing::Sse => {
                    if self.chunks.send(sse::keep_alive()).await.is_err() {
                        return;
                    }
                }
                () = shutdown.cancelled() => break,
                () = self.chunks.closed() => return,
            }
        }
        self.send(&jsonrpc::result_value(&id, json!({}))).await;
    }

    async fn send(&self, message: &Value) -> bool {
        let text = message.to_string();
        let chunk = match self.framing {
            Framing::Sse => sse::event(None, text.as_bytes()),
            Framing::Raw => Bytes::from(text),
        };
        self.chunks.send(chunk).await.is_ok()
    }
}
