//! The session layer over real sockets: resume of cut streams, coalescing, the gap rule and
//! isolation between sessions.

use std::collections::BTreeSet;

use crate::harness::{within, Client, Proxy, Received};
use http::StatusCode;
use serde_json::json;

fn method(received: &Received) -> &str {
    received.message["method"].as_str().unwrap_or("")
}

/// Opens the GET stream, notes the position its priming event names, and goes away.
async fn position_of_get_stream(client: &Client) -> String {
    let mut get = client.get(None).await;
    let priming = within("priming", get.next_event()).await.unwrap();
    assert_eq!(priming.data, "", "a priming event");
    priming.id.expect("the priming event names a position")
}

/// A request whose answer proves the server has written everything it wrote before it.
async fn fence(client: &mut Client) {
    assert_eq!(
        client.call_tool("echo", json!({ "text": "fence" })).await,
        "fence"
    );
}

#[tokio::test]
async fn a_cut_post_stream_resumes_with_every_missed_event_then_the_response() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let mut call = client
        .post(&json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": { "name": "progress", "arguments": { "steps": 5 }, "_meta": { "progressToken": "tok" } } }))
        .await;
    assert!(call.is_sse());
    let first = within("first progress", call.next_message()).await.unwrap();
    assert_eq!(first.message["params"]["progress"], 1);
    let resume_from = first.id.clone().expect("events carry ids");
    drop(call); // the connection is cut after the first event

    fence(&mut client).await; // the call has finished by now

    let mut resumed = client.get(Some(&resume_from)).await;
    assert_eq!(resumed.status, StatusCode::OK);
    let replayed = within("the replay", resumed.remaining_messages()).await;
    let progress: Vec<i64> = replayed
        .iter()
        .filter(|r| method(r) == "notifications/progress")
        .map(|r| r.message["params"]["progress"].as_i64().unwrap())
        .collect();
    assert_eq!(
        progress,
        [2, 3, 4, 5],
        "every remaining progress, once, in order"
    );
    let last = replayed.last().unwrap();
    assert_eq!(last.message["id"], 7, "then the response");
    assert_eq!(
        last.message["result"]["content"][0]["text"],
        "done after 5 steps"
    );
    assert_eq!(replayed.len(), 5, "nothing else and nothing twice");
    let ids: BTreeSet<&str> = replayed.iter().map(|r| r.id.as_deref().unwrap()).collect();
    assert_eq!(ids.len(), 5, "event ids are unique");
    assert!(proxy.metric("mcp_proxy_replays_total") >= 1);
    proxy.stop().await;
}

#[tokio::test]
async fn resuming_a_stream_never_replays_another_streams_events() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    let away_from = position_of_get_stream(&client).await;
    // POST stream events, and one GET-stream event while the GET stream is away.
    client.call_tool("counter", json!({})).await;
    let mut call = client
        .post(&json!({ "jsonrpc": "2.0", "id": 40, "method": "tools/call",
            "params": { "name": "progress", "arguments": { "steps": 2 }, "_meta": { "progressToken": 1 } } }))
        .await;
    let post_events = within("post stream", call.remaining_messages()).await;
    assert_eq!(post_events.len(), 3);

    let mut resumed = client.get(Some(&away_from)).await;
    let update = within("the GET stream's event", resumed.next_message())
        .await
        .unwrap();
    assert_eq!(method(&update), "notifications/resources/updated");
    // Nothing of the POST streams follows: prove it with a later GET-stream event.
    client.call_tool("counter", json!({})).await;
    let next = within("the next GET event", resumed.next_message())
        .await
        .unwrap();
    assert_eq!(method(&next), "notifications/resources/updated");
    assert_ne!(next.id, update.id);
    proxy.stop().await;
}

#[tokio::test]
async fn a_thousand_updates_over_ten_uris_reach_a_resuming_client_as_ten() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let away_from = position_of_get_stream(&client).await;

    let uris: Vec<String> = (0..10).map(|i| format!("demo://doc/{i}")).collect();
    let emitted = client
        .call_tool("emit_updates", json!({ "uris": uris, "count": 1000 }))
        .await;
    assert_eq!(emitted, "emitted 1000 updates");

    let mut resumed = client.get(Some(&away_from)).await;
    let mut seen = Vec::new();
    while seen.len() < 10 {
        let received = within("updates", resumed.next_message()).await.unwrap();
        assert_eq!(method(&received), "notifications/resources/updated");
        seen.push(
            received.message["params"]["uri"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let distinct: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), 10, "one per URI: {seen:?}");
    // And nothing more: the next event is one caused afterwards.
    client
        .call_tool(
            "emit_updates",
            json!({ "uris": ["demo://after"], "count": 1 }),
        )
        .await;
    let next = within("the later update", resumed.next_message())
        .await
        .unwrap();
    assert_eq!(next.message["params"]["uri"], "demo://after");
    assert_eq!(proxy.metric("mcp_proxy_events_coalesced_total"), 990);
    proxy.stop().await;
}

