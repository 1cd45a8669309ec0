//! The WebSocket transport and the mode rules of protocol-level sessions: handshake checks,
//! frames the transport refuses, every conflict between transport mode (`Mcp-Session-Id`,
//! `Last-Event-ID`) and protocol mode (`session/*`), each with a bystander session that must not
//! notice, and a client from another ecosystem (Node 22's built-in WebSocket).

use std::path::PathBuf;

use crate::harness::ws::Ws;
use crate::harness::{within, Client, Proxy};
use http::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{Error, Message as Frame};

/// A protocol-level session on its own connection, with state (the counter) to check later.
async fn bystander(proxy: &Proxy) -> (Ws, String) {
    let mut ws = Ws::connect(proxy.addr()).await;
    let session_id = ws.start_session().await;
    ws.initialize().await;
    assert_eq!(ws.call_tool("counter", json!({})).await, "1");
    (ws, session_id)
}

async fn bystander_unharmed(mut ws: Ws) {
    assert_eq!(ws.call_tool("counter", json!({})).await, "2");
}

fn error_code(reply: &Value) -> i64 {
    reply["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("an error: {reply}"))
}

async fn post(client: &Client, headers: &[(&str, &str)], message: Value) -> (StatusCode, Value) {
    let mut all = vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    let reply = client
        .send(Method::POST, &all, Some(message.to_string().into()))
        .await;
    (reply.status, reply.json().await)
}

fn start() -> Value {
    json!({ "jsonrpc": "2.0", "id": 1, "method": "session/start", "params": {} })
}

#[tokio::test]
async fn the_handshake_checks_origin_subprotocol_version_and_session_headers() {
    let proxy = Proxy::start().await;
    let (ws, _) = bystander(&proxy).await;
    let refused = |result: Result<Ws, Error>| match result {
        Err(Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("an HTTP refusal, not {other}"),
        Ok(_) => panic!("the handshake must be refused"),
    };
    let addr = proxy.addr();
    let origin = Ws::connect_with(addr, "/mcp", &[("origin", "https://evil.example")]).await;
    assert_eq!(refused(origin), 403);
    let wrong = Ws::connect_with(addr, "/mcp", &[("sec-websocket-protocol", "graphql-ws")]).await;
    assert_eq!(refused(wrong), 400);
    let named = Ws::connect_with(addr, "/mcp", &[("mcp-session-id", "abc")]).await;
    assert_eq!(
        refused(named),
        400,
        "a WebSocket names its session with session/resume"
    );
    let resuming = Ws::connect_with(addr, "/mcp", &[("last-event-id", "g.1")]).await;
    assert_eq!(refused(resuming), 400);
    let version = proxy
        .client()
        .send(
            Method::GET,
            &[
                ("upgrade", "websocket"),
                ("connection", "Upgrade"),
                ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("sec-websocket-version", "8"),
            ],
            None,
        )
        .await;
    assert_eq!(version.status, StatusCode::UPGRADE_REQUIRED);
    // No subprotocol offered is accepted.
    let plain = Ws::connect_with(addr, "/mcp", &[]).await.expect("accepted");
    drop(plain);
    bystander_unharmed(ws).await;
    proxy.stop().await;
}

#[tokio::test]
async fn binary_frames_close_1003_and_oversized_messages_close_1009() {
    let proxy = Proxy::start_with(|c| c.http.max_body_bytes = 4096).await;
    let (ws, _) = bystander(&proxy).await;

    let mut binary = Ws::connect(proxy.addr()).await;
    binary.send_frame(Frame::binary(vec![1, 2, 3])).await;
    let (_, close) = binary.until_closed().await;
    assert_eq!(u16::from(close.expect("a close frame").code), 1003);

    let mut big = Ws::connect(proxy.addr()).await;
    big.send(json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": { "name": "echo", "arguments": { "text": "x".repeat(8192) } } }))
        .await;
    let (_, close) = big.until_closed().await;
    assert_eq!(u16::from(close.expect("a close frame").code), 1009);

    let mut garbage = Ws::connect(proxy.addr()).await;
    garbage.send_frame(Frame::text("{not json")).await;
    assert_eq!(error_code(&garbage.recv().await), -32700);
    garbage.send_frame(Frame::text(r#"{"id":1}"#)).await;
    assert_eq!(error_code(&garbage.recv().await), -32600);
    garbage.initialize().await;
    assert_eq!(
        garbage
            .call_tool("echo", json!({ "text": "still open" }))
            .await,
        "still open",
        "bad input costs an error, not the connection"
    );
    bystander_unharmed(ws).await;
    proxy.stop().await;
}

#[tokio::test]
async fn a_connection_without_session_start_is_its_own_session_until_session_start_elevates_it() {
    let proxy = Proxy::start().await;
    let mut ws = Ws::connect(proxy.addr()).await;
    ws.initialize().await;
    assert_eq!(ws.call_tool("counter", json!({})).await, "1");
    // session/start on a connection with its own session keeps that session (and its server).
    let session_id = ws.start_session().await;
    ws.cut();
    let mut again = Ws::connect(proxy.addr()).await;
    let resumed = again
        .request("session/resume", json!({ "sessionId": session_id }))
        .await;
    assert_eq!(resumed["result"]["resumed"], true);
    assert_eq!(
        again.call_tool("counter", json!({})).await,
        "2",
        "same server state"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn every_mode_conflict_is_refused_with_a_clear_error() {
    let proxy = Proxy::start().await;
    let (ws, protocol_session) = bystander(&proxy).await;
    let transport = proxy.initialized_client("2025-11-25").await;
    let transport_session = transport.session.clone().unwrap();
    let client = proxy.client();

    // Transport mode: a session named by Mcp-Session-Id takes no session/* method.
    let (status, reply) = post(&client, &[("mcp-session-id", &transport_session)], start()).await;
    assert_eq!(
        (status, error_code(&reply)),
        (StatusCode::BAD_REQUEST, -32600)
    );
    // Both headers.
    let (status, _) = post(
        &client,
        &[
            ("mcp-session-id", &transport_session),
            ("mcp-protocol-session-id", &protocol_session),
        ],
        json!({ "jsonrpc": "2.0", "id": 2, "method": "ping" }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Both Last-Event-ID and lastSessionEventId.
    let (status, reply) = post(
        &client,
        &[("last-event-id", "g.1")],
        json!({ "jsonrpc": "2.0", "id": 3, "method": "session/resume",
                "params": { "sessionId": protocol_session, "lastSessionEventId": "se_1" } }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        reply["error"]["message"].as_str().unwrap().contains("both"),
        "{reply}"
    );
    // Last-Event-ID alone with session/resume.
    let (status, _) = post(
        &client,
        &[("last-event-id", "g.1")],
        json!({ "jsonrpc": "2.0", "id": 4, "method": "session/resume",
                "params": { "sessionId": protocol_session } }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // A protocol-level session named by Mcp-Session-Id, and the reverse.
    let (status, reply) = post(
        &client,
        &[("mcp-session-id", &protocol_session)],
        json!({ "jsonrpc": "2.0", "id": 5, "method": "ping" }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(reply["error"]["message"]
        .as_str()
        .unwrap()
        .contains("protocol mode"));
    let (status, _) = post(
        &client,
        &[("mcp-protocol-session-id", &transport_session)],
        json!({ "jsonrpc": "2.0", "id": 6, "method": "ping" }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // GET and DELETE do not apply to a protocol-level session.
    let get = client
        .send(
            Method::GET,
            &[
                ("accept", "text/event-stream"),
                ("mcp-protocol-session-id", &protocol_session),
            ],
            None,
        )
        .await;
    assert_eq!(get.status, StatusCode::BAD_REQUEST);
    // The header and params name different sessions.
    let (status, _) = post(
        &client,
        &[("mcp-protocol-session-id", &protocol_session)],
        json!({ "jsonrpc": "2.0", "id": 7, "method": "session/end",
                "params": { "sessionId": "another" } }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // On a WebSocket: one session per connection.
    let mut other = Ws::connect(proxy.addr()).await;
    other.start_session().await;
    let second_start = other.request("session/start", json!({})).await;
    assert_eq!(error_code(&second_start), -32600);
    let resume_here = other
        .request("session/resume", json!({ "sessionId": protocol_session }))
        .await;
    assert_eq!(error_code(&resume_here), -32600);
    // A transport-mode session cannot be resumed with session/resume.
    let mut fresh = Ws::connect(proxy.addr()).await;
    let transport_resume = fresh
        .request("session/resume", json!({ "sessionId": transport_session }))
        .await;
    assert_eq!(error_code(&transport_resume), -32600);

    assert_eq!(
        transport.delete().await,
        StatusCode::OK,
        "transport mode unchanged"
    );
    bystander_unharmed(ws).await;
    proxy.stop().await;
}

#[tokio::test]
async fn unknown_foreign_and_malformed_resumes_are_refused() {
    let proxy = Proxy::start().await;
    let (ws, session_id) = bystander(&proxy).await;
    let mut other = Ws::connect(proxy.addr()).await;
    let unknown = other
        .request("session/resume", json!({ "sessionId": "no-such-session" }))
        .await;
    assert_eq!(error_code(&unknown), -32043);
    assert_eq!(unknown["error"]["data"]["sessionId"], "no-such-session");
    let malformed = other
        .request(
            "session/resume",
            json!({ "sessionId": session_id, "lastSessionEventId": "x" }),
        )
        .await;
    assert_eq!(error_code(&malformed), -32602);
    let ahead = other
        .request(
            "session/resume",
            json!({ "sessionId": session_id, "lastSessionEventId": "se_999999" }),
        )
        .await;
    assert_eq!(error_code(&ahead), -32602);
    let missing = other.request("session/resume", json!({})).await;
    assert_eq!(error_code(&missing), -32602);
    let unknown_method = other.request("session/list", json!({})).await;
    assert_eq!(error_code(&unknown_method), -32601);

    // Another principal: exactly like an unknown session.
    let mut foreign = Ws::connect_with(
        proxy.addr(),
        "/mcp",
        &[
            ("sec-websocket-protocol", "mcp"),
            ("authorization", "Bearer someone-else"),
        ],
    )
    .await
    .unwrap();
    let stolen = foreign
        .request("session/resume", json!({ "sessionId": session_id }))
        .await;
    assert_eq!(error_code(&stolen), -32043);
    let ended = foreign
        .request("session/end", json!({ "sessionId": session_id }))
        .await;
    assert_eq!(error_code(&ended), -32043);
    // Over HTTP: 404 with the same code.
    let (status, reply) = post(
        &proxy.client(),
        &[],
        json!({ "jsonrpc": "2.0", "id": 8, "method": "session/resume",
                "params": { "sessionId": "no-such-session" } }),
    )
    .await;
    assert_eq!(
        (status, error_code(&reply)),
        (StatusCode::NOT_FOUND, -32043)
    );
    bystander_unharmed(ws).await;
    proxy.stop().await;
}

#[tokio::test]
async fn nodes_built_in_websocket_starts_works_and_resumes_a_session() {
    let proxy = Proxy::start().await;
    let node = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node");
    // Node 22 (its global WebSocket): the pinned `node` package.
    let run = tokio::process::Command::new(node.join("node_modules/.bin/node"))
        .arg(node.join("ws_client.mjs"))
        .arg(format!("ws://{}/mcp", proxy.addr()))
        .kill_on_drop(true)
        .output();
    let output = within("the Node WebSocket client", run).await.unwrap();
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("a JSON report");
    assert_eq!(report["protocol"], "mcp");
    assert_eq!(report["announced"], true);
    assert_eq!(report["echo"], "over ws");
    assert_eq!(
        report["resumed"],
        json!({ "resumed": true, "catchup": true })
    );
    assert_eq!(report["again"], "resumed");
    proxy.stop().await;
}

#[tokio::test]
async fn idle_connections_get_pings_and_a_peer_that_never_answers_is_closed() {
    let proxy =
        Proxy::start_with(|c| c.http.sse_keep_alive = std::time::Duration::from_millis(50)).await;
    // A peer that answers (tungstenite pongs as it reads) outlives many intervals.
    let mut alive = Ws::connect(proxy.addr()).await;
    for _ in 0..6 {
        match alive.next_frame().await.expect("the connection stays open") {
            Frame::Ping(_) => {}
            other => panic!("only pings on an idle connection, not {other:?}"),
        }
    }
    alive.initialize().await;
    assert_eq!(
        alive.call_tool("echo", json!({ "text": "alive" })).await,
        "alive"
    );
    drop(alive);

    // A peer that completes the handshake and then never reads nor answers.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut silent = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    silent
        .write_all(
            format!(
                "GET /mcp HTTP/1.1\r\nhost: {}\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
                 sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n",
                proxy.addr()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut received = Vec::new();
    within("the server to give up on the silent peer", async {
        let mut buffer = [0u8; 1024];
        loop {
            match silent.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    // After the 101 and some pings (0x89), a close frame: FIN + opcode 8, unmasked length,
    // then the code 1001 (0x03 0xe9).
    let frames = &received[text.find("\r\n\r\n").unwrap() + 4..];
    let close_at = frames
        .iter()
        .position(|b| *b == 0x88)
        .unwrap_or_else(|| panic!("a close frame: {frames:?}"));
    assert_eq!(
        frames[close_at + 2..close_at + 4],
        [0x03, 0xe9],
        "{frames:?}"
    );
    assert_eq!(frames[0], 0x89, "pings came first: {frames:?}");
    proxy.stop().await;
}

#[tokio::test]
async fn stopping_the_proxy_closes_websockets_going_away() {
    let proxy = Proxy::start().await;
    let (mut ws, _) = bystander(&proxy).await;
    let mut own = Ws::connect(proxy.addr()).await;
    own.initialize().await;
    proxy.stop().await;
    for socket in [&mut ws, &mut own] {
        let (_, close) = socket.until_closed().await;
        assert_eq!(u16::from(close.expect("a close frame").code), 1001);
    }
}
