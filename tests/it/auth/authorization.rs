//! The proxy as an OAuth 2.1 resource server (`[auth]`), against a real authorization server
//! (oidc-provider): a request without a valid token gets 401 naming the resource's metadata,
//! one without the scopes 403; the principal is the token's issuer and subject, so a refreshed
//! token keeps its session, its replay and its resume, on any replica, and another subject's
//! token finds nothing. Keys rotated at the issuer are taken at once without a restart; what
//! forged tokens cost the issuer is bounded (one key fetch per floor, introspections per
//! second, inactive tokens remembered); a failed key fetch is backed off, and while the issuer
//! is down its known keys serve within a grace.

use std::time::Duration;

use crate::harness::auth_server::{claims_of, AuthServer};
use crate::harness::cluster::{Redis, Replica};
use crate::harness::ws::Ws;
use crate::harness::{modern_request, spawn_proxy, until, within, Client, Proxy, SecretFile, DEMO};
use http::{Method, StatusCode};
use mcp_session_proxy::config::Config;
use serde_json::{json, Value};

fn guarded(issuer: &str) -> impl FnOnce(&mut Config) + '_ {
    move |config: &mut Config| config.auth.issuer = issuer.to_owned()
}

fn resource(proxy: &Proxy, path: &str) -> String {
    format!("http://{}{path}", proxy.addr())
}

fn bearer(token: &str) -> Option<String> {
    Some(format!("Bearer {token}"))
}

fn challenge(headers: &http::HeaderMap) -> String {
    headers
        .get("www-authenticate")
        .expect("a WWW-Authenticate challenge")
        .to_str()
        .unwrap()
        .to_owned()
}

/// The resource metadata document at `path`.
async fn metadata(client: &Client, path: &str) -> Value {
    let reply = client.send_to(path, Method::GET, &[], None).await;
    assert_eq!(reply.status, StatusCode::OK, "{path}");
    reply.json().await
}

async fn initialize_reply(client: &Client) -> crate::harness::Reply {
    client
        .post(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": { "name": "auth", "version": "1" } }
        }))
        .await
}

/// A token `alice` (or whoever) holds for the proxy's `/mcp`.
async fn token(issuer: &AuthServer, proxy: &Proxy, client: &str) -> String {
    issuer
        .token(client, &resource(proxy, "/mcp"), "mcp:tools")
        .await
}

/// A client of `who`'s, its session initialized with a token for the proxy's `/mcp`.
async fn initialized(issuer: &AuthServer, proxy: &Proxy, who: &str) -> Client {
    let mut client = Client::new(proxy.addr());
    client.authorization = bearer(&token(issuer, proxy, who).await);
    client.initialize("2025-11-25").await;
    client
}

