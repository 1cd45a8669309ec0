//! The hop between replicas over TLS: replicas on Redis whose listeners speak TLS advertise
//! https:// and reach each other trusting the cluster's CA; a replica that does not trust it
//! cannot reach the owner, and says so rather than serving anything unverified.

use crate::harness::cluster::{Redis, Replica};
use crate::harness::tls::{curl_initialize, curl_post, session_of, Certificates};

const ECHO: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hopped"}}}"#;

#[tokio::test]
async fn replicas_over_https_hop_to_the_owner_trusting_the_clusters_ca() {
    let certificates = Certificates::make();
    let redis = Redis::start().await;
    let (cert, key, ca) = (
        certificates.path("server.pem"),
        certificates.path("server-key.pem"),
        certificates.path("ca.pem"),
    );
    let (cert, key, ca) = (
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
        ca.to_str().unwrap(),
    );
    let tls = [
        "--tls-cert",
        cert,
        "--tls-key",
        key,
        "--cluster-ca-file",
        ca,
    ];
    let a = Replica::start(&redis, "a", &tls).await;
    let b = Replica::start(&redis, "b", &tls).await;
    let untrusting = Replica::start(&redis, "c", &tls[..4]).await;

    let on_a = format!("https://{}/mcp", a.addr);
    let opened = curl_initialize(&on_a, &["--cacert", ca]).await;
    let session = session_of(&String::from_utf8_lossy(&opened.stdout));
    let header = format!("mcp-session-id: {session}");
    let args = [
        "--cacert",
        ca,
        "-H",
        &header,
        "-H",
        "mcp-protocol-version: 2025-11-25",
    ];

    // b does not own the session: it hops to a, over TLS.
    let on_b = curl_post(&format!("https://{}/mcp", b.addr), ECHO, &args).await;
    let answer = String::from_utf8_lossy(&on_b.stdout);
    assert!(answer.contains("\"hopped\""), "{answer}");

    // c trusts the platform's roots only: a's certificate is not one of theirs.
    let on_c = curl_post(&format!("https://{}/mcp", untrusting.addr), ECHO, &args).await;
    let answer = String::from_utf8_lossy(&on_c.stdout);
    assert!(!answer.contains("\"hopped\""), "{answer}");
    assert!(
        answer.contains("HTTP/1.1 503") || answer.contains("\"error\""),
        "an error, not an answer: {answer}"
    );
}
