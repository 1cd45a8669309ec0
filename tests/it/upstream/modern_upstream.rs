//! Legacy clients in front of a 2026-07-28 server (the demo's modern-only mode over stdio,
//! `upstream.protocol = "2026-07-28"`): the session they expect, bridged to a server that has
//! none.

use crate::harness::{serve_the_modern_demo, within, Client, Proxy, DEMO};
use hyper::StatusCode;
use mcp_session_proxy::config::Isolation;
use mcp_session_proxy::wire::era::Era;
use serde_json::{json, Value};

async fn in_front_of_the_modern_demo() -> Proxy {
    Proxy::start_with(serve_the_modern_demo).await
}

/// A 2026-07-28 server over HTTP: another proxy's modern face in front of the modern demo
/// (anonymous requests sharing one server, so the demo's counter persists between requests).
async fn modern_http_server() -> Proxy {
    use mcp_session_proxy::session::correlate::Anonymous;
    Proxy::start_with(|config| {
        serve_the_modern_demo(config);
        config.session.anonymous = Anonymous::Shared;
    })
    .await
}

/// A proxy bridging its legacy clients to the 2026-07-28 HTTP server `server`.
async fn bridging_to(server: &Proxy) -> Proxy {
    Proxy::start_with(|config| {
        config.upstream.stdio = None;
        config.upstream.http = Some(format!("http://{}/mcp", server.addr()));
        config.upstream.protocol = Era::Modern;
    })
    .await
}

/// initialize with these client capabilities; keeps the session.
async fn initialize(client: &mut Client, capabilities: Value) -> Value {
    let reply = client
        .post(
            &json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": capabilities,
            "clientInfo": { "name": "legacy-client", "version": "1" } } }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    client.session = Some(reply.headers["mcp-session-id"].to_str().unwrap().to_owned());
    client.protocol_version = Some("2025-06-18".into());
    let initialized = reply.response().await;
    let ack = client
        .post(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
        .await;
    assert_eq!(ack.status, StatusCode::ACCEPTED);
    initialized
}

#[tokio::test]
async fn a_legacy_client_gets_its_session_from_a_server_that_has_none() {
    let proxy = in_front_of_the_modern_demo().await;
    let mut client = proxy.client();
    let initialized = initialize(&mut client, json!({})).await;
    let result = &initialized["result"];
    assert_eq!(result["protocolVersion"], "2025-06-18", "{initialized}");
    assert_eq!(result["serverInfo"]["name"], "mcp-session-proxy-demo");
    assert!(result["capabilities"]["tools"].is_object());
    assert!(result["instructions"].is_string());

    assert_eq!(
        client.call_tool("echo", json!({ "text": "hi" })).await,
        "hi"
    );
    let listed = client.request("tools/list", json!({})).await;
    assert!(listed["result"]["tools"].as_array().unwrap().len() > 3);
    assert!(listed["result"].get("resultType").is_none(), "{listed}");
    // Gone from 2026-07-28, answered by the proxy.
    assert_eq!(client.request("ping", json!({})).await["result"], json!({}));
    let set = client
        .request("logging/setLevel", json!({ "level": "info" }))
        .await;
    assert_eq!(set["result"], json!({}));
    // The counter lives in the server process, which the session keeps.
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    assert_eq!(client.call_tool("counter", json!({})).await, "2");
    proxy.stop().await;
}

#[tokio::test]
async fn input_required_becomes_a_question_on_the_call_stream_and_the_answer_a_retry() {
    let proxy = in_front_of_the_modern_demo().await;
    let mut client = proxy.client();
    initialize(&mut client, json!({ "elicitation": {} })).await;
    let mut call = client
        .post(
            &json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "test_input_required_result_elicitation", "arguments": {} } }),
        )
        .await;
    assert!(call.is_sse());
    let question = call.next_with_method("elicitation/create").await;
    assert_eq!(
        question["params"]["message"], "What is your name?",
        "{question}"
    );
    let answered = client
        .post(&json!({ "jsonrpc": "2.0", "id": question["id"],
            "result": { "action": "accept", "content": { "name": "A" } } }))
        .await;
    assert_eq!(answered.status, StatusCode::ACCEPTED);
    let done = within("the call's answer", call.response()).await;
    assert_eq!(done["id"], 5);
    assert_eq!(done["result"]["content"][0]["text"], "Hello, A!", "{done}");
    proxy.stop().await;
}

