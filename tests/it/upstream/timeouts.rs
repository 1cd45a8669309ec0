//! Every wait on a server has a bound (`upstream.request_timeout`): a request its server never
//! answers fails with a clear error and the server is told to cancel it; progress and a pending
//! question to the client keep a slow request alive.

use std::time::Duration;

use crate::harness::{within, Proxy};
use http::StatusCode;
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_millis(300);

#[tokio::test]
async fn a_server_that_never_answers_initialize_gets_a_timeout_error() {
    let proxy = Proxy::start_with(|c| {
        c.upstream.stdio = Some("sleep 1000".into());
        c.upstream.request_timeout = TIMEOUT;
    })
    .await;
    let reply = within(
        "the answer to initialize",
        proxy
            .client()
            .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": { "name": "t", "version": "1" } } })),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.headers.get("mcp-session-id").is_none(), "no session");
    let body = within("the body", reply.response()).await;
    assert_eq!(body["id"], 1);
    assert_eq!(body["error"]["code"], -32603, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("did not answer initialize within 300ms"),
        "{message}"
    );
    assert_eq!(proxy.metric("mcp_proxy_sessions_open"), 0);
    assert_eq!(proxy.metric("mcp_proxy_requests_timed_out_total"), 1);
    proxy.stop().await;
}

/// Tools/call params a JSON reader like the demo server's (and the proxy's) cannot take whole:
/// a server given them would never answer.
fn unreadable_calls() -> Vec<(&'static str, String)> {
    let nested = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    vec![
        (
            "params nested 300 deep",
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"x","deep":{nested}}}}}}}"#
            ),
        ),
        (
            "a lone surrogate",
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"\ud800"}}}"#.to_owned(),
        ),
    ]
}

/// A message the proxy cannot read whole is refused at once as malformed (what it holds past
/// the point the reading stopped went unchecked), so it neither reaches the server nor waits
/// out `request_timeout` for an answer that would never come; the session goes on.
#[tokio::test]
async fn messages_the_proxy_cannot_read_whole_are_refused_at_once_and_the_session_goes_on() {
    let proxy = Proxy::start_with(|c| c.upstream.request_timeout = Duration::from_secs(30)).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    for (what, body) in unreadable_calls() {
        let reply = client
            .send(
                http::Method::POST,
                &[
                    ("mcp-session-id", client.session.as_deref().unwrap()),
                    ("content-type", "application/json"),
                    ("accept", "application/json, text/event-stream"),
                ],
                Some(body.into()),
            )
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{what}");
        let response = reply.json().await;
        assert_eq!(response["error"]["code"], -32700, "{what}: {response}");
    }
    assert_eq!(
        client
            .call_tool("echo", json!({ "text": "still here" }))
            .await,
        "still here"
    );
    assert_eq!(proxy.metric("mcp_proxy_requests_timed_out_total"), 0);
    proxy.stop().await;
}

#[tokio::test]
async fn a_silent_request_is_cancelled_at_the_server_too() {
    let proxy = Proxy::start_with(|c| c.upstream.request_timeout = TIMEOUT).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let mut listener = client.get(None).await;
    let response = client
        .request(
            "tools/call",
            json!({ "name": "sleep", "arguments": { "ms": 60_000 } }),
        )
        .await;
    assert_eq!(response["error"]["code"], -32603, "{response}");
    // The demo server reports the cancellation it received as a log message.
    let log = listener.next_with_method("notifications/message").await;
    assert_eq!(log["params"]["data"], "cancelled a request in flight");
    proxy.stop().await;
}

#[tokio::test]
async fn progress_keeps_a_slow_request_alive() {
    let proxy = Proxy::start_with(|c| c.upstream.request_timeout = TIMEOUT).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    // 4 steps 150 ms apart: twice the timeout in all, never silent for as long as it.
    let id = client.next_id();
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "progress", "arguments": { "steps": 4, "delay_ms": 150 },
                        "_meta": { "progressToken": "slow" } } }))
        .await;
    let messages = within("the call", reply_messages(reply)).await;
    let last = messages.last().unwrap();
    assert_eq!(
        last["result"]["content"][0]["text"], "done after 4 steps",
        "{messages:?}"
    );
    assert_eq!(
        messages.len(),
        5,
        "four progress notifications, then the result"
    );
    proxy.stop().await;
}

async fn reply_messages(mut reply: crate::harness::Reply) -> Vec<Value> {
    reply
        .remaining_messages()
        .await
        .into_iter()
        .map(|r| r.message)
        .collect()
}

#[tokio::test]
async fn a_question_to_the_client_pauses_the_wait() {
    let proxy = Proxy::start_with(|c| c.upstream.request_timeout = TIMEOUT).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let id = client.next_id();
    let mut call = client
        .post(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "list_roots", "arguments": {} } }))
        .await;
    let question = within("roots/list", call.next_message())
        .await
        .unwrap()
        .message;
    assert_eq!(question["method"], "roots/list");
    // A person takes longer than the timeout to answer: the server is waiting on the client,
    // not silent.
    tokio::time::sleep(TIMEOUT * 2).await;
    let answer = client
        .post(&json!({ "jsonrpc": "2.0", "id": question["id"],
                       "result": { "roots": [{ "uri": "file:///slow", "name": "slow" }] } }))
        .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    let response = within("the tool's answer", call.next_message())
        .await
        .unwrap()
        .message;
    assert!(
        response["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("file:///slow")),
        "{response}"
    );
    proxy.stop().await;
}
