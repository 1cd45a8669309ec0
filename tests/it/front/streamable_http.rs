//! The Streamable HTTP front over real sockets: lifecycle, framing, headers, stream attachment.

use std::time::Duration;

use crate::harness::{within, Proxy};
use http::StatusCode;
use serde_json::json;

#[tokio::test]
async fn initialize_list_call_delete_then_the_session_is_gone() {
    let proxy = Proxy::start().await;
    let mut client = proxy.client();
    let init = client.initialize("2025-11-25").await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(
        init["result"]["serverInfo"]["name"],
        "mcp-session-proxy-demo"
    );
    let session = client.session.clone().unwrap();
    assert!(
        session.len() >= 22,
        "at least 128 bits of base64url: {session}"
    );

    let tools = client.request("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"progress"),
        "{names:?}"
    );
    assert_eq!(
        client.call_tool("add", json!({ "a": 2, "b": 3 })).await,
        "5"
    );
    assert_eq!(
        client.call_tool("echo", json!({ "text": "hé\nllo" })).await,
        "hé\nllo"
    );

    assert_eq!(client.delete().await, StatusCode::OK);
    let after = client
        .post(&json!({ "jsonrpc": "2.0", "id": 99, "method": "tools/list" }))
        .await;
    assert_eq!(after.status, StatusCode::NOT_FOUND);
    assert_eq!(after.json().await["error"]["code"], -32001);
    assert_eq!(client.get(None).await.status, StatusCode::NOT_FOUND);
    assert_eq!(client.delete().await, StatusCode::NOT_FOUND);
    assert_eq!(proxy.metric("mcp_proxy_sessions_open"), 0);
    proxy.stop().await;
}

#[tokio::test]
async fn sessions_ids_are_the_proxys_own_and_distinct() {
    let proxy = Proxy::start().await;
    let a = proxy.initialized_client("2025-06-18").await;
    let b = proxy.initialized_client("2025-06-18").await;
    assert_ne!(a.session, b.session);
    proxy.stop().await;
}

#[tokio::test]
async fn clients_of_2025_11_25_get_a_priming_event_with_retry_older_ones_do_not() {
    let proxy = Proxy::start().await;
    for (version, primed) in [("2025-11-25", true), ("2025-06-18", false)] {
        let mut client = proxy.client();
        client.initialize(version).await;
        let mut stream = client.get(None).await;
        assert_eq!(stream.status, StatusCode::OK);
        assert!(stream.is_sse());
        let call = client
            .post(&json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": { "name": "progress", "arguments": { "steps": 2 }, "_meta": { "progressToken": "p" } } }))
            .await;
        assert!(
            call.is_sse(),
            "progress comes first, so the answer is a stream"
        );
        let mut call = call;
        let first = within("first event", call.next_event()).await.unwrap();
        if primed {
            assert_eq!(first.data, "", "{version}: priming event has empty data");
            assert!(first.id.is_some());
            assert_eq!(first.retry, Some(1000));
        } else {
            assert!(
                first.data.contains("notifications/progress"),
                "{version}: {first:?}"
            );
        }
        let rest = within("the rest", call.remaining_messages()).await;
        assert_eq!(rest.last().unwrap().message["id"], 5);
        if primed {
            let priming = within("GET priming", stream.next_event()).await.unwrap();
            assert_eq!(priming.data, "");
        }
    }
    proxy.stop().await;
}

#[tokio::test]
async fn idle_streams_carry_keep_alive_comments() {
    let proxy = Proxy::start_with(|c| c.http.sse_keep_alive = Duration::from_millis(50)).await;
    let client = proxy.initialized_client("2025-06-18").await;
    let mut stream = client.get(None).await;
    let chunk = within("a keep-alive", stream.next_chunk()).await.unwrap();
    assert_eq!(&chunk[..], b": keep-alive\n\n");
    proxy.stop().await;
}

#[tokio::test]
async fn a_new_get_stream_replaces_the_old_one() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-06-18").await;
    let mut first = client.get(None).await;
    let mut second = client.get(None).await;
    assert_eq!(
        within("the old stream to close", first.next_event()).await,
        None,
        "the old stream is closed"
    );
    client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    client.call_tool("counter", json!({})).await;
    let update = within("update", second.next_message()).await.unwrap();
    assert_eq!(update.message["method"], "notifications/resources/updated");
    proxy.stop().await;
}