#[tokio::test]
async fn a_subscription_becomes_a_listen_and_its_updates_reach_the_get_stream() {
    let proxy = in_front_of_the_modern_demo().await;
    let mut client = proxy.client();
    initialize(&mut client, json!({})).await;
    let mut stream = client.get(None).await;
    assert_eq!(stream.status, StatusCode::OK);
    let subscribed = client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(subscribed["result"], json!({}));
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    let updated = stream
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(updated["params"]["uri"], "demo://counter");
    assert!(updated["params"].get("_meta").is_none(), "{updated}");
    client
        .call_tool("notify_list_changed", json!({ "list": "tools" }))
        .await;
    stream
        .next_with_method("notifications/tools/list_changed")
        .await;
    proxy.stop().await;
}

#[tokio::test]
async fn a_question_the_client_cannot_answer_fails_the_call_and_a_cut_stream_loses_nothing() {
    let proxy = in_front_of_the_modern_demo().await;
    let mut client = proxy.client();
    initialize(&mut client, json!({ "elicitation": {} })).await;
    let call = |id: u64| {
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "test_input_required_result_elicitation", "arguments": {} } })
    };
    let mut unable = proxy.client();
    initialize(&mut unable, json!({})).await;
    let refused = unable.post(&call(9)).await.response().await;
    // The server's own refusal (a modern server does not ask for what was not declared).
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"],
        json!({ "elicitation": {} })
    );

    let mut first = client.post(&call(1)).await;
    let question = first.next_with_method("elicitation/create").await;
    client
        .post(&json!({ "jsonrpc": "2.0", "id": question["id"],
            "error": { "code": -32601, "message": "no elicitation here" } }))
        .await;
    let failed = within("the failed call", first.response()).await;
    assert_eq!(failed["id"], 1);
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no elicitation here"),
        "{failed}"
    );

    // The client drops the call's stream after the question, answers, and resumes: the answer
    // the server gave meanwhile is replayed from the window.
    let mut second = client.post(&call(2)).await;
    let asked = within("the question", second.next_message())
        .await
        .expect("a question");
    let event_id = asked.id.clone().expect("events carry ids");
    drop(second);
    client
        .post(&json!({ "jsonrpc": "2.0", "id": asked.message["id"],
            "result": { "action": "accept", "content": { "name": "B" } } }))
        .await;
    let resumed = client.get(Some(&event_id)).await;
    let done = within("the replayed answer", resumed.response()).await;
    assert_eq!(done["id"], 2);
    assert_eq!(done["result"]["content"][0]["text"], "Hello, B!", "{done}");
    proxy.stop().await;
}

#[tokio::test]
async fn auto_finds_each_server_s_revision_once_with_a_throwaway_child() {
    use mcp_session_proxy::upstream::probe::stdio_verdict;
    use mcp_session_proxy::upstream::stdio::StdioSpec;
    use std::time::Duration;
    crate::harness::use_the_proxys_launcher();
    let verdict = |command: String| async move {
        let spec = StdioSpec::parse(&command).unwrap();
        stdio_verdict(&spec, Duration::from_secs(10)).await
    };
    let demo = shell_words::quote(DEMO);
    assert_eq!(
        verdict(format!("{demo} demo-server --protocol 2026-07-28")).await,
        Era::Modern
    );
    assert_eq!(verdict(format!("{demo} demo-server")).await, Era::Legacy);
    // A legacy server that exits on any request before initialize, and one that never answers.
    assert_eq!(
        verdict("sh -c 'head -n 1 >/dev/null; exit 3'".into()).await,
        Era::Legacy
    );
    let silent = StdioSpec::parse("sleep 30").unwrap();
    assert_eq!(
        stdio_verdict(&silent, Duration::from_millis(200)).await,
        Era::Legacy
    );

    // Through the proxy: the verdict is counted, and either server serves a legacy client.
    for (protocol, modern) in [("--protocol 2026-07-28", 1), ("", 0)] {
        let proxy = Proxy::start_with(|config| {
            config.upstream.stdio = Some(format!("{demo} demo-server {protocol}"));
            config.upstream.protocol = Era::Auto;
        })
        .await;
        assert_eq!(proxy.metric("mcp_proxy_upstreams_modern"), modern);
        let mut client = proxy.client();
        initialize(&mut client, json!({})).await;
        assert_eq!(
            client.call_tool("echo", json!({ "text": "hi" })).await,
            "hi"
        );
        proxy.stop().await;
    }
}

