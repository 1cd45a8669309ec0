//! The legacy HTTP+SSE front (2024-11-05) over real sockets, and the official TypeScript SDK's
//! SSE client through it.

use crate::harness::{eventually, within, Client, Proxy};
use http::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn the_stream_names_its_endpoint_answers_come_on_it_and_the_session_ends_with_it() {
    let proxy = Proxy::start().await;
    let client = proxy.client();
    let mut stream = client.get_sse("/sse").await;
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

    let post = |body: serde_json::Value| post_json(&client, &endpoint.data, body);
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
    let report = crate::harness::sdk_client(&url, &["demo", "legacy"]).await;
    assert_eq!(report["echoed"], "hi");
    assert_eq!(report["updated"], "demo://counter");
    proxy.stop().await;
}

/// A stdio command that records each start of the demo server (its PID, one line in the
/// returned file) before it runs.
fn counted_demo(name: &str) -> (String, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("mcp-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let starts = dir.join("starts");
    let _ = std::fs::remove_file(&starts);
    let script = dir.join("server.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho $$ >> {}\nexec {} demo-server\n",
            shell_words::quote(&starts.to_string_lossy()),
            shell_words::quote(crate::harness::DEMO),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (
        shell_words::quote(&script.to_string_lossy()).into_owned(),
        starts,
    )
}

fn starts_in(file: &std::path::Path) -> usize {
    std::fs::read_to_string(file).map_or(0, |text| text.lines().count())
}

#[tokio::test]
async fn the_server_starts_at_initialize_not_when_the_stream_opens() {
    let (command, starts) = counted_demo("sse-start");
    let proxy = Proxy::start_with(|c| {
        c.upstream.stdio = Some(command);
        // Known legacy: no probe's child among the counted starts.
        c.upstream.protocol = mcp_session_proxy::wire::era::Era::Legacy;
    })
    .await;
    let client = proxy.client();
    let (mut stream, endpoint) = client.open_legacy_sse("/sse").await;
    let post = |body: serde_json::Value| post_json(&client, &endpoint, body);
    // Before initialize: ping is answered, any other request refused, no server started.
    let ping = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" });
    assert_eq!(post(ping).await, StatusCode::ACCEPTED);
    let pong = within("the ping's answer", stream.next_message())
        .await
        .unwrap();
    assert_eq!(pong.message["result"], json!({}), "{}", pong.message);
    let early = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" });
    assert_eq!(post(early).await, StatusCode::ACCEPTED);
    let refused = within("the refusal", stream.next_message()).await.unwrap();
    assert_eq!(refused.message["id"], 2);
    assert_eq!(
        refused.message["error"]["code"], -32600,
        "{}",
        refused.message
    );
    assert_eq!(proxy.metric("mcp_proxy_sessions_open"), 1);
    assert_eq!(starts_in(&starts), 0, "no server before initialize");
    assert_eq!(proxy.metric("mcp_proxy_upstream_spawns_total"), 0);

    let initialize = json!({ "jsonrpc": "2.0", "id": 3, "method": "initialize",
        "params": { "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": { "name": "old", "version": "1" } } });
    assert_eq!(post(initialize).await, StatusCode::ACCEPTED);
    let answer = within("the initialize answer", stream.next_message())
        .await
        .unwrap();
    assert_eq!(answer.message["id"], 3);
    assert_eq!(answer.message["result"]["protocolVersion"], "2024-11-05");
    assert_eq!(starts_in(&starts), 1, "one server, started by initialize");
    assert_eq!(proxy.metric("mcp_proxy_upstream_spawns_total"), 1);
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    assert_eq!(post(initialized).await, StatusCode::ACCEPTED);
    let call = json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": { "name": "echo", "arguments": { "text": "hi" } } });
    assert_eq!(post(call).await, StatusCode::ACCEPTED);
    let echoed = within("the call's answer", stream.next_message())
        .await
        .unwrap();
    assert_eq!(echoed.message["result"]["content"][0]["text"], "hi");

    // A stream that never initializes starts nothing, and ends with its session.
    let (idle, _) = client.open_legacy_sse("/sse").await;
    assert_eq!(proxy.metric("mcp_proxy_sessions_open"), 2);
    drop(idle);
    eventually("the idle stream's session to end", || {
        proxy.metric("mcp_proxy_sessions_open") == 1
    })
    .await;
    assert_eq!(starts_in(&starts), 1);
    drop(stream);
    eventually("the session to end with its stream", || {
        proxy.metric("mcp_proxy_sessions_open") == 0
    })
    .await;
    proxy.stop().await;
}

/// POSTs `body` to a legacy SSE session's message endpoint `path`: the HTTP status.
async fn post_json(client: &Client, path: &str, body: serde_json::Value) -> StatusCode {
    client
        .send_to(
            path,
            Method::POST,
            &[("content-type", "application/json")],
            Some(body.to_string().into()),
        )
        .await
        .status
}
