//! Protocol-level sessions (seed `000`, "MCP Session Elevation") over WebSocket and Streamable
//! HTTP, in front of the demo stdio server: the seed's JSON-RPC examples as test vectors, resume
//! with and without catch-up, coalescing while detached, `session/end`, cross-transport resume,
//! one active connection per session, and discovery.

use crate::harness::ws::Ws;
use crate::harness::{eventually, within, Client, Proxy, Reply};
use http::StatusCode;
use serde_json::{json, Value};

fn seq(event_id: &Value) -> u64 {
    event_id
        .as_str()
        .and_then(|id| id.strip_prefix("se_"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a sessionEventId like \"se_<n>\": {event_id}"))
}

/// A WebSocket with a protocol-level session, initialized.
async fn started(proxy: &Proxy) -> (Ws, String) {
    let mut ws = Ws::connect(proxy.addr()).await;
    let session_id = ws.start_session().await;
    ws.initialize().await;
    (ws, session_id)
}

/// The demo's `progress` tool: `steps` notifications `delay_ms` apart, then the answer.
fn progress_call(id: u64, steps: u64, delay_ms: u64) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "progress", "arguments": { "steps": steps, "delay_ms": delay_ms },
                        "_meta": { "progressToken": format!("p{id}") } } })
}

async fn connections_closed(proxy: &Proxy) {
    eventually("the proxy to see the WebSocket go", || {
        proxy.metric("mcp_proxy_websocket_connections") == 0
    })
    .await;
}

/// A Streamable HTTP client that names a protocol-level session by its header.
fn http_client(proxy: &Proxy, session_id: &str) -> Client {
    let mut client = proxy.client();
    client
        .extra_headers
        .push(("mcp-protocol-session-id".into(), session_id.into()));
    client
}

/// POSTs a request for a protocol-level session: accepted, answered on the channel.
async fn http_send(client: &Client, message: Value) {
    let reply = client.post(&message).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{message}");
}

/// `session/resume` over HTTP: the channel, with its first message (the result) read.
async fn http_resume(proxy: &Proxy, params: Value) -> (Value, Reply) {
    let mut channel = proxy
        .client()
        .post(&json!({ "jsonrpc": "2.0", "id": 2, "method": "session/resume", "params": params }))
        .await;
    assert_eq!(channel.status, StatusCode::OK);
    assert!(channel.is_sse(), "the channel is an event stream");
    let result = within("the resume result", channel.next_message())
        .await
        .expect("a first event");
    assert_eq!(
        result.id, None,
        "no Last-Event-ID on a protocol-level channel"
    );
    (result.message, channel)
}