#[tokio::test]
async fn a_modern_http_server_is_bridged_the_same_way() {
    let server = modern_http_server().await;
    let proxy = bridging_to(&server).await;
    let mut client = proxy.client();
    let initialized = initialize(&mut client, json!({ "elicitation": {} })).await;
    assert_eq!(
        initialized["result"]["serverInfo"]["name"], "mcp-session-proxy-demo",
        "{initialized}"
    );
    assert_eq!(
        client
            .call_tool("echo", json!({ "text": "Hello, 世界" }))
            .await,
        "Hello, 世界"
    );
    // Marked tool parameters travel in Mcp-Param-* headers, which the server checks.
    client.request("tools/list", json!({})).await;
    let arguments = json!({ "region": " eu-west1", "limit": 2, "text": "hi" });
    assert_eq!(
        client.call_tool("lookup", arguments.clone()).await,
        " eu-west1: hi"
    );
    // A proxy that never listed the tools sends no such header: refused for it, the proxy lists
    // the tools anew and sends the call again.
    let unlisted = bridging_to(&server).await;
    let mut other = unlisted.client();
    initialize(&mut other, json!({})).await;
    assert_eq!(other.call_tool("lookup", arguments).await, " eu-west1: hi");
    unlisted.stop().await;

    let mut stream = client.get(None).await;
    client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    let updated = stream
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(updated["params"]["uri"], "demo://counter");

    let mut call = client
        .post(
            &json!({ "jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": {
            "name": "test_input_required_result_elicitation", "arguments": {} } }),
        )
        .await;
    let question = call.next_with_method("elicitation/create").await;
    client
        .post(&json!({ "jsonrpc": "2.0", "id": question["id"],
            "result": { "action": "accept", "content": { "name": "H" } } }))
        .await;
    let done = within("the call's answer", call.response()).await;
    assert_eq!(done["result"]["content"][0]["text"], "Hello, H!", "{done}");
    proxy.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn auto_asks_an_http_server_and_bridges_only_one_that_refuses_initialize() {
    use mcp_session_proxy::upstream::http_client::HttpSpec;
    use mcp_session_proxy::upstream::probe::http_verdict;
    let spec = |url: String| HttpSpec {
        url: url.parse().unwrap(),
        request_timeout: std::time::Duration::from_secs(10),
        max_event_bytes: 1 << 20,
        forward_authorization: false,
        static_header: None,
        protocol: Era::Auto,
        trace_headers: true,
        tls: Default::default(),
    };
    // A 2026-07-28-only server: bridged.
    let (_demo, demo) = crate::harness::modern_demo_over_http().await;
    assert_eq!(
        http_verdict(&spec(format!("http://{demo}/mcp"))).await,
        Era::Modern
    );
    // This proxy's own front speaks both revisions: spoken to in the legacy one, and the
    // session its initialize opened is ended at once.
    let modern = Proxy::start().await;
    assert_eq!(
        http_verdict(&spec(format!("http://{}/mcp", modern.addr()))).await,
        Era::Legacy
    );
    // Only the sessions prepared for anonymous 2026-07-28 requests (the discover) stay.
    crate::harness::eventually("the probe's sessions to end", || {
        modern.metric("mcp_proxy_sessions_open") == modern.metric("mcp_proxy_anonymous_pool_ready")
    })
    .await;
    // A path that is no MCP endpoint (404), and nothing listening.
    assert_eq!(
        http_verdict(&spec(format!("http://{}/elsewhere", modern.addr()))).await,
        Era::Legacy
    );
    modern.stop().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    assert_eq!(
        http_verdict(&spec(format!("http://127.0.0.1:{port}/mcp"))).await,
        Era::Legacy
    );
}

/// The bridge sits under the session: the WebSocket and the 2024-11-05 HTTP+SSE fronts get it
/// as the Streamable HTTP one does.
#[tokio::test]
async fn every_legacy_front_reaches_a_modern_server() {
    let proxy = in_front_of_the_modern_demo().await;
    let mut ws = crate::harness::ws::Ws::connect(proxy.addr()).await;
    ws.initialize().await;
    assert_eq!(ws.call_tool("counter", json!({})).await, "1");
    assert_eq!(ws.call_tool("counter", json!({})).await, "2");

    let client = proxy.client();
    let (mut stream, endpoint) = client.open_legacy_sse("/sse").await;
    let post = |body: Value| {
        let (client, path) = (client.clone(), endpoint.clone());
        async move {
            let headers = [("content-type", "application/json")];
            let sent = client
                .send_to(
                    &path,
                    hyper::Method::POST,
                    &headers,
                    Some(body.to_string().into()),
                )
                .await;
            assert_eq!(sent.status, StatusCode::ACCEPTED);
        }
    };
    post(
        json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": { "name": "old", "version": "1" } } }),
    )
    .await;
    let initialized = within("the initialize answer", stream.next_message())
        .await
        .unwrap()
        .message;
    assert_eq!(initialized["result"]["protocolVersion"], "2024-11-05");
    assert_eq!(
        initialized["result"]["serverInfo"]["name"],
        "mcp-session-proxy-demo"
    );
    post(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
    post(
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "progress", "arguments": { "steps": 2 }, "_meta": { "progressToken": "p" } } }),
    )
    .await;
    let mut progress = 0;
    let answer = within("the call's answer", async {
        loop {
            let message = stream.next_message().await.unwrap().message;
            match message.get("id") {
                Some(_) => return message,
                None => progress += 1,
            }
        }
    })
    .await;
    assert_eq!(progress, 2, "both progress notifications came first");
    assert_eq!(answer["result"]["content"][0]["text"], "done after 2 steps");
    proxy.stop().await;
}

