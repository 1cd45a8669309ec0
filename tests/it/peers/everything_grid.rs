//! The grid's scenario against npm server-everything behind the proxy, in its Streamable HTTP
//! and legacy SSE modes: tool call, subscription and notification, a cut stream resumed.

use crate::harness::{server_everything, within, Proxy};
use serde_json::json;

async fn scenario(mode: &str) {
    let (mut server, port) = server_everything(mode).await;
    let front = Proxy::start_with(|c| {
        c.upstream.stdio = None;
        match mode {
            "sse" => c.upstream.sse = Some(format!("http://127.0.0.1:{port}/sse")),
            _ => c.upstream.http = Some(format!("http://127.0.0.1:{port}/mcp")),
        }
    })
    .await;
    let mut client = front.initialized_client("2025-11-25").await;
    assert_eq!(
        client.call_tool("echo", json!({ "message": "grid" })).await,
        "Echo: grid",
        "{mode}"
    );

    let resources = client.request("resources/list", json!({})).await;
    let uri = resources["result"]["resources"][0]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    client
        .request("resources/subscribe", json!({ "uri": uri }))
        .await;
    let mut events = client.get(None).await;
    client
        .call_tool("toggle-subscriber-updates", json!({}))
        .await;
    let update = events
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], uri, "{mode}");

    let mut call = client
        .post(&json!({ "jsonrpc": "2.0", "id": 90, "method": "tools/call",
            "params": { "name": "trigger-long-running-operation",
                "arguments": { "duration": 0.3, "steps": 3 }, "_meta": { "progressToken": "long" } } }))
        .await;
    let first = within("the first progress", async {
        loop {
            let received = call.next_message().await.expect("the call's stream");
            if received.message["method"] == "notifications/progress" {
                return received;
            }
        }
    })
    .await;
    assert_eq!(first.message["params"]["progress"], 1, "{mode}");
    drop(call); // cut after the first progress
    let mut resumed = client.get(first.id.as_deref()).await;
    let rest = within("the rest of the call", resumed.remaining_messages()).await;
    let steps: Vec<i64> = rest
        .iter()
        .filter_map(|r| r.message["params"]["progress"].as_i64())
        .collect();
    assert_eq!(
        steps,
        [2, 3],
        "{mode}: every missed progress, once, in order"
    );
    let last = &rest.last().unwrap().message;
    assert_eq!(last["id"], 90, "{mode}");
    assert!(last["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Long running operation completed"));
    front.stop().await;
    server.kill().await.unwrap();
}

#[tokio::test]
async fn streamable_http_client_server_everything_over_streamable_http() {
    scenario("streamableHttp").await;
}

#[tokio::test]
async fn streamable_http_client_server_everything_over_sse() {
    scenario("sse").await;
}
