//! Every row of DESIGN's bad-input table over real sockets: the documented status and JSON-RPC
//! code, no panic, and a bystander session that carries on untouched.

use crate::harness::{modern_request, within, Client, Proxy};
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

const JSON_AND_SSE: &str = "application/json, text/event-stream";

/// A proxy with one healthy session next to the one under test.
async fn with_bystander(
    adjust: impl FnOnce(&mut mcp_session_proxy::config::Config),
) -> (Proxy, Client) {
    let proxy = Proxy::start_with(adjust).await;
    let mut bystander = proxy.initialized_client("2025-06-18").await;
    assert_eq!(bystander.call_tool("counter", json!({})).await, "1");
    (proxy, bystander)
}

async fn bystander_unharmed(proxy: Proxy, mut bystander: Client) {
    assert_eq!(
        bystander.call_tool("counter", json!({})).await,
        "2",
        "the other session kept its state"
    );
    proxy.stop().await;
}

async fn raw_post(client: &Client, headers: &[(&str, &str)], body: &str) -> (StatusCode, Value) {
    let mut all: Vec<(&str, &str)> = headers.to_vec();
    if let Some(session) = &client.session {
        all.push(("mcp-session-id", session));
    }
    let reply = client
        .send(Method::POST, &all, Some(Bytes::from(body.to_owned())))
        .await;
    let status = reply.status;
    (status, reply.json().await)
}

fn code(body: &Value) -> i64 {
    body["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no error code in {body}"))
}

