//! https:// servers behind the proxy: a real TLS server (nginx terminating TLS with
//! certificates made at test time) in front of a real MCP server (the demo over HTTP). Trusted
//! through a private CA, reached under another name, with a client certificate; an untrusted
//! issuer, a wrong name and a missing client certificate each refused in words that say which.

use serde_json::{json, Value};

use crate::harness::tls::{Certificates, TlsFront};
use crate::harness::{Client, Proxy};

/// What a client is answered when it opens a session: the whole body, as text.
async fn initialize_answer(proxy: &Proxy) -> (http::StatusCode, String) {
    let reply = Client::new(proxy.addr())
        .post(
            &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": { "name": "tls-test", "version": "1" } } }),
        )
        .await;
    let status = reply.status;
    let body: Value = reply.response().await;
    (status, body.to_string())
}

#[tokio::test]
async fn an_https_server_signed_by_a_private_ca_serves_sessions_on_reused_connections() {
    let certificates = Certificates::make();
    let server = Proxy::start().await; // the demo over plain HTTP, behind the TLS server
    let front = TlsFront::start(&certificates, server.addr(), false).await;
    let proxy = Proxy::in_front_of(front.url(), |c| {
        c.upstream.tls.ca_file = Some(certificates.path("ca.pem"));
        c.upstream.tls.platform_roots = false;
    })
    .await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    assert_eq!(
        client
            .call_tool("echo", json!({ "text": "over tls" }))
            .await,
        "over tls"
    );
    for n in 1..=20 {
        assert_eq!(client.call_tool("counter", json!({})).await, n.to_string());
    }
    // Connections, and so handshakes, are reused: not one per call.
    let (served, connections) = (front.requests_served(), front.connections_used());
    assert!(served >= 22, "{served} requests");
    assert!(
        connections <= 4,
        "{connections} connections for {served} requests"
    );
}

