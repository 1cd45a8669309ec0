//! The hop between replicas over TLS: replicas on Redis whose listeners speak TLS advertise
//! https:// and reach each other trusting the cluster's CA; a replica that does not trust it
//! cannot reach the owner, and says so rather than serving anything unverified.

use crate::harness::cluster::{Redis, Replica};
use crate::harness::tls::{curl_initialize, curl_post, session_of, Certificates, INITIALIZE};

const ECHO: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hopped"}}}"#;

#[tokio::test]
async fn replicas_over_https_hop_to_the_owner_trusting_the_clusters_ca() {
    let certificates = Certificates::make();
    let redis = Redis::start().await;
    let (cert, key, ca) = (
        certificates.arg("server.pem"),
        certificates.arg("server-key.pem"),
        certificates.arg("ca.pem"),
    );
    let (cert, key, ca) = (cert.as_str(), key.as_str(), ca.as_str());
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

/// Replicas as Kubernetes runs them over TLS: each advertises its address (here 127.0.0.1, a
/// pod's IP there), all share one certificate naming their Service (`mcp-proxy`), verified by
/// that name (`--cluster-server-name`), and each asks its peers for a certificate from the
/// cluster's CA (mutual TLS between replicas: the one they share serves as both).
#[tokio::test]
async fn replicas_sharing_one_certificate_verify_each_other_by_the_services_name() {
    let certificates = Certificates::make();
    let redis = Redis::start().await;
    let (cert, key, ca) = (
        certificates.arg("replica.pem"),
        certificates.arg("replica-key.pem"),
        certificates.arg("ca.pem"),
    );
    let flags = certificates.replica_flags();
    let mutual = ["--tls-client-ca", &ca, "--allowed-host", "mcp-proxy"];
    let named: Vec<&str> = flags.iter().map(String::as_str).chain(mutual).collect();
    let a = Replica::start(&redis, "a", &named).await;
    let b = Replica::start(&redis, "b", &named).await;
    // c verifies the address it dials, which the shared certificate does not name.
    let unnamed: Vec<&str> = flags[..6]
        .iter()
        .map(String::as_str)
        .chain(mutual)
        .collect();
    let by_address = Replica::start(&redis, "c", &unnamed).await;

    // Clients reach the replicas by the Service's name, with a certificate of the CA's.
    let curl = |replica: &Replica, body: &'static str, headers: Vec<String>| {
        let port = replica.addr.port();
        let url = format!("https://mcp-proxy:{port}/mcp");
        let resolve = format!("mcp-proxy:{port}:127.0.0.1");
        let (ca, cert, key) = (ca.clone(), cert.clone(), key.clone());
        async move {
            let mut args = vec!["--cacert", &ca, "--cert", &cert, "--key", &key];
            args.extend(["--resolve", &resolve]);
            for header in &headers {
                args.extend(["-H", header]);
            }
            let answer = curl_post(&url, body, &args).await;
            String::from_utf8_lossy(&answer.stdout).into_owned()
        }
    };
    let opened = curl(&a, INITIALIZE, Vec::new()).await;
    let headers = vec![
        format!("mcp-session-id: {}", session_of(&opened)),
        "mcp-protocol-version: 2025-11-25".to_owned(),
    ];

    let on_b = curl(&b, ECHO, headers.clone()).await;
    assert!(on_b.contains("\"hopped\""), "{on_b}");
    let on_c = curl(&by_address, ECHO, headers).await;
    assert!(!on_c.contains("\"hopped\""), "{on_c}");
    assert!(on_c.starts_with("HTTP/1.1 503"), "{on_c}");
    assert!(
        on_c.contains("not valid for name \\\"127.0.0.1\\\""),
        "the certificate's names are what was wrong: {on_c}"
    );
}
