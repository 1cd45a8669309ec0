//! The replicas' hop is signed, never authenticated by the cluster secret itself: two real
//! replicas on a real Redis, the owner reached through a recording relay. What crosses the wire
//! holds a signature and not the secret; a hop that carries only the secret, an old signature
//! (a replay), or a body it was not signed for is refused with 403; a short secret stops the
//! proxy at start with how to make a good one.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use common::cluster::{recording_relay, Redis, Replica, SECRET};
use common::{Client, DEMO};
use http::{Method, StatusCode};
use mcp_session_proxy::hop::{self, Signed, PRINCIPAL_HEADER, SIGNATURE_HEADER};
use mcp_session_proxy::ids::Principal;
use mcp_session_proxy::keys::Keys;
use serde_json::json;
use tokio::net::TcpListener;

#[tokio::test]
async fn hops_are_signed_never_carry_the_secret_and_unsigned_or_replayed_ones_are_refused() {
    let redis = Redis::start().await;
    let relay = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let advertised = format!("http://{}", relay.local_addr().unwrap());
    let target = Arc::new(Mutex::new(None));
    let recorded = recording_relay(relay, target.clone());
    let a = Replica::start(&redis, "a", &["--advertise", &advertised]).await;
    *target.lock().unwrap() = Some(a.addr);
    let b = Replica::start(&redis, "b", &[]).await;

    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    let session = on_a.session.clone().unwrap();
    let mut on_b = Client::new(b.addr);
    on_b.session = Some(session.clone());
    assert_eq!(
        on_b.call_tool("echo", json!({"text": "via b"})).await,
        "via b"
    );

    let wire = String::from_utf8_lossy(&recorded.lock().unwrap()).into_owned();
    assert!(
        wire.contains(&format!("/internal/default/sessions/{session}")),
        "the hop went through the relay: {wire}"
    );
    assert!(wire.contains(SIGNATURE_HEADER), "{wire}");
    assert!(
        wire.contains(PRINCIPAL_HEADER),
        "the hop names its principal: {wire}"
    );
    assert!(
        !wire.contains(SECRET),
        "the secret crossed the wire: {wire}"
    );

    // Hops made by hand, straight to the owner.
    let path = format!("/internal/default/sessions/{session}");
    let body =
        Bytes::from(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    let key = Keys::derived(SECRET).hop;
    let signed = |at: SystemTime, body: &[u8]| {
        Signed {
            method: "POST",
            path: &path,
            body,
            node: "a",
        }
        .sign(&key, at)
    };
    let hop = |headers: Vec<(&'static str, String)>, body: Bytes| {
        let owner = Client::new(a.addr);
        let path = path.clone();
        async move {
            let mut all = vec![("content-type", "application/json".to_owned())];
            all.extend(headers);
            let headers: Vec<(&str, &str)> = all.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let reply = owner
                .send_to(&path, Method::POST, &headers, Some(body))
                .await;
            let status = reply.status;
            (
                status,
                String::from_utf8_lossy(&reply.bytes().await).into_owned(),
            )
        }
    };
    let for_a = ("x-mcp-proxy-for-node", "a".to_owned());

    let (status, text) = hop(
        vec![for_a.clone(), ("x-mcp-proxy-secret", SECRET.to_owned())],
        body.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "the secret alone: {text}");

    let replayed = signed(SystemTime::now() - Duration::from_secs(120), &body);
    let (status, text) = hop(
        vec![for_a.clone(), (SIGNATURE_HEADER, replayed)],
        body.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    assert!(text.contains("clock"), "{text}");

    let fresh = signed(SystemTime::now(), &body);
    let tampered = Bytes::from(
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "forged"}}})
        .to_string(),
    );
    let (status, text) = hop(
        vec![for_a.clone(), (SIGNATURE_HEADER, fresh.clone())],
        tampered,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "another body: {text}");

    // The principal a hop names is bound to its signature, and must be the session's.
    let anonymous = Principal::anonymous();
    let named = |principal: &str| hop::principal_header(&key, &fresh, principal);
    let forged = format!("{};{}", anonymous.as_str(), "A".repeat(24));
    for (header, expected) in [
        (forged, StatusCode::FORBIDDEN),
        (named("sub:0123456789abcdef"), StatusCode::NOT_FOUND),
    ] {
        let headers = vec![
            for_a.clone(),
            (SIGNATURE_HEADER, fresh.clone()),
            (PRINCIPAL_HEADER, header),
        ];
        let (status, text) = hop(headers, body.clone()).await;
        assert_eq!(status, expected, "{text}");
    }

    let headers = vec![
        for_a,
        (SIGNATURE_HEADER, fresh.clone()),
        (PRINCIPAL_HEADER, named(anonymous.as_str())),
    ];
    let (status, text) = hop(headers, body).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a hop signed now with the derived key: {text}"
    );
    drop((a, b));
}

#[tokio::test]
async fn a_secret_shorter_than_32_bytes_is_refused_with_how_to_make_one() {
    let output = tokio::process::Command::new(DEMO)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "redis://127.0.0.1:1/0",
        ])
        .env("MCP_PROXY_CLUSTER_SECRET", "short-secret")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cluster.secret") && stderr.contains("openssl rand -hex 32"),
        "{stderr}"
    );
}

#[test]
fn an_embedder_gets_no_redis_store_without_a_secret() {
    let config = mcp_session_proxy::config::Config {
        store: "redis://127.0.0.1:6379/0".into(),
        ..Default::default()
    };
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("cluster.secret"), "{error}");
}