#[tokio::test]
async fn the_seed_examples_work_verbatim_over_websocket() {
    let proxy = Proxy::start().await;
    let mut ws = Ws::connect(proxy.addr()).await;

    // 1) Session Start, exactly as the seed writes it (no "jsonrpc" member).
    ws.send(json!({ "id": 1, "method": "session/start", "params": {} }))
        .await;
    let started = ws.response_to(json!(1)).await;
    let session_id = started["result"]["sessionId"].as_str().unwrap().to_owned();
    assert!(session_id.len() >= 22, "a CSPRNG id: {session_id}");
    ws.initialize().await;
    ws.request("resources/subscribe", json!({ "uri": "doc:/foo" }))
        .await;
    let emitted = ws
        .request(
            "tools/call",
            json!({ "name": "emit_updates", "arguments": { "uris": ["doc:/foo"], "count": 1 } }),
        )
        .await;
    let live = ws.recv().await;
    assert_eq!(live["method"], "notifications/resources/updated");
    let last = live["params"]["sessionEventId"].clone();
    ws.cut();
    connections_closed(&proxy).await;

    // Missed while detached: three updates of one resource, sent over HTTP.
    let http = http_client(&proxy, &session_id);
    let logged = proxy.metric("mcp_proxy_events_logged_total");
    http_send(
        &http,
        json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": { "name": "emit_updates", "arguments": { "uris": ["doc:/foo"], "count": 3 } } }),
    )
    .await;
    eventually("the updates and the answer to be logged", || {
        proxy.metric("mcp_proxy_events_logged_total") == logged + 4
    })
    .await;

    // 2) Session Resume with catch-up.
    let mut ws = Ws::connect(proxy.addr()).await;
    ws.send(json!({ "id": 2, "method": "session/resume",
                    "params": { "sessionId": session_id, "lastSessionEventId": last } }))
        .await;
    let resumed = ws.recv().await;
    assert_eq!(resumed["id"], 2);
    assert_eq!(
        resumed["result"],
        json!({ "resumed": true, "catchup": true })
    );
    // Everything after the last notification processed: the answer to the first call (it
    // followed that notification; responses carry no sessionEventId, the client matches them
    // by id), then the three updates as one, then the missed answer.
    let mut missed = Vec::new();
    loop {
        let message = ws.recv().await;
        missed.push(message.clone());
        if message["id"] == 9 {
            assert_eq!(message["result"]["content"][0]["text"], "emitted 3 updates");
            break;
        }
    }
    let updates: Vec<&Value> = missed
        .iter()
        .filter(|m| m["method"] == "notifications/resources/updated")
        .collect();
    assert_eq!(
        updates.len(),
        1,
        "three updates coalesced into one: {missed:?}"
    );
    assert_eq!(updates[0]["params"]["uri"], "doc:/foo");
    assert!(seq(&updates[0]["params"]["sessionEventId"]) > seq(&last));
    assert_eq!(missed.len(), 3, "{missed:?}");
    assert_eq!(
        missed[0]["id"], emitted["id"],
        "the answer already had, by its id"
    );

    // 3) Session End.
    ws.send(json!({ "id": 3, "method": "session/end", "params": { "sessionId": session_id } }))
        .await;
    let ended = ws.response_to(json!(3)).await;
    assert_eq!(ended["result"], json!({}));
    let again = ws
        .request("session/resume", json!({ "sessionId": session_id }))
        .await;
    assert_eq!(again["error"]["code"], -32043);
    assert_eq!(again["error"]["data"]["sessionId"], session_id);
    proxy.stop().await;
}

