//! What an HTTP server behind the proxy gets to authenticate its requests (`upstream.auth`):
//! by default nothing of the client's token; a header of the operator's (`static`); the
//! client's token only when its audience names the server (`passthrough`); or a token the
//! issuer exchanged for the server's audience (`exchange`, RFC 8693). The servers here are
//! proxies themselves with `[auth]`, so they refuse what is not issued for them.

mod common;

use std::path::PathBuf;

use common::auth_server::{claims_of, AuthServer};
use common::{recording_upstream, within, Client, Proxy};
use http::StatusCode;
use mcp_session_proxy::config::{Config, SecretSource, UpstreamAuth};
use serde_json::json;

/// A secret in a file of its own, removed when dropped.
struct SecretFile(PathBuf);

impl SecretFile {
    fn new(name: &str, secret: &str) -> SecretFile {
        let path = std::env::temp_dir().join(format!("mcp-proxy-{name}-{}", std::process::id()));
        std::fs::write(&path, format!("{secret}\n")).unwrap();
        SecretFile(path)
    }

    fn source(&self) -> Option<SecretSource> {
        Some(SecretSource::File(self.0.clone()))
    }
}

impl Drop for SecretFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A proxy in front of the HTTP server at `url`, as the client of that server.
async fn in_front_of(url: &str, adjust: impl FnOnce(&mut Config)) -> Proxy {
    let url = url.to_owned();
    Proxy::start_with(move |config| {
        config.upstream.stdio = None;
        config.upstream.http = Some(url);
        config.upstream.protocol = mcp_session_proxy::era::Era::Legacy;
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

#[tokio::test]
async fn exchange_gets_the_server_a_token_for_its_own_audience_once_per_principal() {
    let issuer = AuthServer::start().await;
    let (server, server_url) = guarded_server(&issuer).await;
    let secret = SecretFile::new("exchange", "proxy-secret");
    let issuer_url = issuer.issuer().to_owned();
    let front = in_front_of(&server_url, |c| {
        c.auth.issuer = issuer_url;
        c.auth.client_id = "proxy".into();
        c.auth.client_secret = secret.source();
        c.upstream.auth = UpstreamAuth::Exchange;
    })
    .await;
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
    // A refreshed token: the same principal, whose exchanged token is still good.
    client.authorization = bearer(&issuer.token("alice", &front_url, "mcp:tools").await);
    assert_eq!(
        client.call_tool("echo", json!({ "text": "again" })).await,
        "again"
    );
    assert_eq!(front.metric("mcp_proxy_auth_token_exchanges_total"), 1);
    assert_eq!(server.metric("mcp_proxy_sessions_created_total"), 1);

    // Another principal gets its own.
    let mut bob = front.client();
    bob.authorization = bearer(&issuer.token("bob", &front_url, "mcp:tools").await);
    bob.initialize("2025-11-25").await;
    assert_eq!(front.metric("mcp_proxy_auth_token_exchanges_total"), 2);
    assert_eq!(front.metric("mcp_proxy_auth_tokens_exchanged_kept"), 2);
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
