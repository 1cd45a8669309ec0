//! Legacy clients in front of a 2026-07-28 server (the demo's modern-only mode over stdio,
//! `upstream.protocol = "2026-07-28"`): the session they expect, bridged to a server that has
//! none.

mod common;

use common::{serve_the_modern_demo, within, Client, Proxy, DEMO};
use hyper::StatusCode;
use mcp_session_proxy::config::Isolation;
use mcp_session_proxy::era::Era;
use serde_json::{json, Value};

async fn in_front_of_the_modern_demo() -> Proxy {
    Proxy::start_with(serve_the_modern_demo).await
}

/// A 2026-07-28 server over HTTP: another proxy's modern face in front of the modern demo
/// (anonymous requests sharing one server, so the demo's counter persists between requests).
async fn modern_http_server() -> Proxy {
    use mcp_session_proxy::front::modern::correlation::Anonymous;
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
async fn auto_asks_an_http_server_with_one_post() {
    use mcp_session_proxy::upstream::http_client::HttpSpec;
    use mcp_session_proxy::upstream::probe::http_verdict;
    let spec = |url: String| HttpSpec {
        url: url.parse().unwrap(),
        request_timeout: std::time::Duration::from_secs(10),
        max_event_bytes: 1 << 20,
        forward_authorization: false,
        protocol: Era::Auto,
        trace_headers: true,
    };
    // This proxy's own front speaks 2026-07-28 (in front of any server).
    let modern = Proxy::start().await;
    assert_eq!(
        http_verdict(&spec(format!("http://{}/mcp", modern.addr()))).await,
        Era::Modern
    );
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
    let mut ws = common::ws::Ws::connect(proxy.addr()).await;
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
        let stream: &mut common::Reply = stream;
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
    common::until("the warm children", true, || async {
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
