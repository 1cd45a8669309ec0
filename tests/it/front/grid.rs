//! The same scenario for every client transport × upstream kind: initialize, a tool call, a
//! subscription and its notification, and (where the transport can resume) a cut stream resumed
//! with nothing lost. The HTTP and SSE upstreams are the demo behind a second proxy.

use crate::harness::{within, Client, Proxy, Reply};
use http::{Method, StatusCode};
use mcp_session_proxy::config::Isolation;
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug)]
enum Upstream {
    Stdio,
    SharedStdio,
    Http,
    Sse,
}

/// The proxy under test, and the upstream proxy serving the demo over HTTP when there is one.
async fn proxies(upstream: Upstream) -> (Proxy, Option<Proxy>) {
    let behind = match upstream {
        Upstream::Stdio | Upstream::SharedStdio => None,
        Upstream::Http | Upstream::Sse => Some(Proxy::start().await),
    };
    let url = behind.as_ref().map(|p| p.addr());
    let front = Proxy::start_with(|c| match (upstream, url) {
        (Upstream::Http, Some(addr)) => {
            c.upstream.stdio = None;
            c.upstream.http = Some(format!("http://{addr}/mcp"));
        }
        (Upstream::Sse, Some(addr)) => {
            c.upstream.stdio = None;
            c.upstream.sse = Some(format!("http://{addr}/sse"));
        }
        (Upstream::SharedStdio, _) => c.upstream.isolation = Isolation::Shared,
        _ => {}
    })
    .await;
    (front, behind)
}

async fn streamable_http_scenario(upstream: Upstream) {
    let (front, behind) = proxies(upstream).await;
    let mut client = front.initialized_client("2025-11-25").await;
    assert_eq!(
        client.call_tool("echo", json!({ "text": "grid" })).await,
        "grid",
        "{upstream:?}"
    );
    client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    let mut events = client.get(None).await;
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    let update = events
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], "demo://counter", "{upstream:?}");

    let mut call = client
        .post(&json!({ "jsonrpc": "2.0", "id": 77, "method": "tools/call",
            "params": { "name": "progress", "arguments": { "steps": 3 }, "_meta": { "progressToken": "g" } } }))
        .await;
    let first = within("first progress", call.next_message()).await.unwrap();
    drop(call);
    let mut resumed = client.get(first.id.as_deref()).await;
    let rest = within("the rest", resumed.remaining_messages()).await;
    let steps: Vec<i64> = rest
        .iter()
        .filter_map(|r| r.message["params"]["progress"].as_i64())
        .collect();
    assert_eq!(steps, [2, 3], "{upstream:?}");
    assert_eq!(rest.last().unwrap().message["id"], 77, "{upstream:?}");
    front.stop().await;
    if let Some(behind) = behind {
        behind.stop().await;
    }
}

async fn legacy_sse_scenario(upstream: Upstream) {
    let (front, behind) = proxies(upstream).await;
    let client: Client = front.client();
    let (mut stream, endpoint) = client.open_legacy_sse("/sse").await;
    let post = |message: Value| {
        let client = client.clone();
        let endpoint = endpoint.clone();
        async move {
            let reply = client
                .send_to(
                    &endpoint,
                    Method::POST,
                    &[("content-type", "application/json")],
                    Some(message.to_string().into()),
                )
                .await;
            assert_eq!(reply.status, StatusCode::ACCEPTED);
        }
    };
    post(json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": { "name": "old", "version": "1" } } }))
    .await;
    assert_eq!(
        next_answer(&mut stream, 1).await["result"]["protocolVersion"],
        "2024-11-05"
    );
    post(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
    post(json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": { "name": "echo", "arguments": { "text": "old" } } })).await;
    assert_eq!(
        next_answer(&mut stream, 2).await["result"]["content"][0]["text"],
        "old",
        "{upstream:?}"
    );
    post(json!({ "jsonrpc": "2.0", "id": 3, "method": "resources/subscribe", "params": { "uri": "demo://counter" } })).await;
    next_answer(&mut stream, 3).await;
    post(json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": { "name": "counter", "arguments": {} } })).await;
    let update = stream
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], "demo://counter", "{upstream:?}");
    drop(stream);
    front.stop().await;
    if let Some(behind) = behind {
        behind.stop().await;
    }
}

async fn next_answer(stream: &mut Reply, id: i64) -> Value {
    within("the answer", async {
        loop {
            let received = stream.next_message().await.expect("the stream stays open");
            if received.message["id"] == id && received.message.get("method").is_none() {
                return received.message;
            }
        }
    })
    .await
}

#[tokio::test]
async fn streamable_http_client_stdio_upstream() {
    streamable_http_scenario(Upstream::Stdio).await;
}

#[tokio::test]
async fn streamable_http_client_shared_stdio_upstream() {
    streamable_http_scenario(Upstream::SharedStdio).await;
}

#[tokio::test]
async fn legacy_sse_client_shared_stdio_upstream() {
    legacy_sse_scenario(Upstream::SharedStdio).await;
}

#[tokio::test]
async fn streamable_http_client_http_upstream() {
    streamable_http_scenario(Upstream::Http).await;
}

#[tokio::test]
async fn streamable_http_client_sse_upstream() {
    streamable_http_scenario(Upstream::Sse).await;
}

#[tokio::test]
async fn legacy_sse_client_stdio_upstream() {
    legacy_sse_scenario(Upstream::Stdio).await;
}

#[tokio::test]
async fn legacy_sse_client_http_upstream() {
    legacy_sse_scenario(Upstream::Http).await;
}

#[tokio::test]
async fn legacy_sse_client_sse_upstream() {
    legacy_sse_scenario(Upstream::Sse).await;
}
