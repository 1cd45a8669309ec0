//! W3C trace context from a client to the server behind the proxy: a `traceparent` (and
//! `tracestate`) header goes into the request's `params._meta`, where a stdio server reads it;
//! a context the client put in `_meta` itself wins.

use crate::harness::{modern_request, within, Client, Proxy};
use http::{Method, StatusCode};
use serde_json::{json, Value};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn traceparent(trace: &str) -> String {
    format!("00-{trace}-00f067aa0ba902b7-01")
}

/// What the demo's `trace_context` tool saw in its request's `_meta`.
async fn seen_by_the_server(client: &mut Client, params: Value) -> Value {
    let answer = client.request("tools/call", params).await;
    answer["result"]["structuredContent"].clone()
}

#[tokio::test]
async fn a_clients_trace_context_header_reaches_a_stdio_server_in_meta() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let untraced = seen_by_the_server(&mut client, json!({ "name": "trace_context" })).await;
    assert_eq!(untraced, json!({ "traceparent": null, "tracestate": null }));

    client.extra_headers = vec![
        ("traceparent".into(), traceparent(TRACE)),
        ("tracestate".into(), "vendor=opaque".into()),
    ];
    let traced = seen_by_the_server(&mut client, json!({ "name": "trace_context" })).await;
    assert_eq!(
        traced,
        json!({ "traceparent": traceparent(TRACE), "tracestate": "vendor=opaque" })
    );

    // The client's own context in `_meta` wins over its headers.
    let own = traceparent(&"1".repeat(32));
    let its_own = seen_by_the_server(
        &mut client,
        json!({ "name": "trace_context", "_meta": { "traceparent": own } }),
    )
    .await;
    assert_eq!(its_own, json!({ "traceparent": own, "tracestate": null }));

    // A malformed header is not passed on, and the call goes on.
    client.extra_headers = vec![("traceparent".into(), "00-not-a-trace".into())];
    let malformed = seen_by_the_server(&mut client, json!({ "name": "trace_context" })).await;
    assert_eq!(
        malformed,
        json!({ "traceparent": null, "tracestate": null })
    );
}

#[tokio::test]
async fn a_2026_07_28_clients_trace_context_reaches_the_server_too() {
    let proxy = Proxy::start().await;
    let params = json!({ "name": "trace_context" });
    let body = modern_request(1, "tools/call", params, json!({}));
    let parent = traceparent(TRACE);
    let reply = proxy
        .client()
        .post_modern(&body, &[("traceparent", parent.as_str())])
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let answer = reply.response().await;
    assert_eq!(
        answer["result"]["structuredContent"]["traceparent"],
        parent.as_str(),
        "{answer}"
    );
}

#[tokio::test]
async fn a_2024_11_05_clients_trace_context_reaches_the_server_too() {
    let proxy = Proxy::start().await;
    let client = proxy.client();
    let (mut stream, endpoint) = client.open_legacy_sse("/sse").await;
    let parent = traceparent(TRACE);
    let post = |body: Value| {
        let (client, endpoint, parent) = (client.clone(), endpoint.clone(), parent.clone());
        async move {
            let headers = [
                ("content-type", "application/json"),
                ("traceparent", parent.as_str()),
            ];
            let reply = client
                .send_to(
                    &endpoint,
                    Method::POST,
                    &headers,
                    Some(body.to_string().into()),
                )
                .await;
            assert_eq!(reply.status, StatusCode::ACCEPTED);
        }
    };
    post(json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2024-11-05", "capabilities": {},
                    "clientInfo": { "name": "old", "version": "1" } } }))
    .await;
    within("the initialize answer", stream.next_message()).await;
    post(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
    post(json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "trace_context" } }))
    .await;
    let answer = within("the call's answer", stream.next_message())
        .await
        .unwrap()
        .message;
    assert_eq!(answer["id"], 2);
    assert_eq!(
        answer["result"]["structuredContent"]["traceparent"],
        parent.as_str(),
        "{answer}"
    );
}
