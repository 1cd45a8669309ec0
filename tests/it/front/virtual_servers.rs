//! Virtual servers over real sockets: one endpoint composing the demo (stdio), npm
//! server-everything (stdio) and the demo's 2026-07-28 mode over HTTP, each a member with its
//! own upstream session inside one client session. The official clients see every member's
//! tools, resources, prompts and completions; state stays each member's own; a member that dies
//! fails only its own calls. The shipped example (config/virtual.toml) over Streamable HTTP,
//! WebSocket and 2024-11-05 SSE; cancellations and tool rates through it; what a client can
//! forge refused.

use std::time::Duration;

use crate::harness::ws::Ws;
use crate::harness::{modern_demo_over_http, node_dir};
use crate::harness::{modern_meta, python_script, stdout_of, within, Proxy, DEMO};
use mcp_session_proxy::config::{Config, ServerConfig, VirtualConfig};
use serde_json::json;

fn stdio(command: String) -> ServerConfig {
    let mut server = ServerConfig::default();
    server.upstream.stdio = Some(command);
    server.upstream.shutdown_grace = Duration::from_millis(500);
    server
}

/// A virtual server `workbench` of `demo` (stdio), `everything` (server-everything over stdio,
/// not served at a path of its own) and `remote` (the demo's 2026-07-28 mode at `remote`), also
/// at `/mcp`; streams closed after 500 ms so that clients resume them.
async fn workbench(remote: &str) -> Proxy {
    let node = node_dir();
    let everything = format!(
        "node {}",
        shell_words::quote(
            &node
                .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
                .to_string_lossy()
        )
    );
    let remote = remote.to_owned();
    Proxy::start_with(move |c| {
        c.upstream.stdio = None;
        c.http.sse_close_after = Duration::from_millis(500);
        c.servers.insert(
            "demo".into(),
            stdio(format!("{} demo-server", shell_words::quote(DEMO))),
        );
        let mut everything = stdio(format!("{everything} stdio"));
        everything.serve = false;
        c.servers.insert("everything".into(), everything);
        let mut http = ServerConfig::default();
        http.upstream.http = Some(remote);
        c.servers.insert("remote".into(), http);
        c.r#virtual.insert(
            "workbench".into(),
            VirtualConfig {
                servers: vec!["demo".into(), "everything".into(), "remote".into()],
                default: true,
                ..VirtualConfig::default()
            },
        );
    })
    .await
}

#[tokio::test]
async fn the_official_typescript_client_uses_every_member_through_one_session() {
    let (_remote, addr) = modern_demo_over_http().await;
    let proxy = workbench(&format!("http://{addr}/mcp")).await;
    let url = format!("http://{}/servers/workbench/mcp", proxy.addr());
    let report = virtual_client(&url).await;
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["server"], "workbench");
    let instructions = report["instructions"].as_str().unwrap();
    assert!(instructions.starts_with("demo: "), "{instructions}");
    assert_eq!(report["echoes"]["demo"], "to demo");
    assert_eq!(report["echoes"]["everything"], "Echo: to everything");
    assert_eq!(report["echoes"]["remote"], "to remote");
    // demo's counter twice, remote's once: each member's own.
    assert_eq!(report["counters"], json!(["1", "2", "1"]));
    assert_eq!(report["greeting"], "Hello from the demo server");
    assert!(
        report["templated"].as_str().unwrap().contains('3'),
        "{report}"
    );
    assert!(report["document"]
        .as_str()
        .unwrap()
        .starts_with("demo://resource/static/document/"));
    assert!(
        report["prompt"].as_str().unwrap().contains("Ada"),
        "{report}"
    );
    assert_eq!(report["completed"], json!(["Engineering"]));
    assert_eq!(report["update"], "demo://counter");
    assert!(report["elicited"].as_str().is_some(), "{report}");
    assert!(
        report["elicitationText"].as_str().unwrap().contains("Ada"),
        "the client's answer reached the member: {report}"
    );
    assert_eq!(report["progress"], 4);
    assert!(
        !report["resumptions"].as_array().unwrap().is_empty(),
        "the cut stream was resumed: {report}"
    );
    assert!(
        report["unknown"].as_str().unwrap().contains("nobody__echo"),
        "{report}"
    );
    // The same server at /mcp, and `everything` at no path of its own.
    let at_root = proxy.client();
    let reply = at_root
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": { "name": "x", "version": "1" } } }))
        .await;
    assert_eq!(reply.status, http::StatusCode::OK);
    let mut alone = proxy.client();
    alone.path = "/servers/everything/mcp".into();
    let reply = alone
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" }))
        .await;
    assert_eq!(reply.status, http::StatusCode::NOT_FOUND);
}