#[tokio::test]
async fn without_a_token_a_client_learns_where_to_get_one() {
    let issuer = AuthServer::start().await;
    let proxy = Proxy::start_with(guarded(issuer.issuer())).await;
    let client = Client::new(proxy.addr());
    let reply = initialize_reply(&client).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let metadata_url = format!(
        "http://{}/.well-known/oauth-protected-resource/mcp",
        proxy.addr()
    );
    assert_eq!(
        challenge(&reply.headers),
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    assert_eq!(reply.json().await["error"]["code"], -32600);

    let document = client
        .send_to(
            "/.well-known/oauth-protected-resource/mcp",
            Method::GET,
            &[],
            None,
        )
        .await;
    assert_eq!(document.status, StatusCode::OK);
    let document = document.json().await;
    assert_eq!(document["resource"], resource(&proxy, "/mcp"));
    assert_eq!(document["authorization_servers"], json!([issuer.issuer()]));
    assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    let bare = metadata(&client, "/.well-known/oauth-protected-resource").await;
    assert_eq!(bare, document);
    let unknown = client
        .send_to(
            "/.well-known/oauth-protected-resource/servers/nope/mcp",
            Method::GET,
            &[],
            None,
        )
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);

    // Health and metrics stay open to probes.
    let health = client.send_to("/healthz", Method::GET, &[], None).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(
        proxy.metric("mcp_proxy_auth_refused_requests_total{reason=\"missing\"}"),
        1
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_refreshed_token_keeps_its_session_its_replay_and_its_resume() {
    let issuer = AuthServer::start().await;
    let proxy = Proxy::start_with(guarded(issuer.issuer())).await;
    let mut alice = initialized(&issuer, &proxy, "alice").await;
    let stream = alice.get(None).await;
    assert_eq!(stream.status, StatusCode::OK);
    drop(stream);

    // A token refreshed at the issuer: new bytes, the same issuer and subject.
    let refreshed = token(&issuer, &proxy, "alice").await;
    assert_ne!(alice.authorization, bearer(&refreshed));
    alice.authorization = bearer(&refreshed);
    assert_eq!(
        alice.call_tool("echo", json!({ "text": "still me" })).await,
        "still me"
    );
    let mut resumed = alice.get(None).await;
    assert_eq!(
        resumed.status,
        StatusCode::OK,
        "the session's stream, again"
    );
    drop(resumed.next_chunk().await);

    // Another subject, with a valid token of its own, finds no such session.
    let mut bob = alice.clone();
    bob.authorization = bearer(&token(&issuer, &proxy, "bob").await);
    let id = bob.next_id();
    let foreign = bob
        .post(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/list" }))
        .await;
    assert_eq!(foreign.status, StatusCode::NOT_FOUND);
    assert_eq!(bob.get(None).await.status, StatusCode::NOT_FOUND);
    proxy.stop().await;
}

#[tokio::test]
async fn expired_foreign_and_forged_tokens_get_401_invalid_token() {
    let issuer = AuthServer::start().await;
    let stranger = AuthServer::start().await;
    let proxy = Proxy::start_with(guarded(issuer.issuer())).await;
    let audience = resource(&proxy, "/mcp");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = |changes: Value| {
        let mut claims = json!({
            "iss": issuer.issuer(), "sub": "alice", "aud": audience,
            "iat": now, "exp": now + 300, "scope": "mcp:tools"
        });
        for (key, value) in changes.as_object().unwrap() {
            claims[key] = value.clone();
        }
        claims
    };
    let good = issuer.sign(claims(json!({})), "RS256").await;
    let (header, payload) = good.rsplit_once('.').unwrap().0.split_once('.').unwrap();
    let mut tampered_claims = claims_of(&good);
    tampered_claims["sub"] = json!("admin");
    let tampered = format!(
        "{header}.{}.{}",
        base64_url(&tampered_claims.to_string()),
        good.rsplit('.').next().unwrap()
    );
    assert_ne!(payload, tampered.split('.').nth(1).unwrap());
    let cases = [
        (
            "expired",
            issuer
                .sign(claims(json!({ "exp": now - 120 })), "RS256")
                .await,
            "the token expired",
        ),
        (
            "another audience",
            issuer
                .sign(
                    claims(json!({ "aud": "http://elsewhere.example/mcp" })),
                    "RS256",
                )
                .await,
            "not issued for this resource",
        ),
        (
            "another issuer",
            issuer
                .sign(claims(json!({ "iss": stranger.issuer() })), "RS256")
                .await,
            "another issuer",
        ),
        (
            "a key the issuer does not publish",
            stranger.sign(claims(json!({})), "RS256").await,
            "a key the issuer does not publish",
        ),
        (
            "a payload changed after signing",
            tampered,
            "signature does not verify",
        ),
        (
            "not yet valid",
            issuer
                .sign(claims(json!({ "nbf": now + 600 })), "ES256")
                .await,
            "not valid yet",
        ),
        (
            "not a JWT",
            "opaque-but-no-introspection".to_owned(),
            "not a well-formed JWT",
        ),
    ];
    for (case, token, says) in cases {
        let mut client = Client::new(proxy.addr());
        client.authorization = bearer(&token);
        let reply = initialize_reply(&client).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{case}");
        let challenge = challenge(&reply.headers);
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\""),
            "{case}: {challenge}"
        );
        assert!(challenge.contains(says), "{case}: {challenge}");
        assert!(
            challenge.contains("resource_metadata="),
            "{case}: {challenge}"
        );
    }
    // The same claims, signed by each of the issuer's algorithms, pass.
    for alg in ["RS256", "ES256", "EdDSA"] {
        let mut client = Client::new(proxy.addr());
        client.authorization = bearer(&issuer.sign(claims(json!({})), alg).await);
        assert_eq!(
            initialize_reply(&client).await.status,
            StatusCode::OK,
            "{alg}"
        );
    }
    proxy.stop().await;
}

fn base64_url(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

#[tokio::test]
async fn a_key_rotated_at_the_issuer_is_taken_at_once_without_a_restart() {
    let issuer = AuthServer::start().await;
    let proxy = Proxy::start_with(guarded(issuer.issuer())).await;
    let mut alice = initialized(&issuer, &proxy, "alice").await;
    assert_eq!(issuer.requests_of("jwks").await, 1);

    // Rotated, and a token signed with the new key, while the keys were fetched a moment ago.
    issuer.rotate().await;
    alice.authorization = bearer(&token(&issuer, &proxy, "alice").await);
    let id = alice.next_id();
    let reply = alice
        .post(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "echo", "arguments": { "text": "new key" } } }))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.headers);
    assert_eq!(
        issuer.requests_of("jwks").await,
        2,
        "fetched again for the new key"
    );
    alice.call_tool("echo", json!({ "text": "cached" })).await;
    assert_eq!(issuer.requests_of("jwks").await, 2);
    proxy.stop().await;
}