#[tokio::test]
async fn malformed_json_is_400_parse_error() {
    let (proxy, bystander) = with_bystander(|_| {}).await;
    let (status, body) = raw_post(
        &bystander,
        &[
            ("content-type", "application/json"),
            ("accept", JSON_AND_SSE),
        ],
        r#"{"jsonrpc":"2.0","id":1,"method":"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), -32700);
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn json_that_is_not_json_rpc_is_400_invalid_request() {
    let (proxy, bystander) = with_bystander(|_| {}).await;
    for body in [
        r#"{"hello":"world"}"#,
        r#"[1,2]"#,
        r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
    ] {
        let (status, reply) = raw_post(
            &bystander,
            &[
                ("content-type", "application/json"),
                ("accept", JSON_AND_SSE),
            ],
            body,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(code(&reply), -32600, "{body}");
    }
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn a_duplicated_member_name_anywhere_is_400_invalid_request_naming_it() {
    let (proxy, bystander) = with_bystander(|_| {}).await;
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","method":"tools/list","params":{}}"#,
            json!(7),
            "method",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}"#,
            Value::Null,
            "id",
        ),
        (
            r#"{"jsonrpc":"2.0","id":"x","method":"tools/call",
                "params":{"name":"echo","arguments":{"text":"a","text":"b"}}}"#,
            json!("x"),
            "params.arguments.text",
        ),
    ];
    for (body, id, member) in cases {
        let (status, reply) = raw_post(
            &bystander,
            &[
                ("content-type", "application/json"),
                ("accept", JSON_AND_SSE),
            ],
            body,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(code(&reply), -32600, "{reply}");
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(reply["error"]["data"]["duplicateMember"], member, "{reply}");
    }
    // On WebSocket: the error alone, and the connection goes on.
    let mut ws = crate::harness::ws::Ws::connect(proxy.addr()).await;
    ws.send_frame(tokio_tungstenite::tungstenite::Message::text(
        r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":{"a":1,"a":1}}"#,
    ))
    .await;
    let refused = ws.recv().await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert_eq!(refused["id"], 3, "{refused}");
    assert_eq!(refused["error"]["data"]["duplicateMember"], "params.a");
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn session_methods_on_a_session_named_by_mcp_session_id_are_a_conflict() {
    let (proxy, bystander) = with_bystander(|_| {}).await;
    let reply = bystander
        .post(
            &json!({ "jsonrpc": "2.0", "id": 7, "method": "session/resume",
                       "params": { "sessionId": "x" } }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let reply = reply.json().await;
    assert_eq!(code(&reply), -32600);
    assert_eq!(reply["id"], 7);
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("transport mode"),
        "{reply}"
    );
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn a_method_the_server_lacks_is_method_not_found_from_the_server() {
    let (proxy, mut bystander) = with_bystander(|_| {}).await;
    let reply = bystander.request("no/such/method", json!({})).await;
    assert_eq!(code(&reply), -32601);
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let (proxy, bystander) = with_bystander(|c| c.http.max_body_bytes = 2048).await;
    let big = json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": { "name": "echo", "arguments": { "text": "x".repeat(4096) } } })
    .to_string();
    let (status, body) = raw_post(
        &bystander,
        &[
            ("content-type", "application/json"),
            ("accept", JSON_AND_SSE),
        ],
        &big,
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body["error"]["message"].as_str().unwrap().contains("2048"));
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn a_wrong_content_type_is_415() {
    let (proxy, bystander) = with_bystander(|_| {}).await;
    let (status, _) = raw_post(
        &bystander,
        &[("content-type", "text/plain"), ("accept", JSON_AND_SSE)],
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn an_accept_header_missing_a_required_type_is_406() {
    let (proxy, bystander) = with_bystander(|_| {}).await;
    let (status, _) = raw_post(
        &bystander,
        &[
            ("content-type", "application/json"),
            ("accept", "application/json"),
        ],
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_ACCEPTABLE, "POST needs both types");
    let session = bystander.session.clone().unwrap();
    let get = bystander
        .send(
            Method::GET,
            &[("mcp-session-id", &session), ("accept", "application/json")],
            None,
        )
        .await;
    assert_eq!(
        get.status,
        StatusCode::NOT_ACCEPTABLE,
        "GET needs text/event-stream"
    );
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn unknown_and_foreign_sessions_are_404_and_a_missing_one_is_400() {
    let (proxy, bystander) = with_bystander(|_| {}).await;
    let ping = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" });
    for unknown in [
        "AAAAAAAAAAAAAAAAAAAAAAAA",
        "not-even-close",
        "../../etc/passwd",
    ] {
        let mut stranger = bystander.clone();
        stranger.session = Some(unknown.into());
        let reply = stranger.post(&ping).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{unknown}");
        assert_eq!(code(&reply.json().await), -32001);
    }
    let mut foreign = bystander.clone();
    foreign.authorization = Some("Bearer another-principal".into());
    assert_eq!(foreign.post(&ping).await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        foreign.delete().await,
        StatusCode::NOT_FOUND,
        "cannot end it either"
    );

    let mut anonymous = bystander.clone();
    anonymous.session = None;
    let reply = anonymous.post(&ping).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.json().await["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Mcp-Session-Id"));
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn a_disallowed_origin_is_403_and_loopback_origins_pass() {
    let (proxy, bystander) = with_bystander(|_| {}).await;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let base = [
        ("content-type", "application/json"),
        ("accept", JSON_AND_SSE),
    ];
    let (status, _) = raw_post(
        &bystander,
        &[base[0], base[1], ("origin", "http://evil.example")],
        ping,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = raw_post(
        &bystander,
        &[base[0], base[1], ("origin", "http://localhost:3000")],
        ping,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn a_host_that_is_not_loopback_is_403_on_a_loopback_listener() {
    let (proxy, bystander) = with_bystander(|_| {}).await;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let base = [
        ("content-type", "application/json"),
        ("accept", JSON_AND_SSE),
    ];
    let (status, body) = raw_post(
        &bystander,
        &[base[0], base[1], ("host", "evil.example:8787")],
        ping,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("evil.example"));
    let (status, _) = raw_post(
        &bystander,
        &[base[0], base[1], ("host", "localhost:8787")],
        ping,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    bystander_unharmed(proxy, bystander).await;
}

/// Sends `request` as raw bytes on a fresh connection; returns the status code and the body.
async fn raw_exchange(proxy: &Proxy, request: &[u8]) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    socket.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    within("the answer", socket.read_to_end(&mut answer))
        .await
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    (status, body)
}

/// A ping POSTed with `headers` (raw lines), on a connection that closes after it.
fn ping_with(session: &str, headers: &[&[u8]]) -> Vec<u8> {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nconnection: close\r\ncontent-type: application/json\r\n\
         accept: {JSON_AND_SSE}\r\nmcp-session-id: {session}\r\ncontent-length: {}\r\n",
        body.len()
    )
    .into_bytes();
    for header in headers {
        request.extend_from_slice(header);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"\r\n");
    request.extend_from_slice(body.as_bytes());
    request
}

#[tokio::test]
async fn host_and_origin_checks_cannot_be_sidestepped() {
    let (proxy, bystander) = with_bystander(|_| {}).await;
    let session = bystander.session.clone().unwrap();
    let host = format!("host: {}", proxy.addr());
    let host = host.as_bytes();
    let (status, _) = raw_exchange(&proxy, &ping_with(&session, &[host])).await;
    assert_eq!(status, 200, "the well-formed request passes");
    let cases: [(&str, Vec<&[u8]>, u16); 6] = [
        ("no Host", vec![], 400),
        (
            "two Hosts, the allowed one first",
            vec![host, b"host: evil.example"],
            400,
        ),
        (
            "a Host with a non-ASCII byte",
            vec![b"host: localhost\xff"],
            400,
        ),
        (
            "two Origins, the allowed one first",
            vec![
                host,
                b"origin: http://localhost",
                b"origin: http://evil.example",
            ],
            403,
        ),
        (
            "an Origin with a non-ASCII byte",
            vec![host, b"origin: http://localhost\xe9"],
            403,
        ),
        ("a foreign Host", vec![b"host: evil.example"], 403),
    ];
    for (what, headers, expected) in cases {
        let (status, body) = raw_exchange(&proxy, &ping_with(&session, &headers)).await;
        assert_eq!(status, expected, "{what}: {body}");
        let error: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(code(&error), -32600, "{what}");
    }
    // A target in absolute form names the host it is for (RFC 9112 §3.2.2): checked like Host.
    let ping = ping_with(&session, &[host]);
    let absolute =
        String::from_utf8_lossy(&ping).replacen("POST /mcp ", "POST http://evil.example/mcp ", 1);
    assert!(
        absolute.starts_with("POST http://evil.example/mcp "),
        "{absolute}"
    );
    let (status, body) = raw_exchange(&proxy, absolute.as_bytes()).await;
    assert_eq!(status, 403, "an absolute target for another host: {body}");
    assert!(body.contains("evil.example"), "{body}");
    let own = String::from_utf8_lossy(&ping).replacen(
        "POST /mcp ",
        &format!("POST http://{}/mcp ", proxy.addr()),
        1,
    );
    let (status, _) = raw_exchange(&proxy, own.as_bytes()).await;
    assert_eq!(status, 200, "an absolute target for this proxy");
    // Health and metrics are no less exposed to a rebinding page.
    for path in ["/metrics", "/healthz", "/readyz"] {
        let request =
            format!("GET {path} HTTP/1.1\r\nhost: evil.example\r\nconnection: close\r\n\r\n");
        let (status, _) = raw_exchange(&proxy, request.as_bytes()).await;
        assert_eq!(status, 403, "{path}");
        let request =
            format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
        let (status, _) = raw_exchange(&proxy, request.as_bytes()).await;
        assert_eq!(status, 200, "{path}");
    }
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn a_body_that_stalls_is_408_and_other_sessions_go_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (proxy, bystander) = with_bystander(|c| {
        c.http.body_timeout = std::time::Duration::from_millis(300);
    })
    .await;
    let mut socket = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         accept: {JSON_AND_SSE}\r\ncontent-length: 4000000\r\n\r\n{{\"jsonrpc\"",
        proxy.addr()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    // Nothing more is sent: the proxy gives up on the body, answers and closes.
    let mut answer = Vec::new();
    within("the 408", socket.read_to_end(&mut answer))
        .await
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("-32600") && answer.contains("did not arrive within 300ms"),
        "{answer}"
    );
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn a_head_that_stalls_closes_its_connection_unanswered_and_other_sessions_go_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (proxy, bystander) = with_bystander(|c| {
        c.http.header_timeout = std::time::Duration::from_millis(300);
    })
    .await;
    let mut socket = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    let head = format!("POST /mcp HTTP/1.1\r\nhost: {}\r\n", proxy.addr());
    socket.write_all(head.as_bytes()).await.unwrap();
    // The headers never end: the proxy closes the connection without an answer.
    let mut answer = Vec::new();
    within("the connection closed", socket.read_to_end(&mut answer))
        .await
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&answer).contains("200 OK"),
        "nothing served: {}",
        String::from_utf8_lossy(&answer)
    );
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn configured_hosts_are_the_only_ones_allowed() {
    let proxy = Proxy::start_with(|c| c.http.allowed_hosts = vec!["mcp.example".into()]).await;
    let mut client = proxy.client();
    client.extra_headers = vec![("host".into(), "mcp.example:443".into())];
    client.initialize("2025-06-18").await;
    client.extra_headers = vec![("host".into(), proxy.addr().to_string())];
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": 5, "method": "ping" }))
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    proxy.stop().await;
}

#[tokio::test]
async fn a_trusted_principal_header_owns_sessions_instead_of_authorization() {
    let proxy = Proxy::start_with(|c| {
        c.http.principal_header = Some("x-user".into());
        // The demo's children reach no network: loopback peers may name principals.
        c.upstream.sandbox.enabled = true;
        c.upstream.sandbox.network = mcp_session_proxy::upstream::sandbox::Network::None;
    })
    .await;
    let mut alice = proxy.client();
    alice.extra_headers = vec![("x-user".into(), "alice".into())];
    alice.authorization = Some("Bearer token-1".into());
    alice.initialize("2025-06-18").await;
    // The same person with a rotated token still owns the session.
    alice.authorization = Some("Bearer token-2".into());
    assert_eq!(alice.call_tool("counter", json!({})).await, "1");
    // Someone else with alice's token and session id does not.
    let mut bob = alice.clone();
    bob.extra_headers = vec![("x-user".into(), "bob".into())];
    let reply = bob
        .post(&json!({ "jsonrpc": "2.0", "id": 7, "method": "ping" }))
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    proxy.stop().await;
}

#[tokio::test]
async fn a_principal_header_from_a_peer_that_is_no_trusted_proxy_is_refused() {
    let proxy = Proxy::start_with(|c| {
        c.http.principal_header = Some("x-user".into());
        c.http.trusted_proxies = vec!["127.0.0.2/32".parse().unwrap()];
        c.upstream.sandbox.enabled = true;
        c.upstream.sandbox.network = mcp_session_proxy::upstream::sandbox::Network::None;
    })
    .await;
    // The authenticating proxy, at 127.0.0.2, names alice.
    let mut alice = proxy.client();
    alice.from = Some([127, 0, 0, 2].into());
    alice.extra_headers = vec![("x-user".into(), "alice".into())];
    alice.initialize("2025-11-25").await;
    assert_eq!(alice.call_tool("counter", json!({})).await, "1");

    // Anyone else who reaches the port and names alice is refused, and counted.
    let mut mallory = alice.clone();
    mallory.from = None;
    let reply = mallory
        .post(&json!({ "jsonrpc": "2.0", "id": 7, "method": "ping" }))
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    let error = reply.json().await["error"].clone();
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("x-user") && message.contains("127.0.0.1"),
        "{error}"
    );
    assert_eq!(
        proxy.metric("mcp_proxy_http_principal_headers_refused_total"),
        1
    );
    // Without the header, a client that comes directly is nobody in particular.
    let mut stranger = proxy.initialized_client("2025-11-25").await;
    assert_eq!(stranger.call_tool("counter", json!({})).await, "1");

    // Two names from the trusted proxy (one of them the client's, appended) are refused, not
    // read one way or the other.
    let mut twice = alice.clone();
    twice.extra_headers.push(("x-user".into(), "bob".into()));
    let reply = twice
        .post(&json!({ "jsonrpc": "2.0", "id": 8, "method": "ping" }))
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(alice.call_tool("counter", json!({})).await, "2");
    proxy.stop().await;
}

fn initialize_request() -> Value {
    json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "x", "version": "1" } } })
}

fn refused(proxy: &Proxy, reason: &str) -> u64 {
    proxy.metric(&format!(
        "mcp_proxy_sessions_rejected_total{{server=\"default\",reason=\"{reason}\"}}"
    ))
}

#[tokio::test]
async fn a_principal_over_its_own_session_limit_is_503_and_others_are_not() {
    let (proxy, bystander) = with_bystander(|c| c.session.max_sessions_per_principal = 1).await;
    let mut alice = proxy.client();
    alice.authorization = Some("Bearer alice".into());
    alice.initialize("2025-06-18").await;
    let mut again = proxy.client();
    again.authorization = Some("Bearer alice".into());
    crate::harness::assert_refused_for(
        again.post(&initialize_request()).await,
        "max_sessions_per_principal",
    )
    .await;
    assert_eq!(refused(&proxy, "per_principal"), 1);
    // Another principal, and clients without credentials, have limits of their own.
    let mut other = proxy.client();
    other.authorization = Some("Bearer someone-else".into());
    other.initialize("2025-06-18").await;
    proxy.client().initialize("2025-06-18").await;
    // Ending a session frees its principal's place.
    assert_eq!(alice.delete().await, StatusCode::OK);
    again.initialize("2025-06-18").await;
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn clients_without_credentials_over_their_session_limit_are_503_and_principals_are_not() {
    // The bystander (no credential) holds the one place anonymous clients have.
    let (proxy, bystander) = with_bystander(|c| {
        c.session.max_anonymous_sessions = 1;
        c.session.anonymous_pool = 1;
    })
    .await;
    let stranger = proxy.client();
    crate::harness::assert_refused_for(
        stranger.post(&initialize_request()).await,
        "max_anonymous_sessions",
    )
    .await;
    // A legacy SSE stream and a 2026-07-28 request without credentials are refused alike.
    let stream = stranger.get_sse("/sse").await;
    crate::harness::assert_refused_for(stream, "max_anonymous_sessions").await;
    let params = json!({ "name": "echo", "arguments": { "text": "hi" } });
    let reply = stranger
        .post_modern(&modern_request(5, "tools/call", params, json!({})), &[])
        .await;
    crate::harness::assert_refused_for(reply, "max_anonymous_sessions").await;
    assert_eq!(refused(&proxy, "anonymous"), 3);
    assert_eq!(refused(&proxy, "per_principal"), 0);
    // A principal is not one of them.
    let mut alice = proxy.client();
    alice.authorization = Some("Bearer alice".into());
    alice.initialize("2025-06-18").await;
    assert_eq!(alice.call_tool("echo", json!({ "text": "hi" })).await, "hi");
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn too_many_sessions_is_503_with_retry_after() {
    let (proxy, bystander) = with_bystander(|c| c.session.max_sessions = 1).await;
    let reply = proxy
        .client()
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "x", "version": "1" } } }))
        .await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reply.headers.contains_key("retry-after"));
    assert!(reply.headers.get("mcp-session-id").is_none());
    assert_eq!(proxy.metric("mcp_proxy_sessions_rejected_total"), 1);
    assert_eq!(refused(&proxy, "max_sessions"), 1);
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn requests_past_a_sessions_in_flight_bound_are_503_and_reach_no_server() {
    let (proxy, bystander) = with_bystander(|c| c.session.max_inflight = 3).await;
    // A WebSocket client pipelines without waiting for answers.
    let mut ws = crate::harness::ws::Ws::connect(proxy.addr()).await;
    let initialized = ws
        .request(
            "initialize",
            json!({ "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": { "name": "pipeline", "version": "1" } }),
        )
        .await;
    assert!(initialized["result"].is_object(), "{initialized}");
    for id in 1..=5 {
        ws.send(
            json!({ "jsonrpc": "2.0", "id": format!("slow-{id}"), "method": "tools/call",
                        "params": { "name": "sleep", "arguments": { "ms": 60_000 } } }),
        )
        .await;
    }
    for id in ["slow-4", "slow-5"] {
        let refused = ws.response_to(json!(id)).await;
        assert_eq!(refused["error"]["code"], -32603, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("session.max_inflight"), "{refused}");
    }
    assert_eq!(proxy.metric("mcp_proxy_requests_inflight"), 3);
    assert_eq!(proxy.metric("mcp_proxy_requests_inflight_refused_total"), 2);

    // Over HTTP: 503 with Retry-After, and the session goes on once one is answered.
    let mut client = proxy.initialized_client("2025-11-25").await;
    let slow: Vec<_> = (0..3)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move { client.call_tool("sleep", json!({ "ms": 300 })).await })
        })
        .collect();
    crate::harness::until("three more in flight", 6, || async {
        proxy.metric("mcp_proxy_requests_inflight")
    })
    .await;
    let id = client.next_id();
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                       "params": { "name": "echo", "arguments": { "text": "one more" } } }))
        .await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reply.headers.contains_key("retry-after"));
    let refused = reply.json().await;
    assert_eq!(refused["id"], id, "{refused}");
    for call in slow {
        assert_eq!(within("a slow call", call).await.unwrap(), "slept 300 ms");
    }
    assert_eq!(
        client.call_tool("echo", json!({ "text": "again" })).await,
        "again"
    );
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn connections_past_the_bound_are_answered_503_and_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (proxy, bystander) = with_bystander(|c| c.http.max_connections = 2).await;
    let open = || proxy.metric("mcp_proxy_http_connections_open");
    crate::harness::eventually("the bystander's connections closed", || open() == 0).await;
    // An upgraded WebSocket connection keeps its place; so does an idle one.
    let ws = crate::harness::ws::Ws::connect(proxy.addr()).await;
    let idle = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    crate::harness::eventually("two connections open", || open() == 2).await;

    let mut third = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    within("the refusal", third.read_to_string(&mut answer))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 1"), "{answer}");
    assert!(answer.contains("http.max_connections"), "{answer}");
    assert_eq!(proxy.metric("mcp_proxy_http_connections_refused_total"), 1);

    drop(ws);
    drop(idle);
    crate::harness::eventually("the places given back", || open() == 0).await;
    bystander_unharmed(proxy, bystander).await;
}

