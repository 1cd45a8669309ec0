//! Server→client requests over real sockets: they ride the POST stream of the request that
//! caused them, and the client's answer reaches the child of the right session.

use crate::harness::{within, Client, Proxy};
use http::StatusCode;
use serde_json::{json, Value};

/// Calls `tool`, answers the one server request it causes with `answer(request)`, and returns
/// (the server request, the tool's result text).
async fn call_and_answer(
    client: &mut Client,
    tool: &str,
    answer: impl Fn(&Value) -> Value,
) -> (Value, String) {
    let id = client.next_id();
    let mut call = client
        .post(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": tool, "arguments": {} } }))
        .await;
    assert!(call.is_sse(), "the server request needs a stream");
    let request = within("the server request", call.next_message())
        .await
        .expect("a server request on the POST stream")
        .message;
    assert!(
        request["method"].is_string() && request["id"].is_string(),
        "{request}"
    );
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": request["id"], "result": answer(&request) }))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    let response = within("the tool's answer", call.next_message())
        .await
        .expect("the response on the same stream")
        .message;
    assert_eq!(response["id"], id);
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    (request, text)
}

#[tokio::test]
async fn roots_list_goes_to_the_client_on_the_causing_stream_and_the_answer_comes_back() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-06-18").await;
    let (request, text) = call_and_answer(
        &mut client,
        "list_roots",
        |_| json!({ "roots": [{ "uri": "file:///work", "name": "work" }] }),
    )
    .await;
    assert_eq!(request["method"], "roots/list");
    assert!(text.contains("file:///work"), "{text}");
    proxy.stop().await;
}

#[tokio::test]
async fn ping_goes_both_ways() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-06-18").await;
    let pong = client.request("ping", json!({})).await;
    assert_eq!(pong["result"], json!({}), "client → server");
    let (request, text) = call_and_answer(&mut client, "ping_client", |_| json!({})).await;
    assert_eq!(request["method"], "ping");
    assert_eq!(text, "pong: {}", "server → client");
    proxy.stop().await;
}

#[tokio::test]
async fn each_answer_reaches_the_child_of_its_own_session() {
    let proxy = Proxy::start().await;
    let mut a = proxy.initialized_client("2025-06-18").await;
    let mut b = proxy.initialized_client("2025-06-18").await;
    // Both children number their requests alike ("demo-1"): only the session tells them apart.
    let (a_request, a_text) = call_and_answer(
        &mut a,
        "list_roots",
        |_| json!({ "roots": [{ "uri": "file:///a" }] }),
    )
    .await;
    let (b_request, b_text) = call_and_answer(
        &mut b,
        "list_roots",
        |_| json!({ "roots": [{ "uri": "file:///b" }] }),
    )
    .await;
    assert_eq!(a_request["id"], b_request["id"]);
    assert!(
        a_text.contains("file:///a") && !a_text.contains("file:///b"),
        "{a_text}"
    );
    assert!(
        b_text.contains("file:///b") && !b_text.contains("file:///a"),
        "{b_text}"
    );
    proxy.stop().await;
}
