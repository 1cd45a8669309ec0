//! What an HTTP server behind the proxy gets to authenticate its requests (`upstream.auth`):
//! by default nothing of the client's token; a header of the operator's (`static`); the
//! client's token only when its audience names the server (`passthrough`); or a token the
//! issuer exchanged for the server's audience (`exchange`, RFC 8693). The servers here are
//! proxies themselves with `[auth]`, so they refuse what is not issued for them.

use crate::harness::auth_server::{claims_of, AuthServer};
use crate::harness::{recording_upstream, within, Client, Proxy, SecretFile};
use http::StatusCode;
use mcp_session_proxy::config::{Config, UpstreamAuth};
use serde_json::{json, Value};

/// A proxy in front of the HTTP server at `url`, as the client of that server.
async fn in_front_of(url: &str, adjust: impl FnOnce(&mut Config)) -> Proxy {
    let url = url.to_owned();
    Proxy::start_with(move |config| {
        config.upstream.stdio = None;
        config.upstream.http = Some(url);
        config.upstream.protocol = mcp_session_proxy::wire::era::Era::Legacy;
        adjust(config);
    })
    .await
}

/// The demo behind a proxy of its own that accepts only tokens issued for it.
async fn guarded_server(issuer: &AuthServer) -> (Proxy, String) {
    let issuer = issuer.issuer().to_owned();
    let server = Proxy::start_with(move |config| config.auth.issuer = issuer).await;
    let url = format!("http://{}/mcp", server.addr());
    (server, url)
}

fn bearer(token: &str) -> Option<String> {
    Some(format!("Bearer {token}"))
}

async fn initialize_status(client: &Client) -> (StatusCode, String) {
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": { "name": "credentials", "version": "1" } } }))
        .await;
    let challenge = reply
        .headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (reply.status, challenge)
}

#[tokio::test]
async fn a_token_issued_for_the_proxy_never_reaches_the_server_unless_configured() {
    let issuer = AuthServer::start().await;
    let (url, recorded) = recording_upstream().await;
    let issuer_url = issuer.issuer().to_owned();
    let front = in_front_of(&url, |c| c.auth.issuer = issuer_url).await;
    let mut client = front.client();
    let token = issuer
        .token(
            "alice",
            &format!("http://{}/mcp", front.addr()),
            "mcp:tools",
        )
        .await;
    client.authorization = bearer(&token);
    initialize_status(&client).await;
    let head = within("the server's request", recorded).await.unwrap();
    assert!(!head.contains("authorization"), "{head}");
    assert!(!head.contains(&token.to_lowercase()), "{head}");
    front.stop().await;
}

/// How a client reaches the server through the proxy: each front makes its caller once, where
/// the request is admitted, and none of them hands the server what the client sent.
#[derive(Debug, Clone, Copy)]
enum Front {
    LegacySse,
    Modern,
    WebSocket,
    ProtocolSession,
}

/// What a front's request leaves open until the server is asked (a stream, a connection).
#[allow(dead_code)]
enum Open {
    Nothing,
    Stream(crate::harness::Reply),
    Socket(crate::harness::ws::Ws),
}

/// Makes `client`'s first request that reaches the server, through `front`.
async fn first_request(front: Front, client: &mut Client, addr: std::net::SocketAddr) -> Open {
    let initialize = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": { "name": "credentials", "version": "1" } } });
    let authorization = client.authorization.clone().unwrap();
    match front {
        Front::LegacySse => {
            let headers = [
                ("accept", "text/event-stream"),
                ("authorization", authorization.as_str()),
            ];
            let mut stream = client
                .send_to("/sse", http::Method::GET, &headers, None)
                .await;
            assert_eq!(stream.status, StatusCode::OK, "the SSE stream opens");
            let endpoint = within("the endpoint event", stream.next_event())
                .await
                .expect("an endpoint event");
            let headers = [
                ("content-type", "application/json"),
                ("authorization", authorization.as_str()),
            ];
            let body = initialize.to_string().into();
            let posted = client
                .send_to(&endpoint.data, http::Method::POST, &headers, Some(body))
                .await;
            assert_eq!(posted.status, StatusCode::ACCEPTED);
            Open::Stream(stream)
        }
        Front::Modern => {
            let discover =
                crate::harness::modern_request(1, "server/discover", json!({}), json!({}));
            client.post_modern(&discover, &[]).await;
            Open::Nothing
        }
        Front::WebSocket => {
            let headers = [
                ("sec-websocket-protocol", "mcp"),
                ("authorization", authorization.as_str()),
            ];
            let mut ws = crate::harness::ws::Ws::connect_with(addr, "/mcp", &headers)
                .await
                .expect("the WebSocket handshake succeeds");
            ws.send(initialize).await;
            Open::Socket(ws)
        }
        Front::ProtocolSession => {
            let start = json!({ "jsonrpc": "2.0", "id": 1, "method": "session/start" });
            let started = client.post(&start).await.json().await;
            let id = started["result"]["sessionId"].as_str().unwrap().to_owned();
            client
                .extra_headers
                .push(("mcp-protocol-session-id".into(), id));
            client.post(&initialize).await;
            Open::Nothing
        }
    }
}