/// A command that exists at start-up (so the proxy starts) but cannot be run: its interpreter
/// is missing.
fn unrunnable_command() -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::temp_dir().join(format!("mcp-unrunnable-{}", std::process::id()));
    std::fs::write(&path, "#!/nonexistent/interpreter\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn an_upstream_that_cannot_start_is_a_clear_internal_error() {
    let command = unrunnable_command();
    let shown = command.display().to_string();
    let proxy = Proxy::start_with(|c| {
        c.upstream.stdio = Some(format!("{shown} --stdio"));
    })
    .await;
    let reply = proxy
        .client()
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "x", "version": "1" } } }))
        .await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert!(reply.headers.get("mcp-session-id").is_none());
    let body = reply.json().await;
    assert_eq!(code(&body), -32603);
    assert!(
        body["error"]["message"].as_str().unwrap().contains(&shown),
        "{body}"
    );
    assert_eq!(proxy.metric("mcp_proxy_sessions_open"), 0);
    proxy.stop().await;
}

#[tokio::test]
async fn a_server_crash_fails_in_flight_requests_with_the_cause_and_the_session_goes_on_with_a_new_server(
) {
    let (proxy, bystander) = with_bystander(|_| {}).await;
    let mut victim = proxy.initialized_client("2025-06-18").await;
    let mut events = victim.get(None).await;
    victim
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(victim.call_tool("counter", json!({})).await, "1");
    events
        .next_with_method("notifications/resources/updated")
        .await;
    let mut slow = victim
        .post(
            &json!({ "jsonrpc": "2.0", "id": "slow", "method": "tools/call",
            "params": { "name": "sleep", "arguments": { "ms": 60000 } } }),
        )
        .await;
    let crash = victim
        .request(
            "tools/call",
            json!({ "name": "crash", "arguments": { "code": 3 } }),
        )
        .await;
    let message = crash["error"]["message"].as_str().unwrap().to_owned();
    assert_eq!(code(&crash), -32603);
    assert!(
        message.contains("exited") && message.contains('3'),
        "{message}"
    );
    assert!(
        message.contains("crashing on request"),
        "names the last stderr: {message}"
    );

    let slow_answer = if slow.is_sse() {
        within("the slow call's answer", slow.next_message())
            .await
            .unwrap()
            .message
    } else {
        slow.json().await
    };
    assert_eq!(slow_answer["id"], "slow");
    assert_eq!(code(&slow_answer), -32603);

    // The next request starts a new server for the session, initialized as the client did and
    // subscribed as the session was: its counter begins again, its updates reach the stream.
    let later = within("a later request", victim.call_tool("counter", json!({}))).await;
    assert_eq!(later, "1", "a new server");
    let update = within(
        "the update of the subscription the new server was given",
        events.next_with_method("notifications/resources/updated"),
    )
    .await;
    assert_eq!(update["params"]["uri"], "demo://counter");
    assert_eq!(proxy.metric("mcp_proxy_upstream_exits_total"), 1);
    assert_eq!(proxy.metric("mcp_proxy_upstream_restarts_total"), 1);
    bystander_unharmed(proxy, bystander).await;
}

