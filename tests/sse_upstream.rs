//! The legacy HTTP+SSE upstream over real sockets: the proxy as a 2024-11-05 client of the demo
//! (behind a legacy front) and of npm server-everything in its `sse` mode.

mod common;

use common::{within, Proxy};
use serde_json::json;

async fn in_front_of_sse(url: String) -> Proxy {
    Proxy::start_with(|c| {
        c.upstream.stdio = None;
        c.upstream.sse = Some(url);
    })
    .await
}

#[tokio::test]
async fn sessions_calls_notifications_and_resume_through_an_sse_upstream() {
    let upstream = Proxy::start().await; // the demo behind a legacy front
    let front = in_front_of_sse(format!("http://{}/sse", upstream.addr())).await;
    let mut a = front.initialized_client("2025-11-25").await;
    let mut b = front.initialized_client("2025-11-25").await;
    assert_eq!(a.call_tool("counter", json!({})).await, "1");
    assert_eq!(a.call_tool("counter", json!({})).await, "2");
    assert_eq!(
        b.call_tool("counter", json!({})).await,
        "1",
        "a stream (a session) each"
    );

    a.request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    let mut events = a.get(None).await;
    a.call_tool("counter", json!({})).await;
    assert_eq!(
        events
            .next_with_method("notifications/resources/updated")
            .await["params"]["uri"],
        "demo://counter"
    );

    let mut call = a
        .post(&json!({ "jsonrpc": "2.0", "id": 50, "method": "tools/call",
            "params": { "name": "progress", "arguments": { "steps": 3 }, "_meta": { "progressToken": 9 } } }))
        .await;
    let first = within("first progress", call.next_message()).await.unwrap();
    drop(call);
    let mut resumed = a.get(first.id.as_deref()).await;
    let rest = within("the rest", resumed.remaining_messages()).await;
    assert_eq!(rest.len(), 3, "progress 2, 3 and the response");
    assert_eq!(rest[2].message["id"], 50);
    front.stop().await;
    upstream.stop().await;
}

#[tokio::test]
async fn a_cut_upstream_stream_is_reopened_re_initialized_and_re_subscribed() {
    let upstream = Proxy::start().await;
    let addr = upstream.addr();
    let front = in_front_of_sse(format!("http://{addr}/sse")).await;
    let mut client = front.initialized_client("2025-06-18").await;
    client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(client.call_tool("counter", json!({})).await, "1");

    upstream.stop().await; // the stream, and the upstream session with it, are gone
    let upstream = Proxy::start_with(|c| c.listen = addr).await;

    let mut events = client.get(None).await;
    assert_eq!(
        client.call_tool("counter", json!({})).await,
        "1",
        "a new upstream session (a new server process), transparently initialized"
    );
    assert_eq!(
        events
            .next_with_method("notifications/resources/updated")
            .await["params"]["uri"],
        "demo://counter",
        "re-subscribed"
    );
    front.stop().await;
    upstream.stop().await;
}

#[tokio::test]
async fn typescript_sdk_client_through_the_proxy_to_server_everything_over_sse() {
    let (mut server, port) = common::server_everything("sse").await;
    let front = in_front_of_sse(format!("http://127.0.0.1:{port}/sse")).await;
    let report = common::sdk_client(&format!("http://{}/mcp", front.addr()), &["everything"]).await;
    assert_eq!(report["echoed"], "Echo: hi");
    front.stop().await;
    server.kill().await.unwrap();
}

#[tokio::test]
async fn a_request_in_flight_when_the_stream_is_cut_gets_an_error_and_the_session_goes_on() {
    let upstream = Proxy::start().await;
    let addr = upstream.addr();
    let front = in_front_of_sse(format!("http://{addr}/sse")).await;
    let mut client = front.initialized_client("2025-06-18").await;
    let mut call = client
        .post(&json!({ "jsonrpc": "2.0", "id": 70, "method": "tools/call",
            "params": { "name": "progress", "arguments": { "steps": 50, "delay_ms": 100 },
                        "_meta": { "progressToken": 1 } } }))
        .await;
    let first = within("the first progress", call.next_message())
        .await
        .unwrap();
    assert_eq!(
        first.message["method"], "notifications/progress",
        "in flight"
    );

    upstream.stop().await; // the stream, and the answer with it, are gone
    let upstream = Proxy::start_with(|c| c.listen = addr).await;
    let answer = loop {
        let message = within("the answer", call.next_message())
            .await
            .expect("an answer before the stream ends");
        if message.message["id"] == 70 {
            break message.message;
        }
    };
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("answer was lost"),
        "{answer}"
    );
    assert_eq!(
        client.call_tool("echo", json!({ "text": "after" })).await,
        "after",
        "the session goes on, on a new upstream session"
    );
    front.stop().await;
    upstream.stop().await;
}