/// With `upstream.auth = "exchange"` the server gets a token the issuer made for it, never the
/// client's, whichever front the client came through: the front makes the caller once, where
/// it admits the request, and every layer after takes the credential from it.
#[tokio::test]
async fn every_front_hands_the_server_the_exchanged_token_never_the_clients() {
    let issuer = AuthServer::start().await;
    let secret = SecretFile::new("exchange", "proxy-secret");
    for front in [
        Front::LegacySse,
        Front::Modern,
        Front::WebSocket,
        Front::ProtocolSession,
    ] {
        let (url, recorded) = recording_upstream().await;
        let proxy = exchanging_front(&issuer, &url, &secret).await;
        let mut client = proxy.client();
        let proxy_url = format!("http://{}/mcp", proxy.addr());
        let token = issuer.token("alice", &proxy_url, "mcp:tools").await;
        client.authorization = bearer(&token);
        let _open = first_request(front, &mut client, proxy.addr()).await;
        let head = within("the server's request", recorded).await.unwrap();
        assert!(
            head.contains("authorization: bearer "),
            "{front:?}: the exchanged token: {head}"
        );
        assert!(!head.contains(&token.to_lowercase()), "{front:?}: {head}");
        assert_eq!(proxy.metric("mcp_proxy_auth_token_exchanges_total"), 1);
        proxy.stop().await;
    }
}

#[tokio::test]
async fn a_static_credential_of_the_operators_reaches_the_server() {
    let secret = SecretFile::new("static", "s3cret-api-key");
    for (header, expected) in [
        ("X-Api-Key", "x-api-key: s3cret-api-key"),
        ("Authorization", "authorization: bearer s3cret-api-key"),
    ] {
        let (url, recorded) = recording_upstream().await;
        let front = in_front_of(&url, |c| {
            c.upstream.auth = UpstreamAuth::Static;
            c.upstream.auth_header = header.into();
            c.upstream.auth_secret = secret.source();
        })
        .await;
        let mut client = front.client();
        client.authorization = Some("Bearer the-clients-own".into());
        initialize_status(&client).await;
        let head = within("the server's request", recorded).await.unwrap();
        assert!(head.contains(expected), "{head}");
        assert!(!head.contains("the-clients-own"), "{head}");
        front.stop().await;
    }
}

#[tokio::test]
async fn passthrough_sends_only_a_token_whose_audience_names_the_server() {
    let issuer = AuthServer::start().await;
    let (server, server_url) = guarded_server(&issuer).await;
    let issuer_url = issuer.issuer().to_owned();
    let front = in_front_of(&server_url, |c| {
        c.auth.issuer = issuer_url;
        c.upstream.auth = UpstreamAuth::Passthrough;
    })
    .await;
    let front_url = format!("http://{}/mcp", front.addr());

    let mut client = front.client();
    client.authorization = bearer(&issuer.token("alice", &front_url, "mcp:tools").await);
    let (status, challenge) = initialize_status(&client).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        challenge.contains("does not name the server") && challenge.contains(&server_url),
        "{challenge}"
    );
    assert_eq!(
        server.metric("mcp_proxy_sessions_created_total"),
        0,
        "nothing was sent"
    );

    // A token issued for both the proxy and the server passes, and the server accepts it.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let for_both = issuer
        .sign(
            json!({ "iss": issuer.issuer(), "sub": "alice", "aud": [front_url, server_url],
                    "iat": now, "exp": now + 300 }),
            "RS256",
        )
        .await;
    client.authorization = bearer(&for_both);
    client.initialize("2025-11-25").await;
    assert_eq!(
        client.call_tool("echo", json!({ "text": "through" })).await,
        "through"
    );
    assert_eq!(server.metric("mcp_proxy_sessions_created_total"), 1);
    front.stop().await;
    server.stop().await;
}