/// The modern demo in front of legacy clients with `isolation` and `warm` as given.
async fn in_front_of_the_modern_demo_with(isolation: Isolation, warm: usize) -> Proxy {
    Proxy::start_with(|config| {
        serve_the_modern_demo(config);
        config.upstream.isolation = isolation;
        config.upstream.warm = warm;
    })
    .await
}

#[tokio::test]
async fn one_shared_2026_07_28_child_serves_every_session_and_each_hears_its_own_listen() {
    let proxy = in_front_of_the_modern_demo_with(Isolation::Shared, 0).await;
    let (mut alice, mut bob) = (proxy.client(), proxy.client());
    initialize(&mut alice, json!({})).await;
    initialize(&mut bob, json!({})).await;
    assert_eq!(alice.call_tool("counter", json!({})).await, "1");
    assert_eq!(bob.call_tool("counter", json!({})).await, "2", "one child");

    let (mut alice_hears, mut bob_hears) = (alice.get(None).await, bob.get(None).await);
    alice
        .request("resources/subscribe", json!({ "uri": "demo://a" }))
        .await;
    bob.request("resources/subscribe", json!({ "uri": "demo://b" }))
        .await;
    let uris = json!({ "uris": ["demo://a", "demo://b"], "count": 2 });
    bob.call_tool("emit_updates", uris).await;
    let heard = |update: Value| update["params"]["uri"].clone();
    let first_of = |stream| async move {
        let stream: &mut crate::harness::Reply = stream;
        stream
            .next_with_method("notifications/resources/updated")
            .await
    };
    assert_eq!(heard(first_of(&mut alice_hears).await), "demo://a");
    // demo://a was sent first: bob's first update is his own.
    assert_eq!(heard(first_of(&mut bob_hears).await), "demo://b");
    proxy.stop().await;
}

