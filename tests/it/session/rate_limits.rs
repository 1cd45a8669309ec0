//! Per-principal rate limits over real sockets (`[limits]`, `--rate-limit`): a principal over
//! its rate gets 429 with `Retry-After` and a JSON-RPC error whose data says when to retry;
//! other principals and other tools keep their own budgets. The rates here allow one request
//! per 100 s, so no wait of the machine's can refill a bucket within a test. Replicas on one
//! Redis take from the same buckets.

use crate::harness::cluster::{metric, Redis, Replica};
use crate::harness::ws::Ws;
use crate::harness::{Client, Proxy};
use http::StatusCode;
use serde_json::{json, Value};

/// A request's status, its `Retry-After` in seconds (if any) and its answer.
async fn post(
    client: &mut Client,
    method: &str,
    params: Value,
) -> (StatusCode, Option<u64>, Value) {
    let id = client.next_id();
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
        .await;
    let status = reply.status;
    let retry_after = reply
        .headers
        .get("retry-after")
        .and_then(|value| value.to_str().ok()?.parse().ok());
    (status, retry_after, reply.response().await)
}

fn assert_limited(refused: &(StatusCode, Option<u64>, Value), limit: &str) {
    let (status, retry_after, answer) = refused;
    assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS, "{answer}");
    assert!(
        retry_after.is_some_and(|seconds| (99..=100).contains(&seconds)),
        "Retry-After: {retry_after:?}"
    );
    assert_eq!(answer["error"]["code"], -32029, "{answer}");
    let waited = answer["error"]["data"]["retryAfterMs"].as_u64().unwrap();
    assert!((98_000..=100_000).contains(&waited), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains(limit), "{message}");
}

#[tokio::test]
async fn a_principal_over_its_rate_gets_429_and_others_keep_theirs() {
    let proxy = Proxy::start_with(|config| config.limits.requests_per_second = 0.01).await;
    let mut alice = proxy.client();
    alice.authorization = Some("Bearer alice".into());
    alice.initialize("2025-11-25").await;
    let refused = post(&mut alice, "tools/list", json!({})).await;
    assert_limited(&refused, "limits.requests_per_second");

    let mut bob = proxy.client();
    bob.authorization = Some("Bearer bob".into());
    bob.initialize("2025-11-25").await;
    assert_eq!(proxy.metric("mcp_proxy_rate_limited_requests_total"), 1);
    assert_eq!(
        proxy.metric("mcp_proxy_rate_buckets"),
        2,
        "one bucket per principal, kept here"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_request_over_its_rate_starts_no_server_on_any_transport() {
    let proxy = Proxy::start_with(|config| config.limits.requests_per_second = 0.01).await;
    let mut alice = proxy.client();
    alice.authorization = Some("Bearer alice".into());
    alice.initialize("2025-11-25").await;
    assert_eq!(proxy.metric("mcp_proxy_upstream_spawns_total"), 1);

    let initialize = json!({ "protocolVersion": "2025-11-25", "capabilities": {},
                             "clientInfo": { "name": "rate", "version": "1" } });
    let mut again = proxy.client();
    again.authorization = alice.authorization.clone();
    let refused = post(&mut again, "initialize", initialize.clone()).await;
    assert_limited(&refused, "limits.requests_per_second");
    let bearer = "Bearer alice";
    let mut ws = Ws::connect_with(
        proxy.addr(),
        "/mcp",
        &[("sec-websocket-protocol", "mcp"), ("authorization", bearer)],
    )
    .await
    .unwrap();
    let refused = ws.request("initialize", initialize).await;
    assert_eq!(refused["error"]["code"], -32029, "{refused}");
    let protocol_start = ws.request("session/start", json!({})).await;
    assert_eq!(protocol_start["error"]["code"], -32029, "{protocol_start}");
    // Refused before anything was started for them: one session, one server.
    assert_eq!(proxy.metric("mcp_proxy_upstream_spawns_total"), 1);
    assert_eq!(proxy.metric("mcp_proxy_sessions_created_total"), 1);
    assert_eq!(proxy.metric("mcp_proxy_rate_limited_requests_total"), 3);
    proxy.stop().await;
}

#[tokio::test]
async fn a_tools_rate_is_its_own_within_the_principals() {
    let proxy = Proxy::start_with(|config| {
        config.limits.tools = [("add".to_owned(), 0.01)].into();
    })
    .await;
    let mut alice = proxy.initialized_client("2025-11-25").await;
    assert_eq!(alice.call_tool("add", json!({ "a": 1, "b": 2 })).await, "3");
    let refused = post(
        &mut alice,
        "tools/call",
        json!({ "name": "add", "arguments": { "a": 1, "b": 2 } }),
    )
    .await;
    assert_limited(&refused, "limits.tools.add");
    assert_eq!(
        alice
            .call_tool("echo", json!({ "text": "other tools" }))
            .await,
        "other tools"
    );
    assert_eq!(proxy.metric("mcp_proxy_rate_limited_tool_calls_total"), 1);
    // A second `name` that a last-wins server would read is no way around the tool's limit.
    let id = alice.next_id();
    let reply = alice
        .post_text(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call",
                "params":{{"name":"echo","name":"add","arguments":{{"a":1,"b":2}}}}}}"#
        ))
        .await;
    crate::harness::assert_duplicate_refused(reply, id, "params.name").await;
    proxy.stop().await;
}

#[tokio::test]
async fn replicas_share_one_budget_per_principal() {
    let mut redis = Redis::start().await;
    let a = Replica::start(&redis, "a", &["--rate-limit", "0.01"]).await;
    let b = Replica::start(&redis, "b", &["--rate-limit", "0.01"]).await;
    let mut on_a = Client::new(a.addr);
    on_a.authorization = Some("Bearer alice".into());
    on_a.initialize("2025-11-25").await;

    let mut on_b = Client::new(b.addr);
    on_b.authorization = Some("Bearer alice".into());
    let refused = post(
        &mut on_b,
        "initialize",
        json!({ "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": { "name": "rate", "version": "1" } }),
    )
    .await;
    assert_limited(&refused, "limits.requests_per_second");
    assert_eq!(metric(&b, "mcp_proxy_rate_limited_requests_total").await, 1);
    assert_eq!(
        metric(&b, "mcp_proxy_rate_buckets").await,
        0,
        "the buckets are kept in Redis"
    );

    let mut bob = Client::new(b.addr);
    bob.authorization = Some("Bearer bob".into());
    bob.initialize("2025-11-25").await;
    redis.stop().await;
}

#[tokio::test]
async fn on_websocket_the_refusal_is_the_error_alone_with_when_to_retry() {
    let proxy = Proxy::start_with(|config| config.limits.requests_per_second = 0.01).await;
    let mut ws = Ws::connect(proxy.addr()).await;
    let initialized = ws
        .request(
            "initialize",
            json!({ "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": { "name": "rate", "version": "1" } }),
        )
        .await;
    assert!(initialized["result"].is_object(), "{initialized}");
    let refused = ws.request("tools/list", json!({})).await;
    assert_eq!(refused["error"]["code"], -32029, "{refused}");
    let waited = refused["error"]["data"]["retryAfterMs"].as_u64().unwrap();
    assert!((98_000..=100_000).contains(&waited), "{refused}");
    proxy.stop().await;
}