/// A JWT naming `kid`, with a signature no key makes: what anyone can forge.
fn forged_jwt(claims: &Value, kid: &str) -> String {
    let header = json!({ "alg": "RS256", "typ": "at+jwt", "kid": kid });
    let mut signature = [0u8; 256];
    getrandom::fill(&mut signature).unwrap();
    let signature = {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signature)
    };
    format!(
        "{}.{}.{signature}",
        base64_url(&header.to_string()),
        base64_url(&claims.to_string())
    )
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn forged_key_ids_cost_the_issuer_one_key_fetch_per_floor() {
    let issuer = AuthServer::start().await;
    let proxy = Proxy::start_with(guarded(issuer.issuer())).await;
    // A first token: the issuer's keys are fetched once.
    initialized(&issuer, &proxy, "alice").await;
    let fetched = issuer.requests_of("jwks").await;
    let claims = json!({ "iss": issuer.issuer(), "sub": "mallory",
        "aud": resource(&proxy, "/mcp"), "exp": unix_seconds() + 300 });
    let forged = (0..1000)
        .map(|_| forged_jwt(&claims, &random_hex(8)))
        .collect();

    // A request naming an unknown key may wait for the floor's end (a second): many at once.
    let (statuses, took) = statuses_of(&proxy, forged, 250).await;

    let fetches = issuer.requests_of("jwks").await - fetched;
    eprintln!(
        "key fetches: {fetches} for 1000 JWTs naming random key ids (in {:.2} s)",
        took.as_secs_f64()
    );
    assert!(statuses.iter().all(|s| *s == StatusCode::UNAUTHORIZED));
    // One per second (the default floor), and one for the second under way.
    let allowed = took.as_secs_f64().ceil() as u64 + 1;
    assert!(fetches <= allowed, "{fetches} fetches, {allowed} allowed");
    proxy.stop().await;
}

