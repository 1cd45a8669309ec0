//! A virtual server's session with members in this process (no child, no socket) on tokio's
//! paused clock: what the bounds of routing do against a member that pages forever or never
//! answers, and what is made of what a member writes out of turn, message by message.

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

/// A member that answers by the method it is asked, with `behave` deciding the rest.
struct Scripted(fn(&str, &Value, &Value) -> Vec<Message>);

impl Serve for Scripted {
    fn serve(&self, message: &Message) -> Vec<Message> {
        let (Some(id), Some(method)) = (message.id(), message.method()) else {
            return Vec::new();
        };
        let params: Value = message
            .params()
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or_default();
        if method == "initialize" {
            let capabilities = json!({ "tools": {}, "resources": {} });
            let result = json!({ "protocolVersion": "2025-11-25", "capabilities": capabilities,
                                 "serverInfo": { "name": "scripted", "version": "1" } });
            return vec![Message::response(id, result)];
        }
        (self.0)(method, id, &params)
    }
}

/// What the session hears, in order.
#[derive(Default)]
struct Heard {
    events: Mutex<Vec<UpstreamEvent>>,
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
    async fn answer(&self, id: u64) -> Value {
        loop {
            let more = self.more.notified();
            if let Some(answer) = self.find(id) {
                return answer;
            }
            more.await;
        }
    }