#[tokio::test]
async fn a_server_whose_issuer_is_not_trusted_is_refused_saying_so() {
    let certificates = Certificates::make();
    let server = Proxy::start().await;
    let front = TlsFront::start(&certificates, server.addr(), false).await;
    let proxy = Proxy::in_front_of(front.url(), |c| {
        c.upstream.tls.ca_file = Some(certificates.path("other-ca.pem"));
        c.upstream.tls.platform_roots = false;
    })
    .await;
    let (_, answer) = initialize_answer(&proxy).await;
    assert!(answer.contains("does not trust"), "{answer}");
    assert_eq!(
        server.metric("mcp_proxy_sessions_open"),
        0,
        "nothing reached it"
    );
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused_saying_so() {
    let certificates = Certificates::make();
    let server = Proxy::start().await;
    let front = TlsFront::start(&certificates, server.addr(), false).await;
    let proxy = Proxy::in_front_of(front.url(), |c| {
        c.upstream.tls.ca_file = Some(certificates.path("ca.pem"));
        c.upstream.tls.server_name = Some("elsewhere.example".into());
    })
    .await;
    let (_, answer) = initialize_answer(&proxy).await;
    assert!(answer.contains("not valid for the name"), "{answer}");
    assert!(
        proxy.metric("mcp_proxy_upstream_tls_failures_total") >= 1,
        "counted"
    );
    // The same certificate under the name it was made for: verified.
    let named = Proxy::in_front_of(front.url(), |c| {
        c.upstream.tls.ca_file = Some(certificates.path("ca.pem"));
        c.upstream.tls.server_name = Some("localhost".into());
    })
    .await;
    let mut client = named.initialized_client("2025-11-25").await;
    assert_eq!(
        client.call_tool("echo", json!({ "text": "named" })).await,
        "named"
    );
}

#[tokio::test]
async fn a_server_that_wants_a_client_certificate_gets_one_when_configured() {
    let certificates = Certificates::make();
    let server = Proxy::start().await;
    let front = TlsFront::start(&certificates, server.addr(), true).await;
    let without = Proxy::in_front_of(front.url(), |c| {
        c.upstream.tls.ca_file = Some(certificates.path("ca.pem"));
    })
    .await;
    let (_, answer) = initialize_answer(&without).await;
    assert!(
        answer.contains("answered HTTP 400"),
        "nginx refuses the request without one: {answer}"
    );
    let with = Proxy::in_front_of(front.url(), |c| {
        c.upstream.tls.ca_file = Some(certificates.path("ca.pem"));
        c.upstream.tls.client_cert_file = Some(certificates.path("client.pem"));
        c.upstream.tls.client_key_file = Some(certificates.path("client-key.pem"));
    })
    .await;
    let mut client = with.initialized_client("2025-11-25").await;
    assert_eq!(
        client.call_tool("echo", json!({ "text": "mutual" })).await,
        "mutual"
    );
}

#[tokio::test]
async fn an_expired_certificate_is_refused_saying_so() {
    let certificates = Certificates::make();
    let server = Proxy::start().await;
    let front = TlsFront::serving(&certificates, "expired", server.addr(), false).await;
    let proxy = Proxy::in_front_of(front.url(), |c| {
        c.upstream.tls.ca_file = Some(certificates.path("ca.pem"));
    })
    .await;
    let (_, answer) = initialize_answer(&proxy).await;
    assert!(answer.contains("has expired"), "{answer}");
}

#[tokio::test]
async fn the_revision_of_an_https_server_is_probed_over_tls() {
    let certificates = Certificates::make();
    let server = Proxy::start().await;
    let front = TlsFront::start(&certificates, server.addr(), false).await;
    let url = front.url();
    let proxy = Proxy::start_with(|c| {
        c.upstream.stdio = None;
        c.upstream.http = Some(url);
        c.upstream.protocol = mcp_session_proxy::wire::era::Era::Auto;
        c.upstream.tls.ca_file = Some(certificates.path("ca.pem"));
    })
    .await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    assert_eq!(
        client.call_tool("echo", json!({ "text": "probed" })).await,
        "probed"
    );
}

#[tokio::test]
async fn a_legacy_sse_server_over_https_streams_and_takes_posts() {
    let certificates = Certificates::make();
    let server = Proxy::start().await; // its legacy front at /sse
    let front = TlsFront::start(&certificates, server.addr(), false).await;
    let url = format!("https://{}/sse", front.addr);
    let proxy = Proxy::start_with(|c| {
        c.upstream.stdio = None;
        c.upstream.sse = Some(url);
        c.upstream.tls.ca_file = Some(certificates.path("ca.pem"));
    })
    .await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    assert_eq!(client.call_tool("counter", json!({})).await, "2");
}

#[tokio::test]
async fn a_gateway_server_has_tls_settings_of_its_own() {
    let certificates = Certificates::make();
    let server = Proxy::start().await;
    let front = TlsFront::start(&certificates, server.addr(), true).await;
    let mut tickets = mcp_session_proxy::config::ServerConfig::default();
    tickets.upstream.http = Some(front.url());
    tickets.upstream.protocol = mcp_session_proxy::wire::era::Era::Legacy;
    tickets.upstream.tls.ca_file = Some(certificates.path("ca.pem"));
    tickets.upstream.tls.client_cert_file = Some(certificates.path("client.pem"));
    tickets.upstream.tls.client_key_file = Some(certificates.path("client-key.pem"));
    let proxy = Proxy::start_with(|c| {
        c.servers.insert("tickets".into(), tickets);
    })
    .await;
    let mut client = proxy.client();
    client.path = "/servers/tickets/mcp".into();
    client.initialize("2025-11-25").await;
    assert_eq!(
        client.call_tool("echo", json!({ "text": "gateway" })).await,
        "gateway"
    );
    // The default server's settings are its own: the demo over stdio, no TLS.
    let mut default = proxy.initialized_client("2025-11-25").await;
    assert_eq!(
        default.call_tool("echo", json!({ "text": "stdio" })).await,
        "stdio"
    );
}