#[tokio::test]
async fn warm_2026_07_28_children_wait_behind_their_bridges() {
    let proxy = in_front_of_the_modern_demo_with(Isolation::PerSession, 2).await;
    crate::harness::until("the warm children", true, || async {
        proxy.metric("mcp_proxy_upstream_spawns_total") >= 2
    })
    .await;
    for _ in 0..3 {
        let mut client = proxy.client();
        let initialized = initialize(&mut client, json!({})).await;
        assert_eq!(
            initialized["result"]["serverInfo"]["name"],
            "mcp-session-proxy-demo"
        );
        // A child of its own each.
        assert_eq!(client.call_tool("counter", json!({})).await, "1");
    }
    proxy.stop().await;
}

#[tokio::test]
async fn a_listen_that_drops_is_opened_again() {
    let server = modern_http_server().await;
    let proxy = bridging_to(&server).await;
    let mut client = proxy.client();
    initialize(&mut client, json!({})).await;
    let mut stream = client.get(None).await;
    client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    client.call_tool("counter", json!({})).await;
    stream
        .next_with_method("notifications/resources/updated")
        .await;
    // The server's process dies: its listens end. The proxy opens another (at a new process),
    // and the subscription goes on as if nothing happened.
    let crashed = client.request("tools/call", json!({ "name": "crash", "arguments": {} }));
    assert!(crashed.await.get("error").is_some());
    let heard = tokio::spawn(async move {
        stream
            .next_with_method("notifications/resources/updated")
            .await
    });
    within("an update through the new listen", async {
        while !heard.is_finished() {
            client.call_tool("counter", json!({})).await;
        }
    })
    .await;
    assert_eq!(heard.await.unwrap()["params"]["uri"], "demo://counter");
    proxy.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn a_server_that_asks_for_an_undeclared_capability_fails_the_call_with_32021() {
    // A server that does not check what the client declared; the proxy does.
    let careless = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/servers/careless_modern.py"
    );
    let proxy = Proxy::start_with(|config| {
        config.upstream.stdio = Some(format!("python3 {}", shell_words::quote(careless)));
        config.upstream.protocol = Era::Modern;
        // The stop need not wait for the question this test leaves unanswered.
        config.shutdown_timeout = std::time::Duration::from_millis(200);
    })
    .await;
    let mut without = proxy.client();
    initialize(&mut without, json!({})).await;
    let call = json!({ "name": "ask", "arguments": {} });
    let refused = without.request("tools/call", call.clone()).await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"],
        json!({ "elicitation": {} })
    );
    // A client that declared it is asked.
    let mut with = proxy.client();
    initialize(&mut with, json!({ "elicitation": {} })).await;
    let mut asked = with
        .post(&json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": call }))
        .await;
    let question = asked.next_with_method("elicitation/create").await;
    assert_eq!(question["params"]["message"], "Your name?");
    proxy.stop().await;
}