#[tokio::test]
async fn while_the_issuer_is_down_its_known_keys_serve_past_their_age_within_the_grace() {
    let issuer = AuthServer::start().await;
    let keeping = |grace: Duration| {
        let issuer = issuer.issuer().to_owned();
        move |config: &mut Config| {
            config.auth.issuer = issuer;
            // Every use past the maximum age, and nothing between fetches: each new token
            // wants the keys fetched again.
            config.auth.jwks_max_age = Duration::ZERO;
            config.auth.jwks_refetch_floor = Duration::ZERO;
            config.auth.jwks_stale_grace = grace;
        }
    };
    let kept = Proxy::start_with(keeping(Duration::from_secs(3600))).await;
    let strict = Proxy::start_with(keeping(Duration::ZERO)).await;
    for proxy in [&kept, &strict] {
        initialized(&issuer, proxy, "alice").await;
    }
    let fetched = issuer.requests_of("jwks").await;
    assert_eq!(fetched, 2);

    issuer.go_down().await;
    let claims = |proxy: &Proxy| {
        json!({ "iss": issuer.issuer(), "sub": "alice", "aud": resource(proxy, "/mcp"),
                "exp": unix_seconds() + 300, "scope": "mcp:tools" })
    };
    let mut alice = Client::new(kept.addr());
    alice.authorization = bearer(&issuer.sign(claims(&kept), "RS256").await);
    alice.initialize("2025-11-25").await;
    assert_eq!(
        alice.call_tool("echo", json!({ "text": "kept" })).await,
        "kept"
    );
    assert!(kept.metric("mcp_proxy_auth_keys_stale_served_total") >= 1);
    assert_eq!(kept.metric("mcp_proxy_auth_key_fetch_failures_total"), 1);

    let mut beyond = Client::new(strict.addr());
    beyond.authorization = bearer(&issuer.sign(claims(&strict), "RS256").await);
    let refused = initialize_reply(&beyond).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        issuer.requests_of("jwks").await,
        fetched + 2,
        "one try each"
    );
    kept.stop().await;
    strict.stop().await;
}

#[tokio::test]
async fn a_failed_key_fetch_is_backed_off_not_tried_again_per_request() {
    let issuer = AuthServer::start().await;
    let proxy = Proxy::start_with(guarded(issuer.issuer())).await;
    issuer.go_down().await;
    let asked = || async {
        let requests = issuer.requests().await;
        requests["discovery"].as_u64().unwrap() + requests["jwks"].as_u64().unwrap()
    };
    let before = asked().await;
    let claims = json!({ "iss": issuer.issuer(), "sub": "alice",
        "aud": resource(&proxy, "/mcp"), "exp": unix_seconds() + 300 });
    let token = issuer.sign(claims, "RS256").await;

    let started = std::time::Instant::now();
    let (statuses, _) = statuses_of(&proxy, vec![token.clone(); 200], 10).await;
    let took = started.elapsed().as_secs_f64();

    let requests = asked().await - before;
    let tries = proxy.metric("mcp_proxy_auth_key_fetch_failures_total");
    eprintln!(
        "{tries} tries ({requests} requests) at a down issuer for 200 requests in {took:.2} s"
    );
    assert!(statuses
        .iter()
        .all(|s| *s == StatusCode::SERVICE_UNAVAILABLE));
    // Tries at 0, 1, 3, 7, … seconds: a backoff doubling from one second; each asks for the
    // issuer's metadata (two documents) or its keys.
    let allowed = 1 + (took + 1.0).log2().floor() as u64;
    assert!(tries <= allowed, "{tries} tries, {allowed} allowed");
    assert!(
        requests <= 2 * tries,
        "{requests} requests in {tries} tries"
    );

    issuer.come_up().await;
    let mut alice = Client::new(proxy.addr());
    alice.authorization = bearer(&token);
    until(
        "the keys once the issuer is back",
        StatusCode::OK,
        || async { initialize_reply(&alice).await.status },
    )
    .await;
    proxy.stop().await;
}