async fn virtual_client(url: &str) -> serde_json::Value {
    let node = node_dir();
    let mut command = tokio::process::Command::new("node");
    command
        .arg(node.join("virtual_client.mjs"))
        .arg(url)
        .current_dir(&node);
    let stdout = stdout_of("the TypeScript client of the virtual server", &mut command).await;
    serde_json::from_slice(&stdout).expect("a JSON report")
}

#[tokio::test]
async fn the_official_python_client_lists_and_calls_every_member() {
    let (_remote, addr) = modern_demo_over_http().await;
    let proxy = workbench(&format!("http://{addr}/mcp")).await;
    let url = format!("http://{}/servers/workbench/mcp", proxy.addr());
    let mut python = python_script("virtual_client.py");
    python.arg(&url);
    let report: serde_json::Value =
        serde_json::from_slice(&stdout_of("the Python client", &mut python).await).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    // Stopping ends the virtual server's sessions and its members', `everything` (at no path
    // of its own) too, within the usual bound.
    proxy.stop().await;
}

#[tokio::test]
async fn a_member_that_dies_fails_only_its_own_calls_and_comes_back_when_next_called() {
    let (_remote, addr) = modern_demo_over_http().await;
    let proxy = workbench(&format!("http://{addr}/mcp")).await;
    let mut client = proxy.client();
    client.path = "/servers/workbench/mcp".into();
    client.initialize("2025-11-25").await;
    assert_eq!(client.call_tool("demo__counter", json!({})).await, "1");
    assert_eq!(client.call_tool("remote__counter", json!({})).await, "1");

    let crashed = client
        .post(&json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": { "name": "demo__crash", "arguments": { "code": 3 } } }))
        .await
        .response()
        .await;
    let message = crashed["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("demo (a member of this virtual server)"),
        "{crashed}"
    );
    // The others go on, their state intact.
    assert_eq!(client.call_tool("remote__counter", json!({})).await, "2");
    assert_eq!(
        client
            .call_tool("everything__echo", json!({ "message": "still" }))
            .await,
        "Echo: still"
    );
    // The demo is started again for the session: a new process, a new count.
    assert_eq!(client.call_tool("demo__counter", json!({})).await, "1");
    let down = r#"mcp_proxy_virtual_members_down_total{server="workbench",member="demo"}"#;
    assert_eq!(proxy.metric(down), 1, "counted, by member");
}

/// A 2026-07-28 client (no session of its own: its principal's) sees the composed server in
/// `server/discover`, and calls two members, each with its own state.
#[tokio::test]
async fn a_2026_07_28_client_discovers_and_calls_the_composed_server() {
    let (_remote, addr) = modern_demo_over_http().await;
    let proxy = workbench(&format!("http://{addr}/mcp")).await;
    let mut client = proxy.client();
    client.path = "/servers/workbench/mcp".into();
    client.authorization = Some("Bearer alice".into());
    let request = |id: u64, method: &str, params: serde_json::Value| {
        let mut params = params;
        params["_meta"] = modern_meta(json!({}));
        json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
    };
    let discovered = client
        .post_modern(&request(1, "server/discover", json!({})), &[])
        .await
        .response()
        .await;
    let result = &discovered["result"];
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "workbench",
        "{discovered}"
    );
    assert!(result["capabilities"]["tools"].is_object(), "{result}");
    assert!(result["capabilities"]["prompts"].is_object(), "{result}");

    let mut counts = Vec::new();
    for tool in ["demo__counter", "demo__counter", "remote__counter"] {
        let call = request(2, "tools/call", json!({ "name": tool, "arguments": {} }));
        let answer = client.post_modern(&call, &[]).await.response().await;
        counts.push(answer["result"]["content"][0]["text"].clone());
    }
    assert_eq!(counts, [json!("1"), json!("2"), json!("1")]);
}

/// The shipped example (config/virtual.toml), run as the book's worked example runs it: the
/// members' tools composed, each member's rule and the virtual server's applied, each member's
/// state its own, and `tasks` at no path of its own.
/// The proxy running config/virtual.toml, its members the demo at this build's path.
async fn shipped_example() -> Proxy {
    shipped_example_with(|_| {}).await
}