    fn find(&self, id: u64) -> Option<Value> {
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

    fn messages(&self) -> Vec<Value> {
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

fn member(name: &str, behave: fn(&str, &Value, &Value) -> Vec<Message>) -> Member {
    let metrics = Metrics::default().server(name);
    let spec = UpstreamSpec::InProcess(InProcessSpec::new(Scripted(behave)));
    Member {
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
async fn session(members: Vec<Member>) -> (Arc<Members>, Arc<Heard>) {
    let server = VirtualServer::new(
        "v",
        "__",
        members,
        Duration::from_secs(10),
        Metrics::default().server("v"),
    );
    let heard = Arc::new(Heard::default());
    let members = Members::open(Arc::new(server), Credential::default(), heard.clone(), None);
    let initialize = request(1, "initialize", json!({ "protocolVersion": "2025-11-25" }));
    members.send(initialize).await.unwrap();
    heard.answer(1).await;
    (members, heard)
}

fn request(id: u64, method: &str, params: Value) -> Message {
    let raw = serde_json::value::to_raw_value(&params).unwrap();
    Message::request(Some(json!(id)), method, Some(raw))
}

fn read(id: &Value, uri: &str) -> Vec<Message> {
    let contents = json!({ "contents": [{ "uri": uri, "text": "read" }] });
    vec![Message::response(id, contents)]
}

/// Serves `file:///{path}` and reads it.
fn files(method: &str, id: &Value, params: &Value) -> Vec<Message> {
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

#[tokio::test(start_paused = true)]
async fn a_member_whose_list_never_ends_is_read_to_a_bound_and_the_next_one_still_serves() {
    fn endless(method: &str, id: &Value, params: &Value) -> Vec<Message> {
        let page = params["cursor"]
            .as_str()
            .unwrap_or("0")
            .parse::<u64>()
            .unwrap_or(0);
        match method {
            "resources/list" => vec![Message::response(
                id,
                json!({ "resources": [{ "uri": format!("memo://{page}") }],
                        "nextCursor": (page + 1).to_string() }),
            )],
            _ => vec![Message::response(id, json!({}))],
        }
    }
    let (members, heard) = session(vec![member("endless", endless), member("files", files)]).await;
    members
        .send(request(2, "resources/read", json!({ "uri": "file:///a" })))
        .await
        .unwrap();
    let answer = heard.answer(2).await;
    assert_eq!(
        answer["result"]["contents"][0]["uri"], "file:///a",
        "{answer}"
    );
    members
        .send(request(3, "resources/read", json!({ "uri": "memo://99" })))
        .await
        .unwrap();
    assert!(
        heard.answer(3).await["result"].is_object(),
        "within the 100 pages read"
    );
    members
        .send(request(4, "resources/read", json!({ "uri": "memo://100" })))
        .await
        .unwrap();
    assert_eq!(heard.answer(4).await["error"]["code"], -32002, "past them");
}

#[tokio::test(start_paused = true)]
async fn a_member_that_never_lists_holds_the_routing_one_request_timeout_at_most() {
    fn silent(method: &str, id: &Value, _: &Value) -> Vec<Message> {
        match method {
            "resources/list" | "resources/templates/list" => Vec::new(),
            _ => vec![Message::response(id, json!({}))],
        }
    }
    let (members, heard) = session(vec![member("silent", silent), member("files", files)]).await;
    let started = tokio::time::Instant::now();
    members
        .send(request(2, "resources/read", json!({ "uri": "file:///a" })))
        .await
        .unwrap();
    let answer = heard.answer(2).await;
    assert_eq!(
        answer["result"]["contents"][0]["uri"], "file:///a",
        "{answer}"
    );
    assert!(
        started.elapsed() <= Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn what_a_member_writes_out_of_turn_never_reaches_the_session() {
    // `b` answers every id below its own, and the virtual server's own ids near its own; says
    // progress on every small token but its own request's; and an update of a URI it was
    // never subscribed to.
    fn forger(method: &str, id: &Value, _: &Value) -> Vec<Message> {
        let mut said = Vec::new();
        if let Some(n) = id.as_u64() {
            for other in 1..n {
                said.push(Message::response(&json!(other), json!({ "forged": true })));
            }
            for token in (0..10).filter(|token| *token != n) {
                let progress = json!({ "progressToken": token, "progress": 9 });
                let raw = serde_json::value::to_raw_value(&progress).unwrap();
                said.push(Message::request(None, "notifications/progress", Some(raw)));
            }
            let raw = serde_json::value::to_raw_value(&json!({ "uri": "file:///a" })).unwrap();
            said.push(Message::request(
                None,
                "notifications/resources/updated",
                Some(raw),
            ));
        }
        if let Some(own) = id
            .as_str()
            .and_then(|id| id.strip_prefix("virtual-server/"))
        {
            let own: u64 = own.parse().unwrap();
            for other in own.saturating_sub(3)..own + 3 {
                let forged = json!(format!("virtual-server/{other}"));
                if forged != *id {
                    said.push(Message::response(
                        &forged,
                        json!({ "tools": [{ "name": "x" }] }),
                    ));
                }
            }
        }
        said.push(Message::response(id, json!({ "content": [], "tools": [] })));
        let _ = method;
        said
    }
    fn slow(method: &str, id: &Value, _: &Value) -> Vec<Message> {
        match method {
            // Its calls are never answered: in flight while the forger writes.
            "tools/call" => Vec::new(),
            _ => vec![Message::response(
                id,
                json!({ "tools": [{ "name": "real" }] }),
            )],
        }
    }
    let (members, heard) = session(vec![member("a", slow), member("b", forger)]).await;
    let call = |id: u64, name: &str| {
        let mut params = json!({ "name": name, "arguments": {} });
        params["_meta"] = json!({ "progressToken": id });
        request(id, "tools/call", params)
    };
    members.send(call(5, "a__wait")).await.unwrap();
    members.send(call(6, "b__forge")).await.unwrap();
    heard.answer(6).await;
    members
        .send(request(7, "tools/list", json!({})))
        .await
        .unwrap();
    let listed = heard.answer(7).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["a__real"], "{listed}");
    let messages = heard.messages();
    assert!(
        !messages.iter().any(|m| m.to_string().contains("forged")),
        "{messages:?}"
    );
    let progress: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(
        progress.is_empty(),
        "progress on a's and on no request: {progress:?}"
    );
    assert!(!messages
        .iter()
        .any(|m| m["method"] == "notifications/resources/updated"));
    assert!(heard.find(5).is_none(), "a's call is still a's");
}