#[tokio::test]
async fn an_oversized_server_line_fails_that_request_and_the_session_goes_on() {
    let (proxy, bystander) = with_bystander(|c| c.upstream.max_line_bytes = 4096).await;
    let mut client = proxy.initialized_client("2025-06-18").await;
    let reply = client
        .request(
            "tools/call",
            json!({ "name": "echo", "arguments": { "text": "y".repeat(8000) } }),
        )
        .await;
    assert_eq!(code(&reply), -32603);
    assert!(reply["error"]["message"].as_str().unwrap().contains("4096"));
    assert_eq!(
        client
            .call_tool("echo", json!({ "text": "still here" }))
            .await,
        "still here"
    );
    bystander_unharmed(proxy, bystander).await;
}

/// A duplicated member name placed after something the proxy's reading of names cannot take (a
/// number beyond a double, nesting deeper than 128, a lone surrogate escape, bytes that are not
/// UTF-8 in a member the proxy skips) is still refused: a server that reads those would read
/// one of the two values, unchecked. The message is refused whole as one the proxy cannot read.
#[tokio::test]
async fn a_duplicate_behind_what_the_proxy_cannot_read_is_refused_too() {
    let (proxy, bystander) = with_bystander(|_| {}).await;
    let hidden = r#""name":"echo","arguments":{"text":"checked","text":"served"}"#;
    let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
    let cases: [(&str, Vec<u8>); 4] = [
        (
            "a number beyond a double",
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"big":1e400,{hidden}}}}}"#).into_bytes(),
        ),
        (
            "nesting deeper than 128",
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"deep":{deep},{hidden}}}}}"#).into_bytes(),
        ),
        (
            "a lone surrogate",
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"odd":"\ud800",{hidden}}}}}"#).into_bytes(),
        ),
        (
            "bytes that are not UTF-8 in a skipped member",
            [
                &br#"{"jsonrpc":"2.0","id":1,"x":""#[..],
                &[0xff, 0xfe],
                format!(r#"","method":"tools/call","params":{{{hidden}}}}}"#).as_bytes(),
            ]
            .concat(),
        ),
    ];
    let mut forwarded = Vec::new();
    for (what, body) in cases {
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", JSON_AND_SSE),
        ];
        if let Some(session) = &bystander.session {
            headers.push(("mcp-session-id", session.as_str()));
        }
        let reply = bystander
            .send(Method::POST, &headers, Some(Bytes::from(body)))
            .await;
        if reply.status != StatusCode::BAD_REQUEST {
            // Taken: its answer (if the server gives one) is not waited for.
            forwarded.push((what, reply.status));
            continue;
        }
        let reply = reply.json().await;
        assert_eq!(code(&reply), -32700, "{what}: {reply}");
        assert!(reply.get("result").is_none(), "{what}: served: {reply}");
    }
    assert!(forwarded.is_empty(), "taken and forwarded: {forwarded:?}");
    bystander_unharmed(proxy, bystander).await;
}
