//! The demo's 2026-07-28 mode served over HTTP by itself (`demo-server --http ADDR --protocol
//! 2026-07-28`): a 2026-07-28 client straight to it, and a legacy client through the proxy in
//! front of it.

use crate::harness::{modern_request, within, Client, Proxy, Reply};
use bytes::Bytes;
use http::{Method, StatusCode};
use mcp_session_proxy::wire::era::Era;
use serde_json::{json, Value};

/// A 2026-07-28 request: `_meta` in the body, its headers mirroring it.
async fn modern(client: &Client, id: Value, method: &str, params: Value) -> Reply {
    let body = modern_request(id, method, params, json!({}));
    client.post_modern(&body, &[]).await
}

#[tokio::test]
async fn a_modern_client_is_served_directly() {
    let (_demo, addr) = crate::harness::modern_demo_over_http().await;
    let client = Client::new(addr);
    let echo = json!({ "name": "echo", "arguments": { "text": "hi" } });
    let reply = modern(&client, json!(1), "tools/call", echo.clone()).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(!reply.is_sse(), "a lone response comes as JSON");
    let answer = reply.json().await;
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    assert_eq!(answer["result"]["content"][0]["text"], "hi");

    // Progress comes first on an SSE stream, then the response.
    let progress = json!({ "name": "progress", "arguments": { "steps": 2 },
                           "_meta": { "progressToken": "p" } });
    let mut reply = modern(&client, json!("two"), "tools/call", progress).await;
    assert!(reply.is_sse());
    let messages = reply.remaining_messages().await;
    let methods: Vec<&Value> = messages.iter().map(|m| &m.message["method"]).collect();
    assert_eq!(methods[..2], [&json!("notifications/progress"); 2]);
    assert_eq!(messages[2].message["id"], "two");
    assert_eq!(messages.len(), 3);

    // Two clients using the same id at once are told apart.
    let slow = |ms: u64| json!({ "name": "sleep", "arguments": { "ms": ms } });
    let (first, second) = tokio::join!(
        modern(&client, json!(5), "tools/call", slow(40)),
        modern(&client, json!(5), "tools/call", slow(20)),
    );
    let (first, second) = within("both answers", async {
        (first.json().await, second.json().await)
    })
    .await;
    assert_eq!(first["result"]["content"][0]["text"], "slept 40 ms");
    assert_eq!(second["result"]["content"][0]["text"], "slept 20 ms");

    // A listen stays open and gets what it asked for, tagged with its own id.
    let asked = json!({ "notifications": { "resourceSubscriptions": ["demo://counter"] } });
    let mut listen = modern(&client, json!(5), "subscriptions/listen", asked).await;
    assert!(listen.is_sse());
    let acknowledged = listen
        .next_with_method("notifications/subscriptions/acknowledged")
        .await;
    assert_eq!(
        acknowledged["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        5
    );
    let counted = modern(
        &client,
        json!(6),
        "tools/call",
        json!({ "name": "counter" }),
    )
    .await;
    assert_eq!(counted.json().await["result"]["content"][0]["text"], "1");
    let updated = listen
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(updated["params"]["uri"], "demo://counter");
    assert_eq!(
        updated["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        5
    );
}

#[tokio::test]
async fn the_transport_refuses_what_2026_07_28_refuses() {
    let (_demo, addr) = crate::harness::modern_demo_over_http().await;
    let client = Client::new(addr);
    for method in [Method::GET, Method::DELETE] {
        let reply = client.send(method.clone(), &[], None).await;
        assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
    }
    let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "echo", "arguments": { "text": "hi" }, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {} } } });
    let mislabelled = client
        .send(
            Method::POST,
            &[
                ("content-type", "application/json"),
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/list"),
            ],
            Some(Bytes::from(call.to_string())),
        )
        .await;
    assert_eq!(mislabelled.status, StatusCode::BAD_REQUEST);
    let refused = mislabelled.json().await;
    assert_eq!(refused["error"]["code"], -32020, "{refused}");
    assert_eq!(refused["id"], 1);

    let older = modern(&client, json!(2), "initialize", json!({})).await;
    assert_ne!(older.status, StatusCode::OK);
    let notified = client
        .send(
            Method::POST,
            &[("content-type", "application/json")],
            Some(Bytes::from(
                json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": { "requestId": 1 } })
                .to_string(),
            )),
        )
        .await;
    assert_eq!(notified.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_legacy_client_reaches_it_through_the_proxy() {
    let (_demo, addr) = crate::harness::modern_demo_over_http().await;
    let proxy = Proxy::start_with(|config| {
        config.upstream.stdio = None;
        config.upstream.http = Some(format!("http://{addr}/mcp"));
        config.upstream.protocol = Era::Modern;
    })
    .await;
    let mut client = proxy.client();
    let initialized = client.initialize("2025-06-18").await;
    assert_eq!(
        initialized["result"]["serverInfo"]["name"], "mcp-session-proxy-demo",
        "{initialized}"
    );
    assert_eq!(
        client.call_tool("echo", json!({ "text": "hello" })).await,
        "hello"
    );

    let call = json!({ "jsonrpc": "2.0", "id": 40, "method": "tools/call", "params": {
        "name": "progress", "arguments": { "steps": 3 }, "_meta": { "progressToken": "t" } } });
    let mut reply = client.post(&call).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.is_sse());
    let messages = reply.remaining_messages().await;
    let progress: Vec<&Value> = messages
        .iter()
        .map(|m| &m.message)
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{messages:?}");
    assert!(progress.iter().all(|p| p["params"]["progressToken"] == "t"));
    let done = &messages.last().unwrap().message;
    assert_eq!(done["id"], 40);
    assert_eq!(done["result"]["content"][0]["text"], "done after 3 steps");
    assert!(done["result"].get("resultType").is_none(), "{done}");
    proxy.stop().await;
}
