//! `shared` isolation over real sockets: one child for many sessions, ids and progress tokens
//! multiplexed, subscriptions reference-counted, updates only to their subscribers.

use crate::harness::{within, Proxy};
use mcp_session_proxy::config::Isolation;
use serde_json::{json, Value};

async fn shared_proxy() -> Proxy {
    Proxy::start_with(|c| c.upstream.isolation = Isolation::Shared).await
}

#[tokio::test]
async fn sessions_share_one_child_and_their_ids_do_not_collide() {
    let proxy = shared_proxy().await;
    let mut a = proxy.initialized_client("2025-06-18").await;
    let mut b = proxy.initialized_client("2025-06-18").await;
    // Both clients number their requests from 1; each gets its own answers.
    assert_eq!(a.call_tool("counter", json!({})).await, "1");
    assert_eq!(
        b.call_tool("counter", json!({})).await,
        "2",
        "the same child's state"
    );
    assert_eq!(a.call_tool("echo", json!({ "text": "a" })).await, "a");
    assert_eq!(b.call_tool("echo", json!({ "text": "b" })).await, "b");
    assert_eq!(proxy.metric("mcp_proxy_upstream_spawns_total"), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn when_the_shared_child_exits_every_session_goes_on_with_one_new_child() {
    let proxy = shared_proxy().await;
    let mut a = proxy.initialized_client("2025-06-18").await;
    let mut b = proxy.initialized_client("2025-06-18").await;
    assert_eq!(a.call_tool("counter", json!({})).await, "1");
    let crashed = a
        .request(
            "tools/call",
            json!({ "name": "crash", "arguments": { "code": 3 } }),
        )
        .await;
    assert_eq!(crashed["error"]["code"], -32603, "{crashed}");
    // Both sessions' next requests reach one new child, which the first of them started.
    let (first, second) = tokio::join!(
        within("a's request", a.call_tool("counter", json!({}))),
        within("b's request", b.call_tool("counter", json!({}))),
    );
    let mut counts = [first, second];
    counts.sort();
    assert_eq!(counts, ["1", "2"], "one new child's state");
    assert_eq!(proxy.metric("mcp_proxy_upstream_spawns_total"), 2);
    assert_eq!(proxy.metric("mcp_proxy_upstream_restarts_total"), 2);
    proxy.stop().await;
}

#[tokio::test]
async fn updates_reach_only_subscribers_and_subscriptions_are_counted() {
    let proxy = shared_proxy().await;
    let mut a = proxy.initialized_client("2025-06-18").await;
    let mut b = proxy.initialized_client("2025-06-18").await;
    let mut c = proxy.initialized_client("2025-06-18").await;
    for client in [&mut a, &mut b] {
        client
            .request("resources/subscribe", json!({ "uri": "demo://counter" }))
            .await;
    }
    c.request("resources/subscribe", json!({ "uri": "demo://c-only" }))
        .await;
    let mut a_events = a.get(None).await;
    let mut b_events = b.get(None).await;
    let mut c_events = c.get(None).await;

    c.call_tool("counter", json!({})).await;
    assert_eq!(
        a_events
            .next_with_method("notifications/resources/updated")
            .await["params"]["uri"],
        "demo://counter"
    );
    assert_eq!(
        b_events
            .next_with_method("notifications/resources/updated")
            .await["params"]["uri"],
        "demo://counter"
    );
    c.call_tool(
        "emit_updates",
        json!({ "uris": ["demo://c-only"], "count": 1 }),
    )
    .await;
    assert_eq!(
        c_events
            .next_with_method("notifications/resources/updated")
            .await["params"]["uri"],
        "demo://c-only",
        "c saw nothing of demo://counter"
    );

    // a leaves the URI; b still holds it, so the child must still be subscribed.
    a.request("resources/unsubscribe", json!({ "uri": "demo://counter" }))
        .await;
    a.call_tool("counter", json!({})).await;
    assert_eq!(
        b_events
            .next_with_method("notifications/resources/updated")
            .await["params"]["uri"],
        "demo://counter"
    );
    a.request("resources/subscribe", json!({ "uri": "demo://a-marker" }))
        .await;
    a.call_tool(
        "emit_updates",
        json!({ "uris": ["demo://a-marker"], "count": 1 }),
    )
    .await;
    assert_eq!(
        a_events
            .next_with_method("notifications/resources/updated")
            .await["params"]["uri"],
        "demo://a-marker",
        "a got no more counter updates"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn progress_reaches_its_own_session_under_its_own_token() {
    let proxy = shared_proxy().await;
    let a = proxy.initialized_client("2025-06-18").await;
    let b = proxy.initialized_client("2025-06-18").await;
    let call = |steps: u64| {
        json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": { "name": "progress", "arguments": { "steps": steps, "delay_ms": 20 }, "_meta": { "progressToken": "same" } } })
    };
    let (a_call, b_call) = (call(2), call(3));
    let (mut a_reply, mut b_reply) = tokio::join!(a.post(&a_call), b.post(&b_call));
    let (a_messages, b_messages) = within("both calls", async {
        tokio::join!(a_reply.remaining_messages(), b_reply.remaining_messages())
    })
    .await;
    for (messages, steps) in [(a_messages, 2), (b_messages, 3)] {
        let progress: Vec<&Value> = messages
            .iter()
            .filter(|m| m.message["method"] == "notifications/progress")
            .map(|m| &m.message["params"])
            .collect();
        assert_eq!(progress.len(), steps, "{messages:?}");
        assert!(progress
            .iter()
            .all(|p| p["progressToken"] == "same" && p["total"] == steps));
        let last = &messages.last().unwrap().message;
        assert_eq!(last["id"], 5);
        assert_eq!(
            last["result"]["content"][0]["text"],
            format!("done after {steps} steps")
        );
    }
    proxy.stop().await;
}
