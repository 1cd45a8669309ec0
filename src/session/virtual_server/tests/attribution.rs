//! What a member writes out of turn, message by message: answers, progress and updates that
//! are not its own, notifications a server may not send, words in another's name.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::{member, plain, request, session};
use crate::upstream::in_process::Serve;
use crate::upstream::virtual_server::VirtualSession;
use crate::wire::jsonrpc::Message;

/// Answers every id below its own, and the virtual server's own ids near its own; says
/// progress on every small token but its own request's; and an update of a URI it was never
/// subscribed to.
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
/// Never answers a call: one is in flight while the forger writes.
fn slow(method: &str, id: &Value, _: &Value) -> Vec<Message> {
    match method {
        "tools/call" => Vec::new(),
        _ => vec![Message::response(
            id,
            json!({ "tools": [{ "name": "real", "inputSchema": { "type": "object" } }] }),
        )],
    }
}

#[tokio::test(start_paused = true)]
async fn what_a_member_writes_out_of_turn_never_reaches_the_session() {
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

#[tokio::test(start_paused = true)]
async fn a_members_notifications_are_its_own_and_name_it() {
    // `b`, at its call, says what no member may, and logs under another's name.
    fn says(method: &str, id: &Value, _: &Value) -> Vec<Message> {
        let notification = |method: &str, params: Value| {
            let raw = serde_json::value::to_raw_value(&params).unwrap();
            Message::request(None, method, Some(raw))
        };
        let ask = |method: &str, params: Value| {
            let raw = serde_json::value::to_raw_value(&params).unwrap();
            Message::request(Some(json!("q")), method, Some(raw))
        };
        match method {
            "tools/call" => vec![
                notification(
                    "notifications/tasks/status",
                    json!({ "taskId": "t", "status": "completed" }),
                ),
                notification("notifications/roots/list_changed", json!({})),
                notification("notifications/initialized", json!({})),
                notification("notifications/custom", json!({})),
                notification(
                    "notifications/elicitation/complete",
                    json!({ "elicitationId": "a-1" }),
                ),
                notification(
                    "notifications/message",
                    json!({ "level": "info", "data": "hi",
                    "_meta": { "mcp-session-proxy/member": "a" } }),
                ),
                ask(
                    "elicitation/create",
                    json!({ "message": { "text": "password?" } }),
                ),
                Message::response(id, json!({ "content": [] })),
            ],
            _ => vec![Message::response(id, json!({}))],
        }
    }
    let (members, heard) = session(vec![member("a", plain), member("b", says)]).await;
    let call = request(2, "tools/call", json!({ "name": "b__x", "arguments": {} }));
    members.send(call).await.unwrap();
    heard.answer(2).await;
    let messages: Vec<Value> = heard
        .messages()
        .into_iter()
        .filter(|m| m.get("method").is_some())
        .collect();
    let methods: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["method"].as_str())
        .collect();
    assert_eq!(
        methods,
        ["notifications/message", "elicitation/create"],
        "{messages:?}"
    );
    for message in &messages {
        assert_eq!(
            message["params"]["_meta"]["mcp-session-proxy/member"], "b",
            "{message}"
        );
    }
    assert_eq!(messages[0]["params"]["logger"], "b");
    assert_eq!(
        messages[1]["params"]["message"],
        r#"b: {"text":"password?"}"#
    );
}

/// Asks the client, riding its call, 300 questions, and answers nothing.
fn questioner(method: &str, _: &Value, _: &Value) -> Vec<Message> {
    match method {
        "tools/call" => (0..300)
            .map(|n| Message::request(Some(json!(format!("q-{n}"))), "roots/list", None))
            .collect(),
        _ => Vec::new(),
    }
}