/// [`shipped_example`], its configuration adjusted.
async fn shipped_example_with(adjust: impl FnOnce(&mut Config)) -> Proxy {
    let root = crate::harness::repo_root();
    let text = std::fs::read_to_string(root.join("config/virtual.toml")).unwrap();
    let demo = format!("{} demo-server", shell_words::quote(DEMO));
    let text = text.replace("mcp-session-proxy demo-server", &demo);
    let shipped = Config::from_toml(&text).unwrap();
    Proxy::start_with(move |c| {
        let listen = c.listen;
        *c = shipped;
        c.listen = listen;
        adjust(c);
    })
    .await
}

#[tokio::test]
async fn the_shipped_example_composes_its_members_as_the_book_says() {
    let proxy = shipped_example().await;
    let mut client = proxy.client();
    client.path = "/servers/workbench/mcp".into();
    client.initialize("2025-11-25").await;
    let listed = client.request("tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert!(names.contains(&"notes__counter") && names.contains(&"tasks__counter"));
    assert!(names.contains(&"notes__sleep") && !names.contains(&"tasks__sleep"));
    assert!(
        !names.iter().any(|name| name.ends_with("__crash")),
        "{names:?}"
    );
    assert_eq!(client.call_tool("notes__counter", json!({})).await, "1");
    assert_eq!(client.call_tool("tasks__counter", json!({})).await, "1");
    // default = true: the same server at /mcp.
    let mut at_root = proxy.client();
    at_root.initialize("2025-11-25").await;
    assert_eq!(at_root.call_tool("notes__counter", json!({})).await, "1");
    let mut tasks = proxy.client();
    tasks.path = "/servers/tasks/mcp".into();
    let reply = tasks
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" }))
        .await;
    assert_eq!(reply.status, http::StatusCode::NOT_FOUND);
}

/// What a client can send a virtual server that is not what it listed: a cursor of its own
/// making (naming a member that does not exist, or not one at all), a composed name of no
/// member, a URI no member has. Each is refused with its code; the session goes on.
#[tokio::test]
async fn a_forged_cursor_an_unknown_name_and_an_unknown_uri_are_refused_and_the_session_goes_on() {
    let (_remote, addr) = modern_demo_over_http().await;
    let proxy = workbench(&format!("http://{addr}/mcp")).await;
    let mut client = proxy.client();
    client.path = "/servers/workbench/mcp".into();
    client.initialize("2025-11-25").await;
    use base64::Engine;
    let encode = |text: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text);
    for cursor in [
        encode(r#"[[99,"x"]]"#),
        encode("[[0"),
        "not base64!".to_owned(),
    ] {
        let answer = client
            .request("tools/list", json!({ "cursor": cursor }))
            .await;
        assert_eq!(answer["error"]["code"], -32602, "{cursor}: {answer}");
    }
    let answer = client
        .request("prompts/get", json!({ "name": "nobody__greet" }))
        .await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let answer = client
        .request("resources/read", json!({ "uri": "nowhere://at/all" }))
        .await;
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
    // The composed name written with escapes and spaces, as JSON allows: the member gets its
    // own name and the arguments as they came (escapes included).
    let reply = client
        .post_text(
            r#"{"jsonrpc":"2.0","id":77,"method":"tools/call",
                "params": { "arguments" : {"text":"a\u0022b\u00e9"} , "name" : "demo__\u0065cho" }}"#,
        )
        .await;
    let answer = reply.response().await;
    assert_eq!(answer["result"]["content"][0]["text"], "a\"bé", "{answer}");
    // Two names, one routed and another forwarded: refused before any member is chosen.
    let reply = client
        .post_text(
            r#"{"jsonrpc":"2.0","id":79,"method":"tools/call",
                "params":{"name":"demo__echo","arguments":{"text":"x"},"name":"other__echo"}}"#,
        )
        .await;
    crate::harness::assert_duplicate_refused(reply, 79, "params.name").await;
    // A name that is not a string names no tool.
    let reply = client
        .post_text(r#"{"jsonrpc":"2.0","id":78,"method":"tools/call","params":{"name":7}}"#)
        .await;
    assert_eq!(reply.response().await["error"]["code"], -32602);
    assert_eq!(
        client
            .call_tool("demo__echo", json!({ "text": "on" }))
            .await,
        "on"
    );
}