#[tokio::test]
async fn unsupported_protocol_version_header_is_a_400() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-06-18").await;
    client.protocol_version = Some("1999-01-01".into());
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": 2, "method": "ping" }))
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let body = reply.json().await;
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("1999-01-01"));
    client.protocol_version = None;
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": 3, "method": "ping" }))
        .await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "absent header means 2025-03-26"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn client_cancellation_reaches_the_server_under_its_upstream_id() {
    let proxy = Proxy::start().await;
    let client = proxy.initialized_client("2025-06-18").await;
    let mut events = client.get(None).await;
    let mut slow = client.call_then_cancel("sleep").await;
    let log = within("the server's log message", events.next_message())
        .await
        .unwrap();
    assert_eq!(
        log.message["params"]["data"], "cancelled a request in flight",
        "the server found the request under the id the proxy gave it"
    );
    assert!(
        within("the cancelled stream to end", slow.remaining_messages())
            .await
            .is_empty(),
        "no response after a cancellation"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn health_and_metrics_endpoints_answer() {
    let proxy = Proxy::start().await;
    let client = proxy.initialized_client("2025-06-18").await;
    for path in ["/healthz", "/readyz"] {
        let reply = client.send_to(path, http::Method::GET, &[], None).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
    }
    let metrics = client
        .send_to("/metrics", http::Method::GET, &[], None)
        .await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert_eq!(
        metrics.headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = String::from_utf8(metrics.bytes().await.to_vec()).unwrap();
    for line in [
        "mcp_proxy_sessions_created_total{server=\"default\"} 1\n",
        "mcp_proxy_upstream_spawns_total{server=\"default\"} 1\n",
        "mcp_proxy_requests_total{server=\"default\",method=\"initialize\",status=\"200\"} 1\n",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    assert!(text.ends_with("# EOF\n"), "{text}");
    let unknown = client.send_to("/nope", http::Method::GET, &[], None).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    proxy.stop().await;
}

#[tokio::test]
async fn sse_close_after_closes_primed_streams_and_the_client_resumes_them() {
    let proxy = Proxy::start_with(|c| {
        c.http.sse_close_after = Duration::from_millis(200);
        c.http.post_response = mcp_session_proxy::front::settings::PostResponse::Sse;
    })
    .await;
    let client = proxy.initialized_client("2025-11-25").await;
    let mut call = client
        .post(&json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": { "name": "sleep", "arguments": { "ms": 600 } } }))
        .await;
    let priming = within("priming", call.next_event()).await.unwrap();
    assert_eq!(priming.data, "");
    assert!(
        within("the stream to close", call.remaining_messages())
            .await
            .is_empty(),
        "closed before the answer"
    );
    let mut resumed = client.get(priming.id.as_deref()).await;
    let answer = within("the answer", async {
        loop {
            match resumed.next_message().await {
                Some(received) => return received,
                // Closed again before the answer: resume from the same position.
                None => resumed = client.get(priming.id.as_deref()).await,
            }
        }
    })
    .await;
    assert_eq!(answer.message["id"], 9);
    assert_eq!(
        answer.message["result"]["content"][0]["text"],
        "slept 600 ms"
    );

    // Clients before 2025-11-25 get no priming event, so their streams are never cut.
    let old = proxy.initialized_client("2025-06-18").await;
    let call = old
        .post(&json!({ "jsonrpc": "2.0", "id": 10, "method": "tools/call",
            "params": { "name": "sleep", "arguments": { "ms": 400 } } }))
        .await;
    assert_eq!(within("the answer", call.response()).await["id"], 10);
    proxy.stop().await;
}
