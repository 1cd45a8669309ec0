//! The listener over TLS, with certificates made at test time and curl as the client: sessions
//! over https://, plain HTTP refused, and with a clients' CA, a client without a certificate
//! it signed refused at the handshake.

use crate::harness::tls::Certificates;
use crate::harness::Proxy;

use crate::harness::tls::{curl_initialize, curl_post, session_of};

async fn tls_proxy(certificates: &Certificates, client_ca: bool) -> Proxy {
    let (cert, key, ca) = (
        certificates.path("server.pem"),
        certificates.path("server-key.pem"),
        certificates.path("ca.pem"),
    );
    Proxy::start_with(|c| {
        c.tls.cert_file = Some(cert);
        c.tls.key_file = Some(key);
        c.tls.client_ca_file = client_ca.then_some(ca);
    })
    .await
}

#[tokio::test]
async fn sessions_are_served_over_https_and_plain_http_is_refused() {
    let certificates = Certificates::make();
    let proxy = tls_proxy(&certificates, false).await;
    let url = format!("https://127.0.0.1:{}/mcp", proxy.addr().port());
    let ca = certificates.path("ca.pem");
    let answered = curl_initialize(&url, &["--cacert", ca.to_str().unwrap()]).await;
    let text = String::from_utf8_lossy(&answered.stdout);
    assert!(
        answered.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&answered.stderr)
    );
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("mcp-session-id:"),
        "{text}"
    );
    assert!(text.contains("\"serverInfo\""), "{text}");

    let untrusting = curl_initialize(&url, &[]).await;
    assert!(
        !untrusting.status.success(),
        "a client that does not trust the CA stops"
    );
    let plain = curl_initialize(
        &format!("http://127.0.0.1:{}/mcp", proxy.addr().port()),
        &[],
    )
    .await;
    assert!(
        !String::from_utf8_lossy(&plain.stdout).contains("200 OK"),
        "no plain HTTP"
    );
    assert!(
        proxy.metric("mcp_proxy_http_tls_handshakes_failed_total") >= 2,
        "both counted"
    );
}

#[tokio::test]
async fn with_a_clients_ca_a_client_without_its_certificate_is_refused_at_the_handshake() {
    let certificates = Certificates::make();
    let proxy = tls_proxy(&certificates, true).await;
    let url = format!("https://127.0.0.1:{}/mcp", proxy.addr().port());
    let ca = certificates.path("ca.pem");
    let ca = ca.to_str().unwrap();
    let without = curl_initialize(&url, &["--cacert", ca]).await;
    assert!(!without.status.success(), "refused");
    assert!(
        !String::from_utf8_lossy(&without.stdout).contains("HTTP/1.1"),
        "nothing answered at the HTTP level: the handshake refused it"
    );
    let (cert, key) = (
        certificates.path("client.pem"),
        certificates.path("client-key.pem"),
    );
    let with = curl_initialize(
        &url,
        &[
            "--cacert",
            ca,
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
    )
    .await;
    let text = String::from_utf8_lossy(&with.stdout);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{text}{}",
        String::from_utf8_lossy(&with.stderr)
    );
}

#[tokio::test]
async fn new_certificate_files_are_taken_for_new_connections_and_sessions_go_on() {
    let certificates = Certificates::make();
    let dir = certificates.path("mounted");
    std::fs::create_dir_all(&dir).unwrap();
    let mount = |cert: &str, key: &str| {
        // As a Secret is rotated: the new files written beside, then renamed over the old.
        for (from, to) in [(cert, "tls.crt"), (key, "tls.key")] {
            let staged = dir.join(format!("{to}.new"));
            std::fs::copy(certificates.path(from), &staged).unwrap();
            std::fs::rename(&staged, dir.join(to)).unwrap();
        }
    };
    mount("server.pem", "server-key.pem");
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let proxy = Proxy::start_with(|c| {
        c.tls.cert_file = Some(cert);
        c.tls.key_file = Some(key);
    })
    .await;
    let url = format!("https://127.0.0.1:{}/mcp", proxy.addr().port());
    let (first_ca, rotated_ca) = (
        certificates.path("ca.pem"),
        certificates.path("other-ca.pem"),
    );
    let (first_ca, rotated_ca) = (first_ca.to_str().unwrap(), rotated_ca.to_str().unwrap());
    let opened = curl_initialize(&url, &["--cacert", first_ca]).await;
    let text = String::from_utf8_lossy(&opened.stdout).to_string();
    let session = session_of(&text);

    mount("rotated.pem", "rotated-key.pem");
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"rotated"}}}"#;
    let session_header = format!("mcp-session-id: {session}");
    let headers = [
        "-H",
        &session_header,
        "-H",
        "mcp-protocol-version: 2025-11-25",
    ];
    let mut args = vec!["--cacert", rotated_ca];
    args.extend(headers);
    // The new certificate is taken within a second of the change: asked until it is.
    crate::harness::until("the rotated certificate", true, || async {
        curl_post(&url, call, &args).await.status.success()
    })
    .await;
    let answered = curl_post(&url, call, &args).await;
    let text = String::from_utf8_lossy(&answered.stdout);
    assert!(text.contains("\"rotated\""), "the session goes on: {text}");
    let old = curl_initialize(&url, &["--cacert", first_ca]).await;
    assert!(
        !old.status.success(),
        "the old certificate is no longer shown"
    );
    assert!(
        proxy.metric("mcp_proxy_http_tls_reloads_total") >= 1,
        "counted"
    );
}

