//! The bundled demo server on its own, over stdio, as a client of each protocol era sees it:
//! a server of 2024-11-05 … 2025-11-25 only, so whatever speaks 2026-07-28 to a client does so
//! in the proxy, never in the server.

mod common;

use common::{within, DEMO};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

#[tokio::test]
async fn the_demo_refuses_modern_requests_and_serves_once_initialized() {
    let mut child = Command::new(DEMO)
        .arg("demo-server")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut ask = async |message: Value| -> Value {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
        let line = within("the demo's answer", lines.next_line())
            .await
            .unwrap()
            .expect("an answer");
        serde_json::from_str(&line).unwrap()
    };
    let modern = json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                         "io.modelcontextprotocol/clientCapabilities": {} });

    let discover = ask(
        json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover",
                               "params": { "_meta": modern } }),
    )
    .await;
    assert_eq!(
        discover["error"]["code"], -32601,
        "a legacy server: {discover}"
    );

    let call = ask(json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "echo", "arguments": { "text": "x" }, "_meta": modern } }))
    .await;
    assert_eq!(call["error"]["code"], -32600, "{call}");
    assert!(
        call["error"]["message"]
            .as_str()
            .unwrap()
            .contains("before initialize"),
        "{call}"
    );

    let ping = ask(json!({ "jsonrpc": "2.0", "id": 3, "method": "ping" })).await;
    assert_eq!(
        ping["result"],
        json!({}),
        "ping is allowed before initialize"
    );

    let init = ask(
        json!({ "jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": { "name": "t", "version": "1" } } }),
    )
    .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    let call = ask(json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": { "name": "echo", "arguments": { "text": "x" } } }))
    .await;
    assert_eq!(call["result"]["content"][0]["text"], "x", "{call}");
    drop(stdin);
    within("the demo to exit", child.wait()).await.unwrap();
}