#[tokio::test]
async fn a_cut_websocket_resumes_on_a_new_one_with_every_missed_event_once_and_in_order() {
    let proxy = Proxy::start().await;
    let (mut ws, session_id) = started(&proxy).await;
    // Progress notifications are never coalesced: every one must arrive.
    ws.send(progress_call(50, 6, 30)).await;
    let first = ws.recv().await;
    assert_eq!(first["method"], "notifications/progress");
    assert_eq!(first["params"]["progress"], 1);
    let last = first["params"]["sessionEventId"].clone();
    ws.cut();

    let mut ws = Ws::connect(proxy.addr()).await;
    let resumed = ws.resume(&session_id, &last).await;
    assert_eq!(resumed["catchup"], true);
    let mut progress = Vec::new();
    let mut ids = vec![seq(&last)];
    loop {
        let message = ws.recv().await;
        if message["id"] == 50 {
            assert_eq!(
                message["result"]["content"][0]["text"],
                "done after 6 steps"
            );
            break;
        }
        assert_eq!(message["method"], "notifications/progress");
        progress.push(message["params"]["progress"].as_u64().unwrap());
        ids.push(seq(&message["params"]["sessionEventId"]));
    }
    assert_eq!(
        progress,
        vec![2, 3, 4, 5, 6],
        "each missed step once, in order"
    );
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "increasing ids: {ids:?}"
    );
    assert_eq!(
        ws.call_tool("echo", json!({ "text": "still here" })).await,
        "still here"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_session_started_over_http_resumes_over_websocket_and_back() {
    let proxy = Proxy::start().await;
    let started = proxy
        .client()
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "session/start", "params": {} }))
        .await
        .json()
        .await;
    let session_id = started["result"]["sessionId"].as_str().unwrap().to_owned();
    let http = http_client(&proxy, &session_id);

    // HTTP: open the channel, then initialize and call; answers come on the channel.
    let (result, mut channel) = http_resume(&proxy, json!({ "sessionId": session_id })).await;
    assert_eq!(
        result["result"],
        json!({ "resumed": true, "catchup": false })
    );
    http_send(
        &http,
        json!({ "jsonrpc": "2.0", "id": 10, "method": "initialize",
                "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": { "name": "t", "version": "1" } } }),
    )
    .await;
    let initialized = within("initialize", channel.next_message()).await.unwrap();
    assert_eq!(initialized.message["id"], 10);
    http_send(
        &http,
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
    )
    .await;
    http_send(
        &http,
        json!({ "jsonrpc": "2.0", "id": 11, "method": "tools/call",
                "params": { "name": "notify_list_changed", "arguments": { "list": "tools" } } }),
    )
    .await;
    let changed = channel
        .next_with_method("notifications/tools/list_changed")
        .await;
    let last = changed["params"]["sessionEventId"].clone();
    drop(channel);

    // Missed: the tool's answer (logged after the notification) and more.
    http_send(
        &http,
        json!({ "jsonrpc": "2.0", "id": 12, "method": "tools/call",
                "params": { "name": "echo", "arguments": { "text": "while away" } } }),
    )
    .await;

    // WebSocket: resume with catch-up; the previous channel is long gone.
    let mut ws = Ws::connect(proxy.addr()).await;
    let resumed = ws.resume(&session_id, &last).await;
    assert_eq!(resumed["catchup"], true);
    let answer_11 = ws.response_to(json!(11)).await;
    assert!(answer_11["result"].is_object());
    let answer_12 = ws.response_to(json!(12)).await;
    assert_eq!(answer_12["result"]["content"][0]["text"], "while away");
    ws.send(json!({ "jsonrpc": "2.0", "id": 13, "method": "tools/call",
                    "params": { "name": "emit_updates", "arguments": { "uris": ["a://1"], "count": 1 } } }))
        .await;
    let update = ws.recv().await;
    assert_eq!(update["method"], "notifications/resources/updated");
    let last = update["params"]["sessionEventId"].clone();
    ws.response_to(json!(13)).await;
    ws.cut();
    connections_closed(&proxy).await;

    // And back to HTTP: the answer to a request sent over HTTP while nothing was attached.
    http_send(
        &http,
        json!({ "jsonrpc": "2.0", "id": 14, "method": "tools/call",
                "params": { "name": "echo", "arguments": { "text": "back on http" } } }),
    )
    .await;
    let (result, mut channel) = http_resume(
        &proxy,
        json!({ "sessionId": session_id, "lastSessionEventId": last }),
    )
    .await;
    assert_eq!(result["result"]["catchup"], true);
    let mut ids = Vec::new();
    loop {
        let received = within("the catch-up", channel.next_message())
            .await
            .unwrap();
        ids.push(received.message["id"].clone());
        if received.message["id"] == 14 {
            assert_eq!(
                received.message["result"]["content"][0]["text"],
                "back on http"
            );
            break;
        }
    }
    // 13's answer followed the last notification processed, so it comes again (matched by id);
    // 14 was missed.
    assert_eq!(ids, vec![json!(13), json!(14)]);
    proxy.stop().await;
}