#[tokio::test]
async fn missing_scopes_get_403_naming_the_scopes_to_ask_for() {
    let issuer = AuthServer::start().await;
    let proxy = Proxy::start_with(|config| {
        config.auth.issuer = issuer.issuer().to_owned();
        config.auth.required_scopes = vec!["mcp:tools".into(), "mcp:admin".into()];
    })
    .await;
    let mut client = Client::new(proxy.addr());
    let missing = initialize_reply(&client).await;
    assert_eq!(
        challenge(&missing.headers),
        format!(
            "Bearer resource_metadata=\"http://{}/.well-known/oauth-protected-resource/mcp\", \
             scope=\"mcp:tools mcp:admin\"",
            proxy.addr()
        )
    );
    let narrow = issuer
        .token("alice", &resource(&proxy, "/mcp"), "mcp:tools")
        .await;
    client.authorization = bearer(&narrow);
    let refused = initialize_reply(&client).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let challenge = challenge(&refused.headers);
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"mcp:tools mcp:admin\""),
        "{challenge}"
    );
    let wide = issuer
        .token("alice", &resource(&proxy, "/mcp"), "mcp:tools mcp:admin")
        .await;
    client.authorization = bearer(&wide);
    client.initialize("2025-11-25").await;
    let document = metadata(&client, "/.well-known/oauth-protected-resource/mcp").await;
    assert_eq!(
        document["scopes_supported"],
        json!(["mcp:tools", "mcp:admin"])
    );
    proxy.stop().await;
}

#[tokio::test]
async fn every_front_needs_a_token_for_its_own_resource() {
    let issuer = AuthServer::start().await;
    let proxy = Proxy::start_with(|config| {
        config.auth.issuer = issuer.issuer().to_owned();
        let mut server = mcp_session_proxy::config::ServerConfig::default();
        server.upstream.stdio = config.upstream.stdio.clone();
        config.servers.insert("files".into(), server);
    })
    .await;
    let for_mcp = token(&issuer, &proxy, "alice").await;

    // Legacy SSE: the stream and its messages.
    let plain = Client::new(proxy.addr());
    let refused = plain.get_sse("/sse").await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(challenge(&refused.headers).contains("/.well-known/oauth-protected-resource/sse\""));
    let mut with_token = Client::new(proxy.addr());
    with_token.authorization = bearer(&for_mcp);
    let authorization = format!("Bearer {for_mcp}");
    let sse_headers = [
        ("accept", "text/event-stream"),
        ("authorization", authorization.as_str()),
    ];
    let mut stream = plain.send_to("/sse", Method::GET, &sse_headers, None).await;
    assert_eq!(stream.status, StatusCode::OK);
    let endpoint = within("the endpoint event", stream.next_event())
        .await
        .expect("an endpoint event")
        .data;
    let ping = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" }).to_string();
    let message_headers = [
        ("content-type", "application/json"),
        ("authorization", authorization.as_str()),
    ];
    let accepted = plain
        .send_to(&endpoint, Method::POST, &message_headers, Some(ping.into()))
        .await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED);
    let message = plain
        .send_to(
            &endpoint,
            Method::POST,
            &[("content-type", "application/json")],
            Some(
                json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" })
                    .to_string()
                    .into(),
            ),
        )
        .await;
    assert_eq!(
        message.status,
        StatusCode::UNAUTHORIZED,
        "each message needs one"
    );

    // WebSocket: at the upgrade.
    let upgrade =
        Ws::connect_with(proxy.addr(), "/mcp", &[("sec-websocket-protocol", "mcp")]).await;
    match upgrade {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED)
        }
        other => panic!("a WebSocket without a token: {:?}", other.map(|_| ())),
    }
    let mut ws = Ws::connect_with(
        proxy.addr(),
        "/mcp",
        &[
            ("sec-websocket-protocol", "mcp"),
            ("authorization", &authorization),
        ],
    )
    .await
    .expect("a WebSocket with a token");
    ws.initialize().await;

    // A 2026-07-28 request: a token on each.
    let modern = modern_request(7, "tools/list", json!({}), json!({}));
    let refused = plain.post_modern(&modern, &[]).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let served = plain
        .post_modern(&modern, &[("authorization", &authorization)])
        .await;
    assert_eq!(served.status, StatusCode::OK);

    // A gateway path is a resource of its own: /mcp's token is not for it.
    let mut gateway = Client::new(proxy.addr());
    gateway.path = "/servers/files/mcp".into();
    let refused = initialize_reply(&gateway).await;
    assert!(challenge(&refused.headers)
        .contains("/.well-known/oauth-protected-resource/servers/files/mcp\""));
    gateway.authorization = bearer(&for_mcp);
    let refused = initialize_reply(&gateway).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(challenge(&refused.headers).contains("not issued for this resource"));
    let own = issuer
        .token(
            "alice",
            &resource(&proxy, "/servers/files/mcp"),
            "mcp:tools",
        )
        .await;
    gateway.authorization = bearer(&own);
    gateway.initialize("2025-11-25").await;
    let document = metadata(
        &gateway,
        "/.well-known/oauth-protected-resource/servers/files/mcp",
    )
    .await;
    assert_eq!(document["resource"], resource(&proxy, "/servers/files/mcp"));
    proxy.stop().await;
}