/// A front in front of `server_url` that exchanges its clients' tokens for the server.
async fn exchanging_front(issuer: &AuthServer, server_url: &str, secret: &SecretFile) -> Proxy {
    let issuer_url = issuer.issuer().to_owned();
    in_front_of(server_url, |c| {
        c.auth.issuer = issuer_url;
        c.auth.client_id = "proxy".into();
        c.auth.client_secret = secret.source();
        c.upstream.auth = UpstreamAuth::Exchange;
    })
    .await
}

/// A `tools/call` of echo: its text, or what came back instead.
async fn echo(client: &mut Client, text: &str) -> Result<String, String> {
    echo_in(client, text, json!({})).await
}

/// A `tools/call` of echo with `meta` as its `_meta` (naming a data-layer session, say): its
/// text, or what came back instead.
async fn echo_in(client: &mut Client, text: &str, meta: Value) -> Result<String, String> {
    let id = client.next_id();
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "echo", "arguments": { "text": text }, "_meta": meta } }))
        .await;
    let status = reply.status;
    let answer = match status {
        StatusCode::OK => reply.response().await,
        _ => reply.json().await,
    };
    answer["result"]["content"][0]["text"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{status}: {answer}"))
}

#[tokio::test]
async fn exchange_gets_the_server_a_token_for_its_own_audience_once_per_client_token() {
    let issuer = AuthServer::start().await;
    let (server, server_url) = guarded_server(&issuer).await;
    let secret = SecretFile::new("exchange", "proxy-secret");
    let front = exchanging_front(&issuer, &server_url, &secret).await;
    let front_url = format!("http://{}/mcp", front.addr());
    let token = issuer.token("alice", &front_url, "mcp:tools").await;
    assert_eq!(
        claims_of(&token)["aud"],
        front_url,
        "issued for the proxy only"
    );

    let mut client = front.client();
    client.authorization = bearer(&token);
    client.initialize("2025-11-25").await;
    assert_eq!(
        client
            .call_tool("echo", json!({ "text": "exchanged" }))
            .await,
        "exchanged"
    );
    assert_eq!(front.metric("mcp_proxy_auth_token_exchanges_total"), 1);
    assert!(front.metric("mcp_proxy_auth_token_exchanges_reused_total") >= 1);
    // A refreshed token is a token of its own: exchanged once more, then reused.
    client.authorization = bearer(&issuer.token("alice", &front_url, "mcp:tools").await);
    assert_eq!(
        client.call_tool("echo", json!({ "text": "again" })).await,
        "again"
    );
    assert_eq!(
        client.call_tool("echo", json!({ "text": "kept" })).await,
        "kept"
    );
    assert_eq!(front.metric("mcp_proxy_auth_token_exchanges_total"), 2);
    assert_eq!(issuer.requests_of("exchange").await, 2);
    assert_eq!(server.metric("mcp_proxy_sessions_created_total"), 1);

    // Another principal gets its own.
    let mut bob = front.client();
    bob.authorization = bearer(&issuer.token("bob", &front_url, "mcp:tools").await);
    bob.initialize("2025-11-25").await;
    assert_eq!(front.metric("mcp_proxy_auth_token_exchanges_total"), 3);
    assert_eq!(front.metric("mcp_proxy_auth_tokens_exchanged_kept"), 3);
    front.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn a_narrower_token_never_reuses_the_token_exchanged_for_a_broader_one() {
    let issuer = AuthServer::start().await;
    // A server that needs mcp:admin: an exchanged token carries the client's token's scopes.
    let issuer_url = issuer.issuer().to_owned();
    let server = Proxy::start_with(move |config| {
        config.auth.issuer = issuer_url;
        config.auth.required_scopes = vec!["mcp:admin".into()];
    })
    .await;
    let server_url = format!("http://{}/mcp", server.addr());
    let secret = SecretFile::new("narrower", "proxy-secret");
    let front = exchanging_front(&issuer, &server_url, &secret).await;
    let front_url = format!("http://{}/mcp", front.addr());
    let broad = issuer
        .token("alice", &front_url, "mcp:tools mcp:admin")
        .await;
    let narrow = issuer.token("alice", &front_url, "mcp:tools").await;

    let mut client = front.client();
    client.authorization = bearer(&broad);
    client.initialize("2025-11-25").await;
    assert_eq!(echo(&mut client, "admin").await.as_deref(), Ok("admin"));

    // The same user, down-scoped: the server must see a token without mcp:admin.
    client.authorization = bearer(&narrow);
    let refused = echo(&mut client, "narrow").await;
    assert!(refused.is_err(), "the narrower token did the admin's work");
    assert_eq!(
        server.metric("mcp_proxy_auth_refused_requests_total{reason=\"scope\"}"),
        1,
        "the server refused the narrower exchanged token"
    );
    assert_eq!(issuer.requests_of("exchange").await, 2);

    // The broader token still has its own.
    client.authorization = bearer(&broad);
    assert_eq!(echo(&mut client, "back").await.as_deref(), Ok("back"));
    assert_eq!(issuer.requests_of("exchange").await, 2);
    front.stop().await;
    server.stop().await;
}

/// A data-layer session is found with the credential of the request that names it, which its
/// server gets from then on: a narrower token of the same user, naming the session, cannot do
/// the broader token's work there (as in its transport session).
#[tokio::test]
async fn a_narrower_token_never_reuses_the_broader_ones_within_a_data_layer_session() {
    let issuer = AuthServer::start().await;
    let issuer_url = issuer.issuer().to_owned();
    let server = Proxy::start_with(move |config| {
        config.auth.issuer = issuer_url;
        config.auth.required_scopes = vec!["mcp:admin".into()];
    })
    .await;
    let server_url = format!("http://{}/mcp", server.addr());
    let secret = SecretFile::new("narrower-named", "proxy-secret");
    let front = exchanging_front(&issuer, &server_url, &secret).await;
    let front_url = format!("http://{}/mcp", front.addr());
    let broad = issuer
        .token("alice", &front_url, "mcp:tools mcp:admin")
        .await;
    let narrow = issuer.token("alice", &front_url, "mcp:tools").await;

    let mut client = front.client();
    client.authorization = bearer(&broad);
    client.initialize("2025-11-25").await;
    let created = client.request("sessions/create", json!({})).await;
    let session = &created["result"]["session"];
    let cookie = json!({ "sessionId": session["sessionId"], "state": session["state"] });
    let within = json!({ "io.modelcontextprotocol/session": cookie });
    assert_eq!(
        echo_in(&mut client, "admin", within.clone())
            .await
            .as_deref(),
        Ok("admin"),
        "the broad token works within its data-layer session"
    );

    // The same user, down-scoped: refused in the transport session, as it should be.
    client.authorization = bearer(&narrow);
    assert!(echo(&mut client, "narrow").await.is_err());
    // And within the data-layer session: the server must see a token without mcp:admin.
    let answered = echo_in(&mut client, "narrow-within", within).await;
    assert!(
        answered.is_err(),
        "the narrower token did the admin's work through the data-layer session: {answered:?}"
    );
    front.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn concurrent_first_requests_with_one_token_make_one_exchange() {
    const CLIENTS: u64 = 16;
    let issuer = AuthServer::start().await;
    let (server, server_url) = guarded_server(&issuer).await;
    let secret = SecretFile::new("single-flight", "proxy-secret");
    let front = exchanging_front(&issuer, &server_url, &secret).await;
    let front_url = format!("http://{}/mcp", front.addr());
    let token = issuer.token("alice", &front_url, "mcp:tools").await;

    let sessions = (0..CLIENTS).map(|_| {
        let mut client = front.client();
        client.authorization = bearer(&token);
        async move { client.initialize("2025-11-25").await }
    });
    within("every session", futures_util::future::join_all(sessions)).await;

    assert_eq!(issuer.requests_of("exchange").await, 1);
    assert_eq!(front.metric("mcp_proxy_auth_token_exchanges_total"), 1);
    let waited = front.metric("mcp_proxy_auth_token_exchanges_coalesced_total");
    let reused = front.metric("mcp_proxy_auth_token_exchanges_reused_total");
    // Each session's initialize and notifications/initialized: all but the first request
    // waited for the one exchange or reused it.
    assert!(
        waited + reused >= CLIENTS - 1,
        "{waited} waited, {reused} reused"
    );
    assert_eq!(server.metric("mcp_proxy_sessions_created_total"), CLIENTS);
    front.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn an_exchange_the_issuer_refuses_is_403_and_nothing_is_sent() {
    let issuer = AuthServer::start().await;
    let (server, server_url) = guarded_server(&issuer).await;
    let wrong = SecretFile::new("wrong-secret", "not-the-proxys-secret");
    let issuer_url = issuer.issuer().to_owned();
    let front = in_front_of(&server_url, |c| {
        c.auth.issuer = issuer_url;
        c.auth.client_id = "proxy".into();
        c.auth.client_secret = wrong.source();
        c.upstream.auth = UpstreamAuth::Exchange;
    })
    .await;
    let mut client = front.client();
    let front_url = format!("http://{}/mcp", front.addr());
    client.authorization = bearer(&issuer.token("alice", &front_url, "mcp:tools").await);
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": { "name": "credentials", "version": "1" } } }))
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    let answer = reply.json().await;
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("would not exchange"), "{message}");
    assert!(!message.contains("not-the-proxys-secret"), "{message}");
    assert_eq!(server.metric("mcp_proxy_sessions_created_total"), 0);
    front.stop().await;
    server.stop().await;
}

/// A virtual server's members each get the credential made for them, as at their own paths:
/// `passed` the client's token (when it names that server), `exchanged` a token the issuer
/// exchanged for it, `local` (a stdio server) nothing. A token that does not name `passed`
/// leaves that member without one (its server refuses it) while the others go on.
#[tokio::test]
async fn each_member_of_a_virtual_server_gets_the_credential_made_for_it() {
    let issuer = AuthServer::start().await;
    let (passed, passed_url) = guarded_server(&issuer).await;
    let (exchanged, exchanged_url) = guarded_server(&issuer).await;
    let secret = SecretFile::new("exchange", "proxy-secret");
    let issuer_url = issuer.issuer().to_owned();
    let member = |url: &str, auth: UpstreamAuth| {
        let mut server = mcp_session_proxy::config::ServerConfig::default();
        server.upstream.http = Some(url.to_owned());
        server.upstream.protocol = mcp_session_proxy::wire::era::Era::Legacy;
        server.upstream.auth = auth;
        server
    };
    let (passed_member, exchanged_member) = (
        member(&passed_url, UpstreamAuth::Passthrough),
        member(&exchanged_url, UpstreamAuth::Exchange),
    );
    let client_secret = secret.source();
    let front = Proxy::start_with(move |c| {
        c.auth.issuer = issuer_url;
        c.auth.client_id = "proxy".into();
        c.auth.client_secret = client_secret;
        let mut local = mcp_session_proxy::config::ServerConfig::default();
        local.upstream.stdio = c.upstream.stdio.take();
        c.servers.insert("local".into(), local);
        c.servers.insert("passed".into(), passed_member);
        c.servers.insert("exchanged".into(), exchanged_member);
        c.r#virtual.insert(
            "work".into(),
            mcp_session_proxy::config::VirtualConfig {
                servers: vec!["local".into(), "passed".into(), "exchanged".into()],
                ..Default::default()
            },
        );
    })
    .await;
    let work_url = format!("http://{}/servers/work/mcp", front.addr());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let for_work_and_passed = issuer
        .sign(
            json!({ "iss": issuer.issuer(), "sub": "alice", "aud": [work_url, passed_url],
                    "iat": now, "exp": now + 300 }),
            "RS256",
        )
        .await;
    let mut client = front.client();
    client.path = "/servers/work/mcp".into();
    client.authorization = bearer(&for_work_and_passed);
    client.initialize("2025-11-25").await;
    for member in ["local", "passed", "exchanged"] {
        let tool = format!("{member}__echo");
        assert_eq!(
            client.call_tool(&tool, json!({ "text": member })).await,
            member
        );
    }
    assert_eq!(passed.metric("mcp_proxy_sessions_created_total"), 1);
    assert_eq!(exchanged.metric("mcp_proxy_sessions_created_total"), 1);
    assert_eq!(front.metric("mcp_proxy_auth_token_exchanges_total"), 1);

    // A token for the virtual server only: `passed` is sent none, and refuses; the others go on.
    let mut bob = front.client();
    bob.path = "/servers/work/mcp".into();
    bob.authorization = bearer(&issuer.token("bob", &work_url, "mcp:tools").await);
    bob.initialize("2025-11-25").await;
    let refused = bob
        .post(&json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": { "name": "passed__echo", "arguments": { "text": "x" } } }))
        .await
        .response()
        .await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("passed (a member of this virtual server)"),
        "{refused}"
    );
    assert_eq!(
        bob.call_tool("exchanged__echo", json!({ "text": "ok" }))
            .await,
        "ok"
    );
    assert_eq!(
        passed.metric("mcp_proxy_sessions_created_total"),
        1,
        "bob reached it not"
    );
    front.stop().await;
    passed.stop().await;
    exchanged.stop().await;
}
