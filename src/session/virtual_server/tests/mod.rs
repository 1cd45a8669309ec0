//! A virtual server's session with members in this process (no child, no socket) on tokio's
//! paused clock: `routing` tries the bounds of routing and of merged answers against members
//! that page forever, never answer or answer too much; `attribution` what is made of what a
//! member writes out of turn, message by message. Here: the members, and what the session hears.

mod attribution;
mod routing;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::Notify;

use super::members::Members;
use super::{Member, MemberNames, VirtualServer};
use crate::telemetry::metrics::Metrics;
use crate::upstream::credential::Credential;
use crate::upstream::factory::UpstreamFactory;
use crate::upstream::in_process::{InProcessSpec, Serve};
use crate::upstream::virtual_server::VirtualSession;
use crate::upstream::{Sink, UpstreamEvent, UpstreamSpec};
use crate::wire::jsonrpc::{Kind, Message};

/// What a member says to a request: by its method, id and params.
pub(super) type Behave = fn(&str, &Value, &Value) -> Vec<Message>;

/// A member that answers `initialize` with `initialize`, and the rest as `behave` says.
struct Scripted {
    initialize: Value,
    behave: Behave,
}

impl Serve for Scripted {
    fn serve(&self, message: &Message) -> Vec<Message> {
        let (Some(id), Some(method)) = (message.id(), message.method()) else {
            return Vec::new();
        };
        let params: Value = message
            .params()
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or_default();
        match method {
            "initialize" => vec![Message::response(id, self.initialize.clone())],
            _ => (self.behave)(method, id, &params),
        }
    }
}

/// An `initialize` result naming `name`, with `instructions`.
pub(super) fn initialized(name: &str) -> Value {
    let capabilities = json!({ "tools": {}, "resources": {}, "logging": {} });
    json!({ "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "serverInfo": { "name": name, "version": "1" }, "instructions": name })
}

/// What the session hears, in order.
#[derive(Default)]
pub(super) struct Heard {
    pub(super) events: Mutex<Vec<UpstreamEvent>>,
    more: Notify,
}

impl Sink for Heard {
    fn deliver(&self, event: UpstreamEvent) {
        self.events.lock().unwrap().push(event);
        self.more.notify_waiters();
    }
}

impl Heard {
    /// The answer to `id`, waited for (on the paused clock, as long as it takes).
    pub(super) async fn answer(&self, id: u64) -> Value {
        loop {
            let more = self.more.notified();
            if let Some(answer) = self.find(id) {
                return answer;
            }
            more.await;
        }
    }

    pub(super) fn find(&self, id: u64) -> Option<Value> {
        let events = self.events.lock().unwrap();
        events.iter().find_map(|event| match event {
            UpstreamEvent::Message(m)
                if m.kind() == Kind::Response && m.id() == Some(&json!(id)) =>
            {
                serde_json::from_slice(&m.to_bytes()).ok()
            }
            _ => None,
        })
    }

    pub(super) fn messages(&self) -> Vec<Value> {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter_map(|event| match event {
                UpstreamEvent::Message(m) | UpstreamEvent::Within { message: m, .. } => {
                    serde_json::from_slice(&m.to_bytes()).ok()
                }
                _ => None,
            })
            .collect()
    }
}

pub(super) fn member(name: &str, behave: Behave) -> Member {
    member_initialized(name, initialized(name), behave)
}

/// A member answering `initialize` with `initialize`.
pub(super) fn member_initialized(name: &str, initialize: Value, behave: Behave) -> Member {
    let metrics = Metrics::default().server(name);
    let scripted = Scripted { initialize, behave };
    let spec = UpstreamSpec::InProcess(InProcessSpec::new(scripted));
    Member {
        request_timeout: Duration::from_secs(10),
        names: MemberNames {
            name: name.to_owned(),
            tools: Default::default(),
            prompts: Default::default(),
            resources: Default::default(),
        },
        factory: Arc::new(UpstreamFactory::new(spec, metrics)),
    }
}

/// A session of a virtual server of `members`, initialized: what it hears.
pub(super) async fn session(members: Vec<Member>) -> (Arc<Members>, Arc<Heard>) {
    let window = crate::session::log::Window::default();
    let server = VirtualServer::new("v", "__", members, window, Metrics::default().server("v"));
    let heard = Arc::new(Heard::default());
    let members = Members::open(Arc::new(server), Credential::default(), heard.clone(), None);
    let initialize = request(1, "initialize", json!({ "protocolVersion": "2025-11-25" }));
    members.send(initialize).await.unwrap();
    heard.answer(1).await;
    (members, heard)
}

pub(super) fn request(id: u64, method: &str, params: Value) -> Message {
    let raw = serde_json::value::to_raw_value(&params).unwrap();
    Message::request(Some(json!(id)), method, Some(raw))
}

pub(super) fn read(id: &Value, uri: &str) -> Vec<Message> {
    let contents = json!({ "contents": [{ "uri": uri, "text": "read" }] });
    vec![Message::response(id, contents)]
}

/// Serves `file:///{path}` and reads it.
pub(super) fn files(method: &str, id: &Value, params: &Value) -> Vec<Message> {
    match method {
        "resources/templates/list" => vec![Message::response(
            id,
            json!({ "resourceTemplates": [{ "uriTemplate": "file:///{path}" }] }),
        )],
        "resources/list" => vec![Message::response(id, json!({ "resources": [] }))],
        "resources/read" => read(id, params["uri"].as_str().unwrap_or_default()),
        _ => vec![Message::response(id, json!({}))],
    }
}

/// Answers `tools/list` with one tool, `real`, and everything else with `{}`.
pub(super) fn plain(method: &str, id: &Value, _: &Value) -> Vec<Message> {
    match method {
        "tools/list" => vec![Message::response(
            id,
            json!({ "tools": [{ "name": "real", "inputSchema": { "type": "object" } }] }),
        )],
        _ => vec![Message::response(id, json!({}))],
    }
}

/// The names of a `tools/list` answer.
pub(super) fn tool_names(listed: &Value) -> Vec<String> {
    let tools = listed["result"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    tools
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}