/// An HTTP server that refuses every request as a server of older revisions refuses a
/// 2026-07-28 one: 400 and -32022 naming what it speaks.
async fn refusing_2026_07_28() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                let read_whole = |request: &[u8]| {
                    let end = request.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
                    let head = String::from_utf8_lossy(&request[..end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length:"))
                        .and_then(|value| value.trim().parse().ok())
                        .unwrap_or(0);
                    (request.len() >= end + length).then(|| request[end..end + length].to_vec())
                };
                let body = loop {
                    if let Some(body) = read_whole(&request) {
                        break body;
                    }
                    match socket.read(&mut buffer).await {
                        Ok(n @ 1..) => request.extend_from_slice(&buffer[..n]),
                        _ => return,
                    }
                };
                let id = serde_json::from_slice::<Value>(&body).unwrap_or_default()["id"].clone();
                let body = json!({ "jsonrpc": "2.0", "id": id, "error": {
                    "code": -32022, "message": "Unsupported protocol version",
                    "data": { "supported": ["2025-06-18", "2025-11-25"], "requested": "2026-07-28" } } })
                .to_string();
                let response = format!(
                    "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    addr
}

/// One address for the server, whichever runs now: a relay to the server it is pointed at,
/// which closes every connection when pointed elsewhere (as a server's end closes them).
struct ServerAddress {
    url: String,
    target: std::sync::Arc<std::sync::Mutex<std::net::SocketAddr>>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl ServerAddress {
    async fn pointing_at(server: std::net::SocketAddr) -> ServerAddress {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let target = std::sync::Arc::new(std::sync::Mutex::new(server));
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (to, relayed) = (target.clone(), connections.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let server = *to.lock().unwrap();
                let relay = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(server).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                relayed.lock().unwrap().push(relay.abort_handle());
            }
        });
        ServerAddress {
            url,
            target,
            connections,
        }
    }

    fn point_at(&self, server: std::net::SocketAddr) {
        *self.target.lock().unwrap() = server;
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }
}

#[tokio::test]
async fn a_server_upgraded_or_rolled_back_behind_a_running_proxy_keeps_working() {
    // The proxy talks to whichever server runs at the address: first one of older revisions.
    let legacy = Proxy::start().await;
    let address = ServerAddress::pointing_at(legacy.addr()).await;
    let url = address.url.clone();
    let proxy = Proxy::start_with(|config| {
        config.upstream.stdio = None;
        config.upstream.http = Some(url);
        config.upstream.protocol = Era::Legacy;
    })
    .await;
    let mut before = proxy.initialized_client("2025-11-25").await;
    assert_eq!(
        before.call_tool("echo", json!({ "text": "old" })).await,
        "old"
    );

    // Upgraded to a 2026-07-28-only server: a legacy initialize is refused with -32022 naming
    // it, and goes on through the bridge at once.
    let (_modern, modern_addr) = crate::harness::modern_demo_over_http().await;
    address.point_at(modern_addr);
    let mut upgraded = proxy.client();
    let initialized = upgraded.initialize("2025-11-25").await;
    assert_eq!(
        initialized["result"]["serverInfo"]["name"], "mcp-session-proxy-demo",
        "{initialized}"
    );
    assert_eq!(
        upgraded.call_tool("echo", json!({ "text": "new" })).await,
        "new"
    );
    assert_eq!(
        proxy.metric("mcp_proxy_upstream_protocol_switches_total"),
        1
    );
    assert_eq!(proxy.metric("mcp_proxy_upstreams_modern"), 1);
    // New sessions are bridged from the start.
    let mut next = proxy.initialized_client("2025-11-25").await;
    assert_eq!(
        next.call_tool("echo", json!({ "text": "next" })).await,
        "next"
    );

    // Rolled back: 2026-07-28 is refused naming older revisions. That session's initialize
    // fails; the proxy speaks the older revision to the server from then on.
    address.point_at(refusing_2026_07_28().await);
    let refused = proxy
        .client()
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": { "name": "x", "version": "1" } } }))
        .await;
    let refused = within("the refusal", refused.response()).await;
    assert!(refused.get("error").is_some(), "{refused}");
    assert_eq!(
        proxy.metric("mcp_proxy_upstream_protocol_switches_total"),
        2
    );
    assert_eq!(proxy.metric("mcp_proxy_upstreams_modern"), 0);
    address.point_at(legacy.addr());
    let mut after = proxy.initialized_client("2025-11-25").await;
    assert_eq!(
        after.call_tool("echo", json!({ "text": "back" })).await,
        "back"
    );
}
