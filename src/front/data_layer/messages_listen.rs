//! `messages/listen` (seed `002`): a long-lived answer (SSE over HTTP, frames on a WebSocket)
//! that starts with
//! `notifications/messages/listen`, then carries the notifications of one scope: a data-layer
//! session's (its resource updates and list changes, from its own upstream session), or, for a
//! global listen, those of the session that serves the client without one. Nothing of one
//! data-layer session ever reaches another's listen. At shutdown the listen ends with its
//! result.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::front::event_stream::{self, KeepAlive, Next, Options, Source};
use crate::front::App;
use crate::session::data_layer::META_KEY;
use crate::session::{Reader, Session};
use crate::wire::http_body::Body;
use crate::wire::jsonrpc;
use crate::wire::methods;
use crate::wire::sse;

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
    let (listen, options) = listen(app, session, id, scoped, Framing::Sse, keep);
    event_stream::open(listen, options)
}

/// Opens a listen whose messages go to `out` one by one, until `out` closes.
pub fn relay(
    app: &App,
    session: Arc<Session>,
    id: Value,
    scoped: Option<String>,
    out: mpsc::Sender<Bytes>,
) {
    let (listen, options) = listen(app, session, id, scoped, Framing::Raw, ());
    event_stream::spawn(listen, options, out);
}

/// A listen and how it is written: its acknowledgment first, its result last (when the
/// session ends or the proxy stops).
fn listen<K: Send + 'static>(
    app: &App,
    session: Arc<Session>,
    id: Value,
    scoped: Option<String>,
    framing: Framing,
    keep: K,
) -> (Listen<K>, Options) {
    let params = match &scoped {
        Some(session_id) => json!({ "_meta": { META_KEY: { "sessionId": session_id } } }),
        None => json!({}),
    };
    let ack = json!({ "jsonrpc": "2.0", "method": methods::MESSAGES_LISTEN_ACKNOWLEDGED, "params": params });
    let end = jsonrpc::result_value(&id, json!({}));
    let mut options = Options::new(&app.http.now(), app.shutdown.clone());
    options.prelude = Some(framing.frame(&ack));
    options.at_shutdown = Some(framing.frame(&end));
    options.buffered = 64;
    if framing == Framing::Raw {
        options.keep_alive = KeepAlive::Off;
    }
    let listen = Listen {
        reader: session.tap(),
        framing,
        end: framing.frame(&end),
        _session: session,
        _keep: keep,
    };
    (listen, options)
}

struct Listen<K> {
    reader: Reader,
    framing: Framing,
    /// The listen's result, sent when its session ends.
    end: Bytes,
    _session: Arc<Session>,
    /// Lives as long as the listen.
    _keep: K,
}

/// Whether a listen carries `message`: the server's notifications about what changed.
fn carried(message: &Value) -> bool {
    message.get("id").is_none()
        && message["method"]
            .as_str()
            .is_some_and(|m| m == methods::RESOURCES_UPDATED || m.ends_with("/list_changed"))
}

impl<K: Send + 'static> Source for Listen<K> {
    async fn next(&mut self, until: Option<Instant>) -> Next {
        loop {
            let delivery = match event_stream::before(until, self.reader.next()).await {
                None => return Next::Idle,
                Some(None) => return Next::End(Some(self.end.clone())),
                Some(Some(delivery)) => delivery,
            };
            let frames: Vec<Bytes> = delivery
                .events
                .iter()
                .filter_map(|event| serde_json::from_slice::<Value>(&event.payload).ok())
                .filter(carried)
                .map(|message| self.framing.frame(&message))
                .collect();
            if !frames.is_empty() {
                return Next::Frames(frames);
            }
        }
    }
}

impl Framing {
    fn frame(self, message: &Value) -> Bytes {
        let text = message.to_string();
        match self {
            Framing::Sse => sse::event(None, text.as_bytes()),
            Framing::Raw => Bytes::from(text),
        }
    }
}
