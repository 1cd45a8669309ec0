//! The legacy HTTP+SSE front (2024-11-05) over real sockets, and the official TypeScript SDK's
//! SSE client through it.

mod common;

use common::{eventually, within, Proxy};
use http::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn the_stream_names_its_endpoint_answers_come_on_it_and_the_session_ends_with_it() {
    let proxy = Proxy::start().await;
    let client = proxy.client();
    let mut stream = client
        .send_to(
            "/sse",
            Method::GET,
            &[("accept", "text/event-stream")],
            None,
        )
        .await;
    assert_eq!(stream.status, StatusCode::OK);
    let endpoint = within("the endpoint event", stream.next_event())
        .await
        .unwrap();
    assert_eq!(endpoint.event.as_deref(), Some("endpoint"));
    assert!(
        endpoint.data.starts_with("/messages?sessionId="),
        "{}",
        endpoint.data
    );

    let post = |body: serde_json::Value| {
        let client = client.clone();
        let path = endpoint.data.clone();
        async move {
            client
                .send_to(
                    &path,
                    Method::POST,
                    &[("content-type", "application/json")],
                    Some(body.to_string().into()),
                )
                .await
                .status
        }
    };
    let initialize = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": { "name": "old", "version": "1" } } });
    assert_eq!(post(initialize).await, StatusCode::ACCEPTED);
    let answer = within("the initialize answer", stream.next_message())
        .await
        .unwrap();
    assert_eq!(answer.message["id"], 1);
    assert_eq!(answer.message["result"]["protocolVersion"], "2024-11-05");
    assert_eq!(
        post(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await,
        StatusCode::ACCEPTED
    );

    // Progress and the response share the one stream, in order.
    let call = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "progress", "arguments": { "steps": 2 }, "_meta": { "progressToken": "p" } } });
    assert_eq!(post(call).await, StatusCode::ACCEPTED);
    let mut seen = Vec::new();
    while seen
        .last()
        .map(|m: &serde_json::Value| m.get("id").is_none())
        .unwrap_or(true)
    {
        seen.push(
            within("the call's messages", stream.next_message())
                .await
                .unwrap()
                .message,
        );
    }
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[2]["id"], 2);

    // session/* are the proxy's and are not offered on this transport: never the server's.
    let start = json!({ "jsonrpc": "2.0", "id": 4, "method": "session/start", "params": {} });
    assert_eq!(post(start).await, StatusCode::ACCEPTED);
    let refused = within("the refusal", stream.next_message()).await.unwrap();
    assert_eq!(refused.message["id"], 4);
    assert_eq!(refused.message["error"]["code"], -32601);

    drop(stream);
    eventually("the session to end with its stream", || {
        proxy.metric("mcp_proxy_sessions_open") == 0
    })
    .await;
    assert_eq!(
        post(json!({ "jsonrpc": "2.0", "id": 3, "method": "ping" })).await,
        StatusCode::NOT_FOUND
    );
    proxy.stop().await;
}

#[tokio::test]
async fn typescript_sdk_sse_client_through_the_legacy_front() {
    let proxy = Proxy::start().await;
    let url = format!("http://{}/sse", proxy.addr());
    let report = common::sdk_client(&url, &["demo", "legacy"]).await;
    assert_eq!(report["echoed"], "hi");
    assert_eq!(report["updated"], "demo://counter");
    proxy.stop().await;
}
