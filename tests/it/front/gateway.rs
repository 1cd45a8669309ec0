//! Gateway mode over real sockets: several named servers, each at `/servers/<name>/…` with its
//! own sessions and limits.

use crate::harness::{within, Client, Proxy, DEMO};
use http::{Method, StatusCode};
use mcp_session_proxy::config::{ServerConfig, SessionConfig};
use serde_json::json;

fn demo_server(session: Option<SessionConfig>) -> ServerConfig {
    let mut server = ServerConfig {
        session,
        ..ServerConfig::default()
    };
    server.upstream.stdio = Some(format!("{} demo-server", shell_words::quote(DEMO)));
    server
}

async fn gateway() -> Proxy {
    Proxy::start_with(|c| {
        c.upstream.stdio = None; // gateway only: /mcp serves nothing
        c.servers.insert("alpha".into(), demo_server(None));
        let one = SessionConfig {
            max_sessions: 1,
            ..SessionConfig::default()
        };
        c.servers.insert("single".into(), demo_server(Some(one)));
    })
    .await
}

fn client_of(proxy: &Proxy, server: &str) -> Client {
    let mut client = proxy.client();
    client.path = format!("/servers/{server}/mcp");
    client
}

#[tokio::test]
async fn each_named_server_has_its_own_sessions_and_limits() {
    let proxy = gateway().await;
    let mut alpha = client_of(&proxy, "alpha");
    alpha.initialize("2025-06-18").await;
    assert_eq!(alpha.call_tool("counter", json!({})).await, "1");
    assert!(proxy.running.server("alpha").unwrap().len() == 1);

    // Alpha's session id means nothing to another server.
    let mut stray = alpha.clone();
    stray.path = "/servers/single/mcp".into();
    let reply = stray
        .post(&json!({ "jsonrpc": "2.0", "id": 9, "method": "ping" }))
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);

    let mut first = client_of(&proxy, "single");
    first.initialize("2025-06-18").await;
    let second = client_of(&proxy, "single")
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "x", "version": "1" } } }))
        .await;
    assert_eq!(
        second.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "single's own limit"
    );
    let mut more_alpha = client_of(&proxy, "alpha");
    more_alpha.initialize("2025-06-18").await;
    assert_eq!(
        more_alpha.call_tool("counter", json!({})).await,
        "1",
        "alpha is not limited"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn unknown_servers_and_the_unserved_default_are_404() {
    let proxy = gateway().await;
    for path in [
        "/mcp",
        "/servers/nope/mcp",
        "/servers/alpha/other",
        "/servers/alpha",
    ] {
        let mut client = proxy.client();
        client.path = path.into();
        let reply = client
            .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {} }))
            .await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
    }
    proxy.stop().await;
}

#[tokio::test]
async fn a_named_server_speaks_legacy_sse_too() {
    let proxy = gateway().await;
    let client = proxy.client();
    let mut stream = client
        .send_to(
            "/servers/alpha/sse",
            Method::GET,
            &[("accept", "text/event-stream")],
            None,
        )
        .await;
    let endpoint = within("the endpoint", stream.next_event()).await.unwrap();
    assert!(
        endpoint
            .data
            .starts_with("/servers/alpha/messages?sessionId="),
        "{}",
        endpoint.data
    );
    let ping = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" }).to_string();
    let reply = client
        .send_to(
            &endpoint.data,
            Method::POST,
            &[("content-type", "application/json")],
            Some(ping.into()),
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    let pong = within("the answer", stream.next_message()).await.unwrap();
    assert_eq!(pong.message["result"], json!({}));
    proxy.stop().await;
}

#[tokio::test]
async fn a_named_server_takes_websockets_and_its_sessions_stay_its_own() {
    let proxy = gateway().await;
    let mut ws = crate::harness::ws::Ws::connect_with(
        proxy.addr(),
        "/servers/alpha/mcp",
        &[("sec-websocket-protocol", "mcp")],
    )
    .await
    .expect("the upgrade on a gateway path");
    let session_id = ws.start_session().await;
    ws.initialize().await;
    assert_eq!(ws.call_tool("counter", json!({})).await, "1");
    assert_eq!(proxy.running.server("alpha").unwrap().len(), 1);

    // Another server does not know alpha's session.
    let mut stray = crate::harness::ws::Ws::connect_with(
        proxy.addr(),
        "/servers/single/mcp",
        &[("sec-websocket-protocol", "mcp")],
    )
    .await
    .unwrap();
    let reply = stray
        .request("session/resume", json!({ "sessionId": session_id }))
        .await;
    assert_eq!(reply["error"]["code"], -32043);
    proxy.stop().await;
}

#[tokio::test]
async fn each_server_of_a_gateway_is_counted_apart() {
    let proxy = gateway().await;
    let mut alpha = client_of(&proxy, "alpha");
    alpha.initialize("2025-06-18").await;
    for _ in 0..3 {
        alpha.call_tool("counter", json!({})).await;
    }
    let mut single = client_of(&proxy, "single");
    single.initialize("2025-06-18").await;
    single.call_tool("counter", json!({})).await;
    let text = proxy.running.metrics.render();
    let value = |series: &str| crate::harness::metric_in(&text, series);
    for (server, calls) in [("alpha", 3), ("single", 1)] {
        let labels = format!("{{server=\"{server}\",method=\"tools/call\",status=\"200\"}}");
        assert_eq!(value(&format!("mcp_proxy_requests_total{labels}")), calls);
        let server = format!("{{server=\"{server}\"}}");
        assert_eq!(
            value(&format!("mcp_proxy_sessions_created_total{server}")),
            1
        );
        assert_eq!(value(&format!("mcp_proxy_sessions_open{server}")), 1);
        // initialize, its notification aside, and the calls: each answered by the server.
        assert_eq!(
            value(&format!(
                "mcp_proxy_upstream_duration_seconds_count{server}"
            )),
            calls + 1,
            "{text}"
        );
    }
    // Every request figure names its server; none a session.
    for line in text.lines().filter(|l| l.starts_with("mcp_proxy_request")) {
        assert!(line.contains("server=\""), "{line}");
    }
    assert!(!text.contains(alpha.session.as_deref().unwrap()));
    proxy.stop().await;
}
