//! The bundled demo server on its own, over stdio, as a client of each protocol era sees it:
//! by default a server of 2024-11-05 … 2025-11-25 only, so whatever speaks 2026-07-28 to a
//! client does so in the proxy, never in the server; with `--protocol 2026-07-28` a
//! modern-only server (what the proxy fronts for older clients).

use crate::harness::{within, DEMO};
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

/// The demo's stdio, one JSON message per line.
struct Lines {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Lines {
    fn spawn(args: &[&str]) -> Lines {
        let mut child = Command::new(DEMO)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Lines {
            child,
            stdin,
            lines,
        }
    }

    async fn send(&mut self, message: Value) {
        let line = format!("{message}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
    }

    async fn next(&mut self) -> Value {
        let line = within("the demo's next message", self.lines.next_line())
            .await
            .unwrap()
            .expect("a message");
        serde_json::from_str(&line).unwrap()
    }

    async fn ask(&mut self, message: Value) -> Value {
        self.send(message).await;
        self.next().await
    }
}

fn modern_request(id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": {}, "sampling": {}, "roots": {} },
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" } });
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

#[tokio::test]
async fn the_modern_demo_refuses_legacy_requests_and_checks_what_each_request_carries() {
    let mut demo = Lines::spawn(&["demo-server", "--protocol", "2026-07-28"]);
    let initialize = demo
        .ask(json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
                     "params": { "protocolVersion": "2025-11-25", "capabilities": {} } }))
        .await;
    assert_eq!(initialize["error"]["code"], -32022, "{initialize}");
    assert_eq!(
        initialize["error"]["data"],
        json!({ "supported": ["2026-07-28"], "requested": "2025-11-25" })
    );
    for (id, method) in [(2, "ping"), (3, "resources/subscribe")] {
        let refused = demo
            .ask(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": {} }))
            .await;
        assert_eq!(refused["error"]["code"], -32601, "{method}: {refused}");
    }
    let bare = demo
        .ask(json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {} }))
        .await;
    assert_eq!(bare["error"]["code"], -32602, "{bare}");
    let mut old = modern_request(5, "tools/list", json!({}));
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    let old = demo.ask(old).await;
    assert_eq!(old["error"]["code"], -32022, "{old}");
    assert_eq!(old["error"]["data"]["supported"], json!(["2026-07-28"]));

    let discover = demo
        .ask(modern_request(6, "server/discover", json!({})))
        .await;
    let result = &discover["result"];
    assert_eq!(
        result["supportedVersions"],
        json!(["2026-07-28"]),
        "{discover}"
    );
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["cacheScope"], "public");
    assert!(result["ttlMs"].is_u64() && result["capabilities"]["tools"].is_object());
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-session-proxy-demo"
    );
    let echoed = demo
        .ask(modern_request(
            7,
            "tools/call",
            json!({ "name": "echo", "arguments": { "text": "hi" } }),
        ))
        .await;
    assert_eq!(echoed["result"]["content"][0]["text"], "hi", "{echoed}");
    assert_eq!(echoed["result"]["resultType"], "complete");
    assert!(echoed["result"].get("ttlMs").is_none());
    drop(demo.stdin);
    within("the demo to exit", demo.child.wait()).await.unwrap();
}

#[tokio::test]
async fn the_modern_demo_sends_changes_to_listens_only_tagged_with_their_id() {
    let mut demo = Lines::spawn(&["demo-server", "--protocol", "2026-07-28"]);
    let listen = modern_request(
        8,
        "subscriptions/listen",
        json!({ "notifications": { "resourceSubscriptions": ["demo://counter"],
                                   "toolsListChanged": true, "promptsListChanged": true } }),
    );
    let id = listen["id"].clone();
    let acknowledged = demo.ask(listen).await;
    assert_eq!(
        acknowledged["method"],
        "notifications/subscriptions/acknowledged"
    );
    assert_eq!(
        acknowledged["params"]["notifications"],
        json!({ "resourceSubscriptions": ["demo://counter"], "toolsListChanged": true }),
        "prompts do not change here: {acknowledged}"
    );
    assert_eq!(
        acknowledged["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        id
    );
    demo.send(modern_request(
        20,
        "tools/call",
        json!({ "name": "counter", "arguments": {} }),
    ))
    .await;
    let (mut updated, mut answered) = (None, None);
    for _ in 0..2 {
        let message = demo.next().await;
        match message.get("id") {
            Some(_) => answered = Some(message),
            None => updated = Some(message),
        }
    }
    let updated = updated.unwrap();
    assert_eq!(updated["method"], "notifications/resources/updated");
    assert_eq!(updated["params"]["uri"], "demo://counter");
    assert_eq!(
        updated["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        id
    );
    assert_eq!(answered.unwrap()["result"]["content"][0]["text"], "1");
    // Another URI's update and a list nobody listens to reach no one: the next message is
    // the answer of the call after them.
    demo.send(modern_request(
        21,
        "tools/call",
        json!({ "name": "emit_updates", "arguments": { "uris": ["demo://greeting"], "count": 2 } }),
    ))
    .await;
    demo.send(modern_request(
        22,
        "tools/call",
        json!({ "name": "notify_list_changed", "arguments": { "list": "prompts" } }),
    ))
    .await;
    assert_eq!(demo.next().await["id"], 21);
    assert_eq!(demo.next().await["id"], 22);
}

#[tokio::test]
async fn the_modern_demo_asks_with_input_required_and_takes_the_answers_on_the_retry() {
    let mut demo = Lines::spawn(&["demo-server", "--protocol", "2026-07-28"]);
    let tool = json!({ "name": "test_input_required_result_elicitation", "arguments": {} });
    let asked = demo
        .ask(modern_request(1, "tools/call", tool.clone()))
        .await;
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    let question = &result["inputRequests"]["user_name"];
    assert_eq!(question["method"], "elicitation/create");
    assert!(question["params"].get("_meta").is_none(), "{question}");
    let state = result["requestState"].as_str().unwrap().to_owned();

    let mut retry = tool.clone();
    retry["inputResponses"] =
        json!({ "user_name": { "action": "accept", "content": { "name": "A" } } });
    retry["requestState"] = json!(state);
    let done = demo
        .ask(modern_request(2, "tools/call", retry.clone()))
        .await;
    assert_eq!(done["result"]["content"][0]["text"], "Hello, A!", "{done}");
    assert_eq!(done["result"]["resultType"], "complete");

    retry["requestState"] = json!(format!("{state}x"));
    let tampered = demo.ask(modern_request(3, "tools/call", retry)).await;
    assert_eq!(tampered["error"]["code"], -32602, "{tampered}");

    let several = json!({ "name": "test_input_required_result_multiple_inputs", "arguments": {} });
    let asked = demo.ask(modern_request(4, "tools/call", several)).await;
    let mut keys: Vec<&String> = asked["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    keys.sort();
    assert_eq!(keys, ["client_roots", "greeting", "user_name"], "{asked}");
}