#[tokio::test]
async fn resuming_from_an_evicted_position_synthesizes_invalidations() {
    let proxy = Proxy::start_with(|c| c.session.window_events = 8).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    let away_from = position_of_get_stream(&client).await;

    let uris: Vec<String> = (0..50).map(|i| format!("demo://doc/{i}")).collect();
    client
        .call_tool("emit_updates", json!({ "uris": uris, "count": 50 }))
        .await;
    fence(&mut client).await;

    let mut resumed = client.get(Some(&away_from)).await;
    let mut retained = Vec::new();
    let mut synthesized = Vec::new();
    while synthesized.len() < 3 {
        let received = within("replay", resumed.next_message()).await.unwrap();
        match &received.id {
            Some(_) => {
                assert!(synthesized.is_empty(), "retained events come first");
                retained.push(received.message["params"]["uri"].clone());
            }
            None => synthesized.push(received.message),
        }
    }
    assert!(
        !retained.is_empty() && retained.len() < 50,
        "{}",
        retained.len()
    );
    assert_eq!(
        retained.last().unwrap(),
        "demo://doc/49",
        "the newest are retained"
    );
    let methods: BTreeSet<String> = synthesized
        .iter()
        .map(|m| format!("{} {}", m["method"].as_str().unwrap(), m["params"]["uri"]))
        .collect();
    let expected: BTreeSet<String> = [
        "notifications/resources/updated \"demo://counter\"",
        "notifications/tools/list_changed null",
        "notifications/resources/list_changed null",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(
        methods, expected,
        "one per subscription and per changeable list"
    );
    assert!(proxy.metric("mcp_proxy_replay_gaps_total") >= 1);
    proxy.stop().await;
}

#[tokio::test]
async fn two_sessions_keep_separate_state_and_separate_events() {
    let proxy = Proxy::start().await;
    let mut a = proxy.initialized_client("2025-06-18").await;
    let mut b = proxy.initialized_client("2025-06-18").await;
    for client in [&mut a, &mut b] {
        client
            .request("resources/subscribe", json!({ "uri": "demo://counter" }))
            .await;
    }
    let mut a_events = a.get(None).await;
    let mut b_events = b.get(None).await;

    for expected in ["1", "2", "3"] {
        assert_eq!(a.call_tool("counter", json!({})).await, expected);
    }
    assert_eq!(
        b.call_tool("counter", json!({})).await,
        "1",
        "B's counter is its own"
    );

    for _ in 0..3 {
        let update = within("A's updates", a_events.next_message())
            .await
            .unwrap();
        assert_eq!(method(&update), "notifications/resources/updated");
    }
    // B's first event is the one its own call caused; none of A's three reached it.
    let b_first = within("B's update", b_events.next_message()).await.unwrap();
    assert_eq!(method(&b_first), "notifications/resources/updated");
    b.call_tool(
        "emit_updates",
        json!({ "uris": ["demo://b-only"], "count": 1 }),
    )
    .await;
    let b_second = within("B's own marker", b_events.next_message())
        .await
        .unwrap();
    assert_eq!(b_second.message["params"]["uri"], "demo://b-only");

    // A's session id is useless with another principal's credentials.
    let mut intruder = a.clone();
    intruder.authorization = Some("Bearer someone-else".into());
    let reply = intruder
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" }))
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(intruder.get(None).await.status, StatusCode::NOT_FOUND);
    proxy.stop().await;
}

/// A GET stream whose client stopped reading (the connection is up, nothing is read) had every
/// update written into it; resuming from the last event read catches up on the latest per URI.
#[tokio::test]
async fn a_stream_that_stopped_being_read_resumes_with_the_latest_update_per_uri() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let uris: Vec<String> = (0..5).map(|i| format!("demo://doc/{i}")).collect();
    let mut stalled = client.get(None).await;
    client
        .call_tool(
            "emit_updates",
            json!({ "uris": ["demo://first"], "count": 1 }),
        )
        .await;
    let first = within("the first update", stalled.next_message())
        .await
        .unwrap();
    assert_eq!(first.message["params"]["uri"], "demo://first");
    // The client reads nothing more from `stalled`: 40 calls × 5 updates go into it.
    for n in 0..40 {
        let tag = format!("c{n}");
        client
            .call_tool(
                "emit_updates",
                json!({ "uris": uris, "count": 5, "tag": tag }),
            )
            .await;
    }
    drop(stalled);
    let mut resumed = client.get(first.id.as_deref()).await;
    assert_eq!(resumed.status, StatusCode::OK);
    let mut latest = Vec::new();
    while latest.len() < 5 {
        let update = within("the catch-up", resumed.next_message())
            .await
            .unwrap();
        latest.push((
            update.message["params"]["uri"].as_str().unwrap().to_owned(),
            update.message["params"]["_meta"]["demo/tag"].clone(),
        ));
    }
    let expected: Vec<(String, serde_json::Value)> =
        uris.iter().map(|u| (u.clone(), json!("c39"))).collect();
    assert_eq!(latest, expected, "the latest update of each URI, in order");
    // And nothing else was waiting: the next event is one caused now.
    client
        .call_tool(
            "emit_updates",
            json!({ "uris": ["demo://now"], "count": 1 }),
        )
        .await;
    let next = within("the next update", resumed.next_message())
        .await
        .unwrap();
    assert_eq!(next.message["params"]["uri"], "demo://now");
    proxy.stop().await;
}

/// A `Last-Event-ID` the proxy never sent (ahead of the log) is refused, as `session/resume`
/// refuses one, and leaves the stream where it was: later updates still reach a plain GET.
#[tokio::test]
async fn a_last_event_id_ahead_of_the_log_is_refused_and_moves_nothing() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let ahead = client.get(Some("g.1000000")).await;
    assert_eq!(ahead.status, StatusCode::BAD_REQUEST);
    let body = ahead.json().await;
    assert_eq!(body["error"]["code"], -32600);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("g.1000000") && message.contains("ahead"),
        "{message}"
    );
    let mut stream = client.get(None).await;
    client
        .call_tool(
            "emit_updates",
            json!({ "uris": ["demo://later"], "count": 1 }),
        )
        .await;
    let update = within("the later update", stream.next_message())
        .await
        .unwrap();
    assert_eq!(update.message["params"]["uri"], "demo://later");
    proxy.stop().await;
}
