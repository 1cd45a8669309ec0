//! What the session layer's own tests share: a registry in front of a server in this process
//! (no child, no socket), the server's behaviour by tool name, and the reading of a stream.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};

use super::log::StreamKey;
use super::{Registry, Session, SessionSettings, Shape};
use crate::base::caller::Caller;
use crate::base::ids::Principal;
use crate::telemetry::metrics::Metrics;
use crate::upstream::in_process::{InProcessSpec, Serve};
use crate::upstream::UpstreamSpec;
use crate::wire::jsonrpc::{Kind, Message};

/// The longest a test waits for what it reads.
const PATIENCE: Duration = Duration::from_secs(5);

/// A server with one behaviour per tool: `echo` answers its `text`; `chatty` logs a message
/// before it answers; `ask` asks the client for its roots and answers once it has them;
/// `ask_many` asks 300 times and answers nothing;
/// `announce` says its tools changed, twice, before it answers; `never` is never answered. It
/// answers `initialize` and every other request with an empty result.
pub struct TestServer;

impl Serve for TestServer {
    fn serve(&self, message: &Message) -> Vec<Message> {
        let Some(id) = message.id().cloned() else {
            return Vec::new();
        };
        if message.kind() == Kind::Response {
            // The client's roots: the `ask` call it answers is answered in turn.
            let answered = id.as_str().and_then(|id| id.strip_prefix("roots-for-"));
            let call_id = answered.and_then(|raw| serde_json::from_str(raw).ok());
            return call_id
                .map(|call_id| vec![Message::response(&call_id, text("roots received"))])
                .unwrap_or_default();
        }
        let params: Value = message
            .params()
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or_default();
        match (
            message.method().unwrap_or_default(),
            params["name"].as_str(),
        ) {
            ("initialize", _) => vec![Message::response(&id, initialize_result())],
            ("tools/call", Some("echo")) => {
                let said = params["arguments"]["text"].as_str().unwrap_or_default();
                vec![Message::response(&id, text(said))]
            }
            ("tools/call", Some("chatty")) => vec![
                notification(
                    "notifications/message",
                    json!({ "level": "info", "data": "hi" }),
                ),
                Message::response(&id, text("done")),
            ],
            ("tools/call", Some("ask")) => {
                let asked = format!("roots-for-{id}");
                vec![Message::request(Some(json!(asked)), "roots/list", None)]
            }
            // A server that asks and asks, answering nothing.
            ("tools/call", Some("ask_many")) => (0..300)
                .map(|n| Message::request(Some(json!(format!("q-{n}"))), "roots/list", None))
                .collect(),
            ("tools/call", Some("announce")) => vec![
                notification("notifications/tools/list_changed", json!({})),
                notification("notifications/tools/list_changed", json!({})),
                Message::response(&id, text("announced")),
            ],
            ("tools/call", Some("never")) => Vec::new(),
            _ => vec![Message::response(&id, json!({}))],
        }
    }
}

fn initialize_result() -> Value {
    json!({
        "protocolVersion": "2025-11-25",
        "capabilities": { "tools": { "listChanged": true } },
        "serverInfo": { "name": "in-process", "version": "1" },
    })
}

fn text(text: impl std::fmt::Display) -> Value {
    json!({ "content": [{ "type": "text", "text": text.to_string() }] })
}

fn notification(method: &str, params: Value) -> Message {
    Message::parse(Bytes::from(
        json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string(),
    ))
    .expect("a notification")
}

/// A registry in front of [`TestServer`].
pub fn registry(settings: SessionSettings) -> Arc<Registry> {
    let metrics = Metrics::default().server("test");
    let upstream = UpstreamSpec::InProcess(InProcessSpec::new(TestServer));
    Arc::new(Registry::new(upstream, settings, metrics))
}

/// A principal of its own for each name.
pub fn principal(name: &str) -> Principal {
    Principal::from_credential(name.as_bytes())
}

/// A caller acting for `principal(name)`, without a credential.
pub fn caller(name: &str) -> Caller {
    Caller::without_credential(principal(name))
}

/// A session of `principal`, initialized as a client would.
pub async fn initialized(registry: &Registry, principal: Principal) -> Arc<Session> {
    let session = registry
        .create(&Caller::without_credential(principal), Shape::Streams)
        .await
        .expect("a session");
    let params = serde_json::value::to_raw_value(&json!({
        "protocolVersion": "2025-11-25",
        "capabilities": { "roots": {} },
        "clientInfo": { "name": "test", "version": "1" },
    }))
    .ok();
    crate::session::handshake::initialize_as_client(&session, registry, params)
        .await
        .expect("initialized");
    session
}

/// A client's request.
pub fn request(id: Value, method: &str, params: Value) -> Message {
    Message::parse(Bytes::from(
        json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string(),
    ))
    .expect("a request")
}

/// A client's `tools/call` of `tool`.
pub fn call(id: Value, tool: &str) -> Message {
    request(
        id,
        "tools/call",
        json!({ "name": tool, "arguments": { "text": "hello" } }),
    )
}

/// Every message of `stream` up to its end, as the client reads them (bounded).
pub async fn read_all(session: &Arc<Session>, stream: StreamKey) -> Vec<Value> {
    let read = read_from(session, stream, None, usize::MAX).await;
    read.into_iter().map(|(_, message)| message).collect()
}

/// The messages of `stream` after event `after`, at most `count` of them, each with its
/// position in the log (bounded).
pub async fn read_from(
    session: &Arc<Session>,
    stream: StreamKey,
    after: Option<u64>,
    count: usize,
) -> Vec<(u64, Value)> {
    let mut reader = session.attach(stream, after);
    let mut read = Vec::new();
    while read.len() < count {
        let next = tokio::time::timeout(PATIENCE, reader.next()).await;
        let Some(delivery) = next.expect("the stream went on within the test's patience") else {
            break;
        };
        read.extend(
            delivery
                .events
                .iter()
                .filter(|event| !event.payload.is_empty())
                .map(|event| {
                    (
                        event.seq,
                        serde_json::from_slice(&event.payload).expect("JSON"),
                    )
                }),
        );
    }
    read
}