#[tokio::test]
async fn the_official_clients_work_over_the_tls_listener_with_their_own_ways_to_trust_a_ca() {
    let certificates = Certificates::make();
    let proxy = tls_proxy(&certificates, false).await;
    let url = format!("https://127.0.0.1:{}/mcp", proxy.addr().port());
    let ca = certificates.path("ca.pem");
    // TypeScript: tools, a subscription's update, a stream resumed with Last-Event-ID.
    let report = crate::harness::sdk_client_with_env(
        &url,
        &["demo", "resume"],
        &[("NODE_EXTRA_CA_CERTS", &ca)],
    )
    .await;
    assert_eq!(report["ok"], true, "{report}");
    // Python: the same, trusting the CA through SSL_CERT_FILE.
    let mut python = crate::harness::python_script("client.py");
    python.arg(&url).env("SSL_CERT_FILE", &ca);
    let output = crate::harness::stdout_of("the Python client over TLS", &mut python).await;
    let report: serde_json::Value = serde_json::from_slice(&output).expect("a JSON report");
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["resumed"], "Reconnection test completed", "{report}");
}

/// With `principal_from_client_cert`, a client certificate's subject is who its requests act
/// for: a session opened with one certificate is found again with it, on a new connection, and
/// is no one's with another certificate of the same CA; a request naming a principal in a
/// header changes nothing.
#[tokio::test]
async fn a_client_certificates_subject_is_the_principal_its_sessions_belong_to() {
    let certificates = Certificates::make();
    let (cert, key, ca) = (
        certificates.path("server.pem"),
        certificates.path("server-key.pem"),
        certificates.path("ca.pem"),
    );
    let proxy = Proxy::start_with(|c| {
        c.tls.cert_file = Some(cert);
        c.tls.key_file = Some(key);
        c.tls.client_ca_file = Some(ca);
        c.tls.principal_from_client_cert = true;
    })
    .await;
    let url = format!("https://127.0.0.1:{}/mcp", proxy.addr().port());
    let ca = certificates.arg("ca.pem");
    let shown = |name: &str| {
        vec![
            "--cacert".to_owned(),
            ca.clone(),
            "--cert".to_owned(),
            certificates.arg(&format!("{name}.pem")),
            "--key".to_owned(),
            certificates.arg(&format!("{name}-key.pem")),
        ]
    };
    let opened = curl_initialize(&url, &as_args(&shown("client"))).await;
    let session = session_of(&String::from_utf8_lossy(&opened.stdout));
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"mine"}}}"#;
    let in_session = |name: &str, extra: &[&str]| {
        let mut args = shown(name);
        args.extend(["-H".to_owned(), format!("mcp-session-id: {session}")]);
        args.extend([
            "-H".to_owned(),
            "mcp-protocol-version: 2025-11-25".to_owned(),
        ]);
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };

    // The same certificate, a new connection: the session is its own.
    let again = curl_post(&url, call, &as_args(&in_session("client", &[]))).await;
    let again = String::from_utf8_lossy(&again.stdout);
    assert!(
        again.starts_with("HTTP/1.1 200") && again.contains("\"mine\""),
        "{again}"
    );

    // Another certificate of the same CA, whatever its requests say: not its session.
    let claims = [
        "-H",
        "x-authenticated-user: CN=client",
        "-H",
        "authorization: Bearer x",
    ];
    for extra in [&[][..], &claims] {
        let bob = curl_post(&url, call, &as_args(&in_session("bob", extra))).await;
        let bob = String::from_utf8_lossy(&bob.stdout);
        assert!(bob.starts_with("HTTP/1.1 404"), "{bob}");
    }
    // Nor does a header change the first certificate's principal.
    let first = curl_post(&url, call, &as_args(&in_session("client", &claims))).await;
    let first = String::from_utf8_lossy(&first.stdout);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
}

fn as_args(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}