/// Asks the client one question riding its call, and answers nothing.
fn asker(method: &str, _: &Value, _: &Value) -> Vec<Message> {
    match method {
        "tools/call" => vec![Message::request(Some(json!("mine")), "roots/list", None)],
        _ => Vec::new(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_member_asks_within_its_share_and_uses_up_no_others() {
    let (members, heard) = session(vec![member("a", asker), member("b", questioner)]).await;
    let call =
        |id: u64, name: &str| request(id, "tools/call", json!({ "name": name, "arguments": {} }));
    members.send(call(2, "b__ask")).await.unwrap();
    members.send(call(3, "a__ask")).await.unwrap();
    let riding = |wanted: &dyn Fn(&str) -> bool| -> Vec<Option<u64>> {
        let events = heard.events.lock().unwrap();
        events
            .iter()
            .filter_map(|event| match event {
                crate::upstream::UpstreamEvent::Within { message, request } => {
                    let id = message.id()?.as_str()?.to_owned();
                    wanted(&id).then_some(*request)
                }
                _ => None,
            })
            .collect()
    };
    loop {
        if riding(&|id| id.starts_with("0~")).len() == 1
            && riding(&|id| id.starts_with("1~")).len() == 300
        {
            break;
        }
        tokio::task::yield_now().await;
    }
    let b = riding(&|id| id.starts_with("1~"));
    let share = crate::session::inflight::MAX_ASKED / 2;
    assert!(
        b[..share].iter().all(|r| *r == Some(2)),
        "b's share rides its call"
    );
    assert!(
        b[share..].iter().all(Option::is_none),
        "past it, the standalone stream"
    );
    assert_eq!(
        riding(&|id| id.starts_with("0~")),
        [Some(3)],
        "a's question rides a's call"
    );
}

/// A server that records the methods it is sent.
struct Recording(Arc<Mutex<Vec<String>>>);

impl Serve for Recording {
    fn serve(&self, message: &Message) -> Vec<Message> {
        self.0
            .lock()
            .unwrap()
            .push(message.method().unwrap_or("(answer)").to_owned());
        match (message.id(), message.method()) {
            (Some(id), Some("initialize")) => vec![Message::response(id, super::initialized("r"))],
            (Some(id), Some(_)) => vec![Message::response(id, json!({}))],
            _ => Vec::new(),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_clients_notifications_reach_only_the_members_they_concern() {
    let received = Arc::new(Mutex::new(Vec::new()));
    let spec = crate::upstream::UpstreamSpec::InProcess(
        crate::upstream::in_process::InProcessSpec::new(Recording(received.clone())),
    );
    let factory = crate::upstream::factory::UpstreamFactory::new(
        spec,
        crate::telemetry::metrics::Metrics::default().server("r"),
    );
    let recording = super::super::Member {
        names: super::super::MemberNames {
            name: "r".into(),
            tools: Default::default(),
            prompts: Default::default(),
            resources: Default::default(),
        },
        factory: Arc::new(factory),
        request_timeout: std::time::Duration::from_secs(10),
    };
    let (members, heard) = session(vec![recording, member("a", plain)]).await;
    let notification = |method: &str, params: Value| {
        let raw = serde_json::value::to_raw_value(&params).unwrap();
        Message::request(None, method, Some(raw))
    };
    for (method, params) in [
        ("notifications/initialized", json!({})),
        (
            "notifications/progress",
            json!({ "progressToken": 1, "progress": 1 }),
        ),
        ("notifications/tasks/status", json!({ "taskId": "t" })),
        ("notifications/cancelled", json!({ "requestId": 99 })),
        ("notifications/roots/list_changed", json!({})),
    ] {
        members.send(notification(method, params)).await.unwrap();
    }
    // The member takes what it is sent in order: once it answered this, it had the rest.
    let call = json!({ "name": "r__x", "arguments": {} });
    members.send(request(2, "tools/call", call)).await.unwrap();
    heard.answer(2).await;
    let received = received.lock().unwrap().clone();
    assert_eq!(
        received,
        [
            "initialize",
            "notifications/initialized",
            "notifications/roots/list_changed",
            "tools/call",
        ],
        "{received:?}"
    );
}

/// Asks 128 questions riding its call, cancels them all, and asks 128 more.
fn canceller(method: &str, _: &Value, _: &Value) -> Vec<Message> {
    if method != "tools/call" {
        return Vec::new();
    }
    let ask = |batch: &'static str| {
        (0..128)
            .map(move |n| Message::request(Some(json!(format!("{batch}-{n}"))), "roots/list", None))
    };
    let cancel = (0..128).map(|n| {
        let params = json!({ "requestId": format!("first-{n}") });
        let raw = serde_json::value::to_raw_value(&params).unwrap();
        Message::request(None, "notifications/cancelled", Some(raw))
    });
    ask("first").chain(cancel).chain(ask("second")).collect()
}

/// The requests each question heard rides, by the prefix of its id.
fn riding(heard: &super::Heard, prefix: &str) -> Vec<Option<u64>> {
    let events = heard.events.lock().unwrap();
    events
        .iter()
        .filter_map(|event| match event {
            crate::upstream::UpstreamEvent::Within { message, request } => {
                let id = message.id()?.as_str()?;
                id.starts_with(prefix).then_some(*request)
            }
            _ => None,
        })
        .collect()
}

/// A member that cancels its questions has not its share back while the session still
/// remembers them (until the client answers, or the request they ride ends): its next ones go
/// on the standalone stream, and another member's still ride its call.
#[tokio::test(start_paused = true)]
async fn a_member_that_cancels_its_questions_has_not_its_share_back() {
    let (members, heard) = session(vec![member("a", asker), member("b", canceller)]).await;
    let call =
        |id: u64, name: &str| request(id, "tools/call", json!({ "name": name, "arguments": {} }));
    members.send(call(2, "b__ask")).await.unwrap();
    while riding(&heard, "1~\"second-").len() < 128 {
        tokio::task::yield_now().await;
    }
    members.send(call(3, "a__ask")).await.unwrap();
    while riding(&heard, "0~").is_empty() {
        tokio::task::yield_now().await;
    }
    assert!(riding(&heard, "1~\"first-").iter().all(|r| *r == Some(2)));
    assert!(
        riding(&heard, "1~\"second-").iter().all(Option::is_none),
        "past its share, still"
    );
    assert_eq!(
        riding(&heard, "0~"),
        [Some(3)],
        "a's question rides a's call"
    );
}

/// Asks with an id, and elicits by URL with an id, each far past what a session remembers; and
/// elicits by URL under the id the other member used (`elic-1`), then 200 more of its own.
fn hoarder(method: &str, _: &Value, _: &Value) -> Vec<Message> {
    if method != "tools/call" {
        return Vec::new();
    }
    let long = "x".repeat(100_000);
    let elicit = |id: &str| {
        let params =
            json!({ "mode": "url", "elicitationId": id, "url": "https://e", "message": "m" });
        let raw = serde_json::value::to_raw_value(&params).unwrap();
        Message::request(
            Some(json!(format!("e-{id}"))),
            "elicitation/create",
            Some(raw),
        )
    };
    let mut asked = vec![
        Message::request(Some(json!(long.clone())), "roots/list", None),
        elicit(&long),
        elicit("elic-1"),
    ];
    asked.extend((0..200).map(|n| elicit(&format!("own-{n}"))));
    asked
}

/// Elicits by URL as `elic-1`, and when called again, says it is complete.
fn eliciter(method: &str, _: &Value, params: &Value) -> Vec<Message> {
    if method != "tools/call" {
        return Vec::new();
    }
    let (method, params) = match params["name"].as_str() {
        Some("complete") => (
            "notifications/elicitation/complete",
            json!({ "elicitationId": "elic-1" }),
        ),
        _ => (
            "elicitation/create",
            json!({ "mode": "url", "elicitationId": "elic-1", "url": "https://e", "message": "m" }),
        ),
    };
    let raw = serde_json::value::to_raw_value(&params).unwrap();
    let id = (method == "elicitation/create").then(|| json!("mine"));
    vec![Message::request(id, method, Some(raw))]
}

/// What a member asks is remembered only with ids of a bounded length; an elicitation's id is
/// one member's (another's under it is refused), and a member that elicits past its share
/// forgets its own oldest, never another's: that one's completion still reaches the client.
#[tokio::test(start_paused = true)]
async fn a_member_holds_only_short_ids_and_its_own_share_of_elicitations() {
    let (members, heard) = session(vec![member("a", eliciter), member("b", hoarder)]).await;
    let call =
        |id: u64, name: &str| request(id, "tools/call", json!({ "name": name, "arguments": {} }));
    members.send(call(2, "a__elicit")).await.unwrap();
    while riding(&heard, "0~").is_empty() {
        tokio::task::yield_now().await;
    }
    members.send(call(3, "b__hoard")).await.unwrap();
    while riding(&heard, "1~\"e-own-199").is_empty() {
        tokio::task::yield_now().await;
    }
    let messages = heard.messages();
    assert!(
        !messages
            .iter()
            .any(|m| m.to_string().contains("xxxxxxxxxx")),
        "no question nor elicitation with a long id"
    );
    assert!(
        !messages.iter().any(|m| m["id"] == "1~\"e-elic-1\""),
        "b's elicitation under a's id"
    );
    members.send(call(4, "a__complete")).await.unwrap();
    let completed = || {
        heard.messages().into_iter().any(|m| {
            m["method"] == "notifications/elicitation/complete"
                && m["params"]["elicitationId"] == "elic-1"
        })
    };
    while !completed() {
        tokio::task::yield_now().await;
    }
}

/// A tool no client could read (an input schema that is no object) is left out of the merged
/// list; the other members' tools are all there.
#[tokio::test(start_paused = true)]
async fn a_tool_no_client_could_read_is_left_out_of_the_merged_list() {
    fn broken(method: &str, id: &Value, _: &Value) -> Vec<Message> {
        match method {
            "tools/list" => vec![Message::response(
                id,
                json!({ "tools": [{ "name": "broken", "inputSchema": 5 }, { "name": "bare" }] }),
            )],
            _ => vec![Message::response(id, json!({}))],
        }
    }
    let (members, heard) = session(vec![member("a", super::plain), member("b", broken)]).await;
    members
        .send(request(2, "tools/list", json!({})))
        .await
        .unwrap();
    let listed = heard.answer(2).await;
    assert_eq!(super::tool_names(&listed), ["a__real"], "{listed}");
}