#[tokio::test]
async fn a_websocket_closes_when_its_token_expires_and_its_session_resumes_with_a_new_one() {
    let issuer = AuthServer::start().await;
    let proxy = Proxy::start_with(|config| {
        config.auth.issuer = issuer.issuer().to_owned();
        config.auth.clock_skew = Duration::ZERO;
    })
    .await;
    let short = issuer
        .token_for("alice", &resource(&proxy, "/mcp"), "mcp:tools", 2)
        .await;
    let authorization = format!("Bearer {short}");
    let mut ws = Ws::connect_with(
        proxy.addr(),
        "/mcp",
        &[
            ("sec-websocket-protocol", "mcp"),
            ("authorization", &authorization),
        ],
    )
    .await
    .unwrap();
    let session = ws.start_session().await;
    ws.initialize().await;
    let (_, close) = within("the token to expire", ws.until_closed()).await;
    let close = close.expect("a close frame");
    assert_eq!(u16::from(close.code), 1008);
    assert!(close.reason.contains("token expired"), "{}", close.reason);

    let fresh = format!("Bearer {}", token(&issuer, &proxy, "alice").await);
    let mut again = Ws::connect_with(
        proxy.addr(),
        "/mcp",
        &[("sec-websocket-protocol", "mcp"), ("authorization", &fresh)],
    )
    .await
    .unwrap();
    let resumed = again.resume(&session, &Value::Null).await;
    assert_eq!(resumed["resumed"], true, "{resumed}");
    assert_eq!(
        again.call_tool("echo", json!({ "text": "back" })).await,
        "back"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_session_opened_on_one_replica_is_served_on_another_with_a_refreshed_token() {
    let issuer = AuthServer::start().await;
    let mut redis = Redis::start().await;
    let audience = "http://mcp.example/mcp";
    let flags = [
        "--auth-issuer",
        issuer.issuer(),
        "--auth-audience",
        audience,
    ];
    let a = Replica::start(&redis, "a", &flags).await;
    let b = Replica::start(&redis, "b", &flags).await;
    let mut on_a = Client::new(a.addr);
    on_a.authorization = bearer(&issuer.token("alice", audience, "mcp:tools").await);
    on_a.initialize("2025-11-25").await;

    let mut on_b = crate::harness::cluster::through(&on_a, &b);
    on_b.authorization = bearer(&issuer.token("alice", audience, "mcp:tools").await);
    assert_eq!(
        on_b.call_tool("echo", json!({ "text": "via b" })).await,
        "via b"
    );

    let mut bob = on_b.clone();
    bob.authorization = bearer(&issuer.token("bob", audience, "mcp:tools").await);
    let id = bob.next_id();
    let foreign = bob
        .post(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/list" }))
        .await;
    assert_eq!(foreign.status, StatusCode::NOT_FOUND);
    redis.stop().await;
}

/// A proxy that introspects opaque tokens for `audience`, with `adjust` on top; the secret
/// file it reads is removed when the handle drops.
async fn introspecting(
    issuer: &AuthServer,
    audience: &str,
    adjust: impl FnOnce(&mut Config),
) -> (Proxy, SecretFile) {
    let secret = SecretFile::new("client-secret", "proxy-secret");
    let source = secret.source();
    let proxy = Proxy::start_with(|config| {
        config.auth.issuer = issuer.issuer().to_owned();
        config.auth.audience = audience.to_owned();
        config.auth.introspection_endpoint = issuer.introspection_endpoint().to_owned();
        config.auth.client_id = "proxy".into();
        config.auth.client_secret = source;
        adjust(config);
    })
    .await;
    (proxy, secret)
}

/// `bytes` random bytes, in hex.
fn random_hex(bytes: usize) -> String {
    let mut random = vec![0u8; bytes];
    getrandom::fill(&mut random).unwrap();
    random.iter().map(|b| format!("{b:02x}")).collect()
}

/// The statuses `tokens` get for an initialize each, `at_once` at a time, and how long that
/// took.
async fn statuses_of(
    proxy: &Proxy,
    tokens: Vec<String>,
    at_once: usize,
) -> (Vec<StatusCode>, Duration) {
    use futures_util::StreamExt;
    let addr = proxy.addr();
    let started = std::time::Instant::now();
    let statuses = futures_util::stream::iter(tokens)
        .map(|token| async move {
            let mut client = Client::new(addr);
            client.authorization = bearer(&token);
            initialize_reply(&client).await.status
        })
        .buffer_unordered(at_once)
        .collect::<Vec<_>>();
    let statuses = within("every forged token's answer", statuses).await;
    (statuses, started.elapsed())
}

#[tokio::test]
async fn an_opaque_token_is_introspected_once_and_kept() {
    let issuer = AuthServer::start().await;
    let audience = "http://opaque.example/mcp";
    let (proxy, _secret) = introspecting(&issuer, audience, |_| {}).await;
    let opaque = issuer.token("alice", audience, "mcp:tools").await;
    assert!(!opaque.contains('.'), "an opaque token: {opaque}");
    let mut alice = Client::new(proxy.addr());
    alice.authorization = bearer(&opaque);
    alice.initialize("2025-11-25").await;
    alice.call_tool("echo", json!({ "text": "again" })).await;
    assert_eq!(issuer.requests().await["introspection"], 1);

    let mut unknown = Client::new(proxy.addr());
    unknown.authorization = bearer("not-a-token-the-issuer-knows");
    let refused = initialize_reply(&unknown).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(challenge(&refused.headers).contains("not active"));
    proxy.stop().await;
}

#[tokio::test]
async fn random_opaque_tokens_cost_the_issuer_a_bounded_number_of_introspections() {
    const RATE: f64 = 20.0;
    let issuer = AuthServer::start().await;
    let audience = "http://opaque.example/mcp";
    let (proxy, _secret) = introspecting(&issuer, audience, |config| {
        config.auth.introspections_per_second = RATE;
    })
    .await;

    // One random token, a thousand times; then a thousand distinct ones.
    let forged = random_hex(24);
    let (repeated, _) = statuses_of(&proxy, vec![forged; 1000], 50).await;
    let asked_once = issuer.requests_of("introspection").await;
    let forged: Vec<String> = (0..1000).map(|_| random_hex(24)).collect();
    let (distinct, took) = statuses_of(&proxy, forged, 50).await;
    let asked = issuer.requests_of("introspection").await - asked_once;
    eprintln!(
        "introspections: {asked_once} for 1000 requests with one random opaque token, \
         {asked} for 1000 distinct ones (in {:.2} s)",
        took.as_secs_f64()
    );

    // The one token: the issuer is asked once.
    assert!(repeated.iter().all(|s| *s == StatusCode::UNAUTHORIZED));
    assert_eq!(asked_once, 1);
    // The distinct ones: at most a second's worth and the rate after it; the others are told
    // to come back (503), never let in.
    assert!(distinct
        .iter()
        .all(|s| [StatusCode::UNAUTHORIZED, StatusCode::SERVICE_UNAVAILABLE].contains(s)));
    let allowed = (RATE * (1.0 + took.as_secs_f64())).ceil() as u64 + 1;
    assert!(
        asked <= allowed,
        "{asked} introspections, {allowed} allowed"
    );
    let throttled = distinct
        .iter()
        .filter(|s| **s == StatusCode::SERVICE_UNAVAILABLE)
        .count() as u64;
    assert_eq!(
        proxy.metric("mcp_proxy_auth_refused_requests_total{reason=\"throttled\"}"),
        throttled
    );
    assert_eq!(
        proxy.metric("mcp_proxy_auth_introspections_total"),
        asked_once + asked
    );

    // A genuine token gets in once the budget allows.
    let opaque = issuer.token("alice", audience, "mcp:tools").await;
    let mut alice = Client::new(proxy.addr());
    alice.authorization = bearer(&opaque);
    until(
        "the genuine token to be introspected",
        StatusCode::OK,
        || async { initialize_reply(&alice).await.status },
    )
    .await;
    proxy.stop().await;
}

/// Runs the real binary with `args`, expects it to refuse to start, and returns what it said.
async fn refused_start(args: &[&str]) -> String {
    let output = within(
        "the proxy to refuse to start",
        tokio::process::Command::new(DEMO)
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap();
    assert!(!output.status.success(), "started: {output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn the_audience_a_token_must_name_never_follows_the_host() {
    let issuer = AuthServer::start().await;
    let iss = issuer.issuer();
    // Any Host allowed and no public URL: the resource would be whatever a request's Host
    // says, so a token the victim gave http://evil.example would pass with Host: evil.example.
    let message = refused_start(&[
        "--listen",
        "127.0.0.1:0",
        "--allowed-host",
        "*",
        "--auth-issuer",
        iss,
    ])
    .await;
    assert!(message.contains("auth.public_url"), "{message}");
    // Beyond loopback (TEST-NET-1, never this machine's: nothing listens) the same.
    let message = refused_start(&["--listen", "192.0.2.1:8787", "--auth-issuer", iss]).await;
    assert!(message.contains("auth.public_url"), "{message}");

    // With the URL clients dial configured, a token for another server is refused whatever
    // Host it comes with, and the metadata names the configured resource. (Its log pipe stays
    // open: a request that logs to a closed stderr goes unanswered.)
    let (mut proxy, addr, _logs, _) = spawn_proxy(&[
        "--listen",
        "127.0.0.1:0",
        "--allowed-host",
        "*",
        "--auth-issuer",
        iss,
        "--auth-public-url",
        "http://mcp.example",
    ])
    .await;
    let mut client = Client::new(addr);
    client.extra_headers = vec![("host".into(), "evil.example".into())];
    let stolen = issuer
        .token("alice", "http://evil.example/mcp", "mcp:tools")
        .await;
    client.authorization = bearer(&stolen);
    let reply = initialize_reply(&client).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert!(
        challenge(&reply.headers).contains(
            "resource_metadata=\"http://mcp.example/.well-known/oauth-protected-resource/mcp\""
        ),
        "{}",
        challenge(&reply.headers)
    );
    let document = client
        .send_to(
            "/.well-known/oauth-protected-resource/mcp",
            Method::GET,
            &[("host", "evil.example")],
            None,
        )
        .await
        .json()
        .await;
    assert_eq!(document["resource"], "http://mcp.example/mcp");
    let own = issuer
        .token("alice", "http://mcp.example/mcp", "mcp:tools")
        .await;
    client.authorization = bearer(&own);
    client.initialize("2025-11-25").await;
    proxy.kill().await.unwrap();

    // On loopback with loopback Hosts only, the Host can only name this machine: it starts,
    // and the resource is the URL the client dialled.
    let (mut proxy, addr, _logs, _) =
        spawn_proxy(&["--listen", "127.0.0.1:0", "--auth-issuer", iss]).await;
    let mut client = Client::new(addr);
    let own = issuer
        .token("alice", &format!("http://{addr}/mcp"), "mcp:tools")
        .await;
    client.authorization = bearer(&own);
    client.initialize("2025-11-25").await;
    proxy.kill().await.unwrap();
}