/// The virtual server over the other transports, as any server: a WebSocket session calling
/// both members and resumed on a new connection with `session/resume`; a 2024-11-05 SSE
/// client calling both. Two members offering the same URI: the first's is listed, once, and
/// the other's counted.
#[tokio::test]
async fn websocket_and_legacy_sse_clients_use_both_members_and_a_shared_uri_is_listed_once() {
    let proxy = shipped_example().await;
    let path = "/servers/workbench/mcp";
    let protocol = [("sec-websocket-protocol", "mcp")];
    let mut ws = Ws::connect_with(proxy.addr(), path, &protocol)
        .await
        .unwrap();
    let session = ws.start_session().await;
    ws.initialize().await;
    assert_eq!(ws.call_tool("notes__counter", json!({})).await, "1");
    assert_eq!(ws.call_tool("tasks__counter", json!({})).await, "1");
    ws.cut();
    let mut again = Ws::connect_with(proxy.addr(), path, &protocol)
        .await
        .unwrap();
    again.resume(&session, &json!(0)).await;
    assert_eq!(again.call_tool("notes__counter", json!({})).await, "2");

    // A 2024-11-05 client at /servers/workbench/sse.
    let client = proxy.client();
    let (mut stream, endpoint) = client.open_legacy_sse("/servers/workbench/sse").await;
    let post = |body: serde_json::Value| {
        let (client, endpoint) = (&client, endpoint.clone());
        async move {
            let headers = [("content-type", "application/json")];
            let sent = client
                .send_to(
                    &endpoint,
                    http::Method::POST,
                    &headers,
                    Some(body.to_string().into()),
                )
                .await;
            assert_eq!(sent.status, http::StatusCode::ACCEPTED);
        }
    };
    post(json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2024-11-05", "capabilities": {},
                    "clientInfo": { "name": "old", "version": "1" } } }))
    .await;
    let answer = within("initialize", stream.next_message()).await.unwrap();
    assert_eq!(answer.message["result"]["serverInfo"]["name"], "workbench");
    post(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
    post(json!({ "jsonrpc": "2.0", "id": 2, "method": "resources/list" })).await;
    let listed = within("resources/list", stream.next_message())
        .await
        .unwrap();
    let uris: Vec<&str> = listed.message["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    let greetings = uris.iter().filter(|uri| **uri == "demo://greeting").count();
    assert_eq!(greetings, 1, "{uris:?}");
    let collided = r#"mcp_proxy_virtual_name_collisions_total{server="workbench",member="tasks"}"#;
    assert!(proxy.metric(collided) >= 1);
    post(json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": { "name": "tasks__echo", "arguments": { "text": "old" } } }))
    .await;
    let echoed = within("tools/call", stream.next_message()).await.unwrap();
    assert_eq!(echoed.message["result"]["content"][0]["text"], "old");
}

/// A client's cancellation reaches the member that has the request (the demo logs that it
/// cancelled one in flight, its log message naming the member), and no answer follows it.
#[tokio::test]
async fn a_cancellation_reaches_the_member_that_has_the_request() {
    let proxy = shipped_example().await;
    let mut client = proxy.client();
    client.path = "/servers/workbench/mcp".into();
    client.initialize("2025-11-25").await;
    let mut events = client.get(None).await;
    let mut slow = client.call_then_cancel("notes__sleep").await;
    let log = within("the member's log message", events.next_message())
        .await
        .unwrap();
    assert_eq!(
        log.message["params"]["data"],
        "cancelled a request in flight"
    );
    // Its logger named after the member: `<member>/<its own logger>`.
    assert_eq!(
        log.message["params"]["logger"], "notes/demo",
        "{}",
        log.message
    );
    assert!(
        within("the cancelled stream to end", slow.remaining_messages())
            .await
            .is_empty(),
        "no response after a cancellation"
    );
}

/// `[limits.tools]` counts a composed tool by the name clients see: one member's tool over its
/// rate is refused (429), the same tool of the other member is not.
#[tokio::test]
async fn a_composed_tools_rate_is_its_own() {
    let proxy = shipped_example_with(|c| {
        c.limits.tools = [("notes__add".to_owned(), 0.01)].into();
    })
    .await;
    let mut client = proxy.client();
    client.path = "/servers/workbench/mcp".into();
    client.initialize("2025-11-25").await;
    let add = json!({ "a": 1, "b": 2 });
    assert_eq!(client.call_tool("notes__add", add.clone()).await, "3");
    let refused = client
        .post(&json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": { "name": "notes__add", "arguments": add } }))
        .await;
    assert_eq!(refused.status, http::StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(client.call_tool("tasks__add", add).await, "3");
}