#[tokio::test]
async fn resuming_on_a_second_connection_detaches_the_first_which_is_told() {
    let proxy = Proxy::start().await;
    let mut first = Ws::connect(proxy.addr()).await;
    let session_id = first.start_session().await;
    first.initialize().await;

    let mut second = Ws::connect(proxy.addr()).await;
    let resumed = second
        .request("session/resume", json!({ "sessionId": session_id }))
        .await;
    assert_eq!(resumed["result"]["resumed"], true);
    let (told, close) = first.until_closed().await;
    assert_eq!(
        told.last().unwrap()["method"],
        "notifications/session/detached"
    );
    assert_eq!(told.last().unwrap()["params"]["sessionId"], session_id);
    assert_eq!(u16::from(close.expect("a close frame").code), 4001);
    assert_eq!(
        second
            .call_tool("echo", json!({ "text": "mine now" }))
            .await,
        "mine now"
    );

    // The same over HTTP: a channel is detached by a resume on a WebSocket.
    let (_, mut channel) = http_resume(&proxy, json!({ "sessionId": session_id })).await;
    let (_, close) = second.until_closed().await;
    assert_eq!(u16::from(close.unwrap().code), 4001);
    let mut third = Ws::connect(proxy.addr()).await;
    third
        .request("session/resume", json!({ "sessionId": session_id }))
        .await;
    let rest = within("the channel to end", channel.remaining_messages()).await;
    assert_eq!(
        rest.last().unwrap().message["method"],
        "notifications/session/detached"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn after_session_end_no_notification_arrives_and_the_session_is_gone() {
    let proxy = Proxy::start().await;
    let (mut ws, session_id) = started(&proxy).await;
    // Updates keep coming from a slow tool while the session ends.
    ws.send(progress_call(20, 50, 5)).await;
    let progress = ws.recv().await;
    assert_eq!(progress["method"], "notifications/progress");
    let ended = ws
        .request("session/end", json!({ "sessionId": session_id }))
        .await;
    assert_eq!(ended["result"], json!({}));
    // What came before the answer is fine; nothing of the session may follow it: a request on
    // a fresh session of this connection is answered with nothing in between.
    for earlier in ws.take_pending() {
        assert_eq!(earlier["method"], "notifications/progress");
    }
    ws.send(json!({ "jsonrpc": "2.0", "id": 21, "method": "initialize",
                    "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": { "name": "t", "version": "1" } } }))
        .await;
    let next = ws.recv().await;
    assert_eq!(
        next["id"], 21,
        "a message of the ended session after session/end: {next}"
    );
    let http = http_client(&proxy, &session_id);
    let reply = http
        .post(&json!({ "jsonrpc": "2.0", "id": 22, "method": "ping" }))
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    let body = reply.json().await;
    assert_eq!(body["error"]["code"], -32043);
    assert_eq!(body["error"]["data"]["sessionId"], session_id);
    proxy.stop().await;
}

#[tokio::test]
async fn resume_outside_the_window_is_catchup_false_with_synthesized_invalidations() {
    let proxy = Proxy::start_with(|c| c.session.window_events = 4).await;
    let (mut ws, session_id) = started(&proxy).await;
    ws.request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    ws.call_tool("emit_updates", json!({ "uris": ["x://1"], "count": 1 }))
        .await;
    let update = ws.recv().await;
    let last = update["params"]["sessionEventId"].clone();
    ws.cut();
    connections_closed(&proxy).await;
    // Ten distinct URIs: nothing coalesces, the window of four overflows.
    let http = http_client(&proxy, &session_id);
    let uris: Vec<String> = (0..10).map(|i| format!("y://{i}")).collect();
    http_send(
        &http,
        json!({ "jsonrpc": "2.0", "id": 30, "method": "tools/call",
                "params": { "name": "emit_updates", "arguments": { "uris": uris, "count": 10 } } }),
    )
    .await;
    // 15 messages logged in all (initialize, subscribe, update, answer, 10 updates, answer).
    eventually("the window to overflow", || {
        proxy.metric("mcp_proxy_events_evicted_total") == 11
    })
    .await;

    let mut ws = Ws::connect(proxy.addr()).await;
    let resumed = ws.resume(&session_id, &last).await;
    assert_eq!(resumed, json!({ "resumed": true, "catchup": false }));
    let invalidation = ws.recv().await;
    assert_eq!(invalidation["method"], "notifications/resources/updated");
    assert_eq!(invalidation["params"]["uri"], "demo://counter");
    assert_eq!(ws.call_tool("echo", json!({ "text": "ok" })).await, "ok");
    proxy.stop().await;
}

#[tokio::test]
async fn initialize_announces_the_session_methods_beside_the_servers_capabilities() {
    let proxy = Proxy::start().await;
    let mut ws = Ws::connect(proxy.addr()).await;
    let result = ws.initialize().await["result"].clone();
    let sessions = &result["capabilities"]["experimental"]["sessions"];
    assert_eq!(
        sessions["methods"],
        json!(["session/start", "session/resume", "session/end"])
    );
    assert_eq!(sessions["catchup"], true);
    assert_eq!(sessions["window"]["maxEvents"], 1024);
    assert!(
        result["capabilities"]["tools"].is_object(),
        "the server's own: {result}"
    );
    assert!(result["capabilities"]["resources"]["subscribe"] == true);

    // Over Streamable HTTP too, and the connection's own session ends with it.
    let mut client = proxy.client();
    let http_result = client.initialize("2025-11-25").await;
    assert_eq!(
        http_result["result"]["capabilities"]["experimental"]["sessions"]["resume"],
        true
    );
    assert_eq!(proxy.metric("mcp_proxy_sessions_open"), 2);
    drop(ws);
    eventually("the connection's own session to end", || {
        proxy.metric("mcp_proxy_sessions_open") == 1
    })
    .await;
    proxy.stop().await;
}

/// A client that stopped reading (its connection died without a close) had everything written
/// into it: a resume from before catches up on the latest update per URI, not on all of them.
#[tokio::test]
async fn a_resume_after_a_silent_death_catches_up_on_the_latest_update_per_uri() {
    let proxy = Proxy::start().await;
    let (mut ws, session_id) = started(&proxy).await;
    let uris: Vec<String> = (0..5).map(|i| format!("doc:/{i}")).collect();
    for uri in &uris {
        ws.request("resources/subscribe", json!({ "uri": uri }))
            .await;
    }
    let before = ws
        .call_tool(
            "emit_updates",
            json!({ "uris": uris, "count": 5, "tag": "before" }),
        )
        .await;
    assert_eq!(before, "emitted 5 updates");
    let mut last = Value::Null;
    for _ in 0..5 {
        let update = ws.recv().await;
        assert_eq!(update["method"], "notifications/resources/updated");
        last = update["params"]["sessionEventId"].clone();
    }
    // 40 calls of 5 updates each sent over HTTP; the WebSocket reads none of it.
    let logged = proxy.metric("mcp_proxy_events_logged_total");
    let http = http_client(&proxy, &session_id);
    for n in 0..40 {
        http_send(
            &http,
            json!({ "jsonrpc": "2.0", "id": 100 + n, "method": "tools/call",
                    "params": { "name": "emit_updates",
                                "arguments": { "uris": uris, "count": 5, "tag": format!("c{n}") } } }),
        )
        .await;
    }
    eventually("the 200 updates and 40 answers to be logged", || {
        proxy.metric("mcp_proxy_events_logged_total") == logged + 240
    })
    .await;
    ws.cut();
    connections_closed(&proxy).await;

    let mut ws = Ws::connect(proxy.addr()).await;
    let resumed = ws.resume(&session_id, &last).await;
    assert_eq!(resumed, json!({ "resumed": true, "catchup": true }));
    // The catch-up is followed by the answer to this call, so everything before it has come.
    assert_eq!(ws.call_tool("echo", json!({ "text": "end" })).await, "end");
    let caught_up = ws.take_pending();
    let updates: Vec<&Value> = caught_up
        .iter()
        .filter(|m| m["method"] == "notifications/resources/updated")
        .collect();
    let latest: Vec<(String, String)> = updates
        .iter()
        .map(|u| {
            (
                u["params"]["uri"].as_str().unwrap().to_owned(),
                u["params"]["_meta"]["demo/tag"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = uris.iter().map(|u| (u.clone(), "c39".into())).collect();
    assert_eq!(latest, expected, "one update per URI, the latest");
    // (Resuming from its last notification, the client may see again the answer that followed
    // it: responses carry no sessionEventId.)
    let answered: Vec<u64> = caught_up
        .iter()
        .filter(|m| m.get("result").is_some())
        .filter_map(|m| m["id"].as_u64())
        .filter(|id| (100..140).contains(id))
        .collect();
    assert_eq!(
        answered,
        (100..140).collect::<Vec<u64>>(),
        "every answer, none coalesced"
    );
    let numbers: Vec<u64> = caught_up
        .iter()
        .filter_map(|m| {
            m["params"]["sessionEventId"]
                .as_str()
                .map(|_| seq(&m["params"]["sessionEventId"]))
        })
        .collect();
    assert!(
        numbers.windows(2).all(|w| w[0] < w[1]),
        "in order: {numbers:?}"
    );
    proxy.stop().await;
}
