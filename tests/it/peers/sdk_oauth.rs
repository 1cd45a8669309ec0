//! The official clients against a proxy that is an OAuth 2.1 resource server (`[auth]`), with a
//! real authorization server (oidc-provider, tests/node/auth_server.mjs): the TypeScript SDK 1.x
//! and the 2026-07-28 TypeScript client authorize themselves with their own client-credentials
//! providers (the 401, RFC 9728 discovery, the issuer's metadata and an RFC 8707 token request
//! are theirs), and keep their session when they get a new token mid-session; the Python SDK
//! sends a bearer token it is given, in both eras, and without one is refused with a 401.

use std::time::Duration;

use crate::harness::auth_server::AuthServer;
use crate::harness::{within, Proxy};
use serde_json::{json, Value};

/// A proxy accepting only `issuer`'s tokens.
async fn guarded(issuer: &AuthServer) -> Proxy {
    Proxy::start_with(|c| c.auth.issuer = issuer.issuer().to_owned()).await
}

/// The same, closing streams mid-call (SEP-1699 polling), so clients must resume them.
async fn guarded_and_polling(issuer: &AuthServer) -> Proxy {
    Proxy::start_with(|c| {
        c.auth.issuer = issuer.issuer().to_owned();
        c.http.sse_close_after = Duration::from_millis(500);
        c.http.json_wait = Duration::from_millis(100);
    })
    .await
}

fn mcp_url(proxy: &Proxy) -> String {
    format!("http://{}/mcp", proxy.addr())
}

/// What the proxy's 401 without a token says: where its resource metadata is.
fn challenge(proxy: &Proxy) -> String {
    format!(
        "Bearer resource_metadata=\"http://{}/.well-known/oauth-protected-resource/mcp\"",
        proxy.addr()
    )
}

/// How many token requests the issuer has answered.
async fn token_requests(issuer: &AuthServer) -> u64 {
    issuer.requests().await["token"].as_u64().unwrap()
}

/// Runs a TypeScript client script (`oauth_client.mjs`, `modern_oauth_client.mjs`) as `client`,
/// who knows only its id, its secret and which issuer it trusts.
async fn typescript(
    script: &str,
    proxy: &Proxy,
    issuer: &AuthServer,
    client: &str,
    mode: &[&str],
) -> Value {
    let secret = format!("{client}-secret");
    let mut args = vec![client, secret.as_str(), issuer.issuer()];
    args.extend(mode);
    crate::harness::pinned_node_client(script, &mcp_url(proxy), &args).await
}

/// The SDK found its way to a token on its own: a 401 naming the metadata, the metadata, the
/// issuer's metadata, then one client-credentials request for exactly this resource.
fn assert_authorized_itself(report: &Value, proxy: &Proxy) {
    assert_eq!(report["firstStatus"], 401, "{report}");
    assert_eq!(report["firstChallenge"], challenge(proxy), "{report}");
    let discovery = report["discovery"].as_array().unwrap();
    assert_eq!(
        discovery[..2],
        [
            json!("/.well-known/oauth-protected-resource/mcp 200"),
            json!("/.well-known/oauth-authorization-server 200")
        ],
        "{report}"
    );
    let request = &report["tokenRequest"];
    assert_eq!(request["grant"], "client_credentials", "{report}");
    assert_eq!(
        request["resource"],
        mcp_url(proxy),
        "an RFC 8707 resource indicator"
    );
    assert_eq!(request["scope"], "mcp:tools");
    assert_eq!(request["scheme"], "Basic", "client_secret_basic");
    assert_eq!(request["status"], 200, "{report}");
}

#[tokio::test]
async fn typescript_sdk_authorizes_itself_with_client_credentials_and_resumes_its_streams() {
    let issuer = AuthServer::start().await;
    let proxy = guarded_and_polling(&issuer).await;
    let before = token_requests(&issuer).await;
    let report = typescript("oauth_client.mjs", &proxy, &issuer, "alice", &["flow"]).await;

    assert_authorized_itself(&report, &proxy);
    assert_eq!(report["tokenRequests"], 1, "{report}");
    assert_eq!(
        report["unauthorized"], 1,
        "one 401, then the token: {report}"
    );
    assert_eq!(
        token_requests(&issuer).await - before,
        1,
        "the issuer saw it"
    );
    let tools = report["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("echo")) && tools.contains(&json!("progress")));
    // The progress call outlives its stream (closed after 500 ms): its notifications and its
    // answer arrive on the stream the SDK resumed with Last-Event-ID, with its token.
    assert_eq!(report["progressText"], "done after 4 steps");
    assert_eq!(report["progress"], 4, "every progress notification");
    assert_eq!(report["resumed"], "Reconnection test completed");
    assert!(report["resumes"].as_u64().unwrap() >= 2, "{report}");
    assert!(proxy.metric("mcp_proxy_replays_total") >= 2);
    assert_eq!(report["errors"], json!([]));
    assert_eq!(
        proxy.metric("mcp_proxy_auth_refused_requests_total{reason=\"missing\"}"),
        1
    );
    proxy.assert_one_session_ended_by_delete();
    proxy.stop().await;
}

#[tokio::test]
async fn typescript_sdk_keeps_its_session_across_new_tokens_and_a_new_provider() {
    let issuer = AuthServer::start().await;
    let proxy = guarded(&issuer).await;
    let before = token_requests(&issuer).await;
    let report = typescript("oauth_client.mjs", &proxy, &issuer, "alice", &["refresh"]).await;

    assert_authorized_itself(&report, &proxy);
    assert_eq!(report["before"], "first token");
    // A stored token the proxy refuses: the SDK takes the 401 invalid_token, gets a new token
    // and goes on in the same session.
    let refused = report["refusedWith"].as_str().unwrap();
    assert!(
        refused.starts_with("Bearer error=\"invalid_token\"")
            && refused.contains("resource_metadata="),
        "{refused}"
    );
    assert_eq!(report["after"], "second token");
    // A new transport and provider (a third token) take over the session and resume the call
    // the first left mid-stream, from its last event id.
    assert!(report["abandoned"]
        .as_str()
        .unwrap()
        .contains("Connection closed"));
    assert!(report["progressBeforeLeaving"].as_u64().unwrap() >= 1);
    assert_eq!(report["reconnected"], true);
    let resumed_with = &report["resumedWith"];
    assert_eq!(resumed_with["method"], "GET");
    assert_eq!(resumed_with["scheme"], "Bearer");
    assert_eq!(resumed_with["lastEventId"], report["lastEventId"]);
    assert_eq!(resumed_with["status"], 200, "{report}");
    assert_eq!(report["resumedText"], "done after 3 steps");
    assert_eq!(report["tokens"], 3, "three distinct tokens: {report}");
    assert_eq!(report["tokenRequests"], 3);
    assert_eq!(token_requests(&issuer).await - before, 3);
    // One session from start to end: the principal is alice's (issuer, subject), whatever token.
    proxy.assert_one_session_ended_by_delete();
    assert!(proxy.metric("mcp_proxy_replays_total") >= 1);
    assert_eq!(
        proxy.metric("mcp_proxy_auth_refused_requests_total{reason=\"invalid\"}"),
        1
    );
    proxy.stop().await;
}

#[tokio::test]
async fn typescript_client_of_the_2026_07_28_revision_authorizes_itself_with_client_credentials() {
    let issuer = AuthServer::start().await;
    let proxy = guarded(&issuer).await;
    let before = token_requests(&issuer).await;
    let run =
        |client: &'static str| typescript("modern_oauth_client.mjs", &proxy, &issuer, client, &[]);
    let alice = run("alice").await;
    assert_authorized_itself(&alice, &proxy);
    assert_eq!(alice["version"], "2026-07-28");
    assert!(alice["tools"].as_array().unwrap().contains(&json!("echo")));
    assert_eq!(alice["echoed"], "modern oauth");
    assert_eq!(alice["progressText"], "done after 3 steps");
    assert_eq!(alice["progress"], 3);
    assert_eq!(alice["tokenRequests"], 1);
    assert_eq!(alice["unauthorized"], 1);
    assert!(alice["bearerRequests"].as_u64().unwrap() >= 5, "{alice}");
    assert_eq!(alice["counts"], json!(["1", "2"]));
    // Another run, another token, the same (issuer, subject): the same server counts on. Bob's
    // token finds a server of its own.
    let again = run("alice").await;
    assert_eq!(again["counts"], json!(["3", "4"]));
    let bob = run("bob").await;
    assert_eq!(bob["counts"], json!(["1", "2"]));
    assert_eq!(token_requests(&issuer).await - before, 3);
    proxy.stop().await;
}

/// Runs tests/python/bearer_client.py in `mode` with `token`, returning its report.
async fn python_bearer(proxy: &Proxy, mode: &str, token: Option<&str>) -> Value {
    let mut command = crate::harness::python_script("bearer_client.py");
    command.arg(mcp_url(proxy)).arg(mode).args(token);
    let stdout = crate::harness::stdout_of("the Python client", &mut command).await;
    serde_json::from_slice(&stdout).expect("a JSON report")
}

/// A client-credentials token of `client` for the proxy's `/mcp`.
async fn token(issuer: &AuthServer, proxy: &Proxy, client: &str) -> String {
    within(
        "a token",
        issuer.token(client, &mcp_url(proxy), "mcp:tools"),
    )
    .await
}

#[tokio::test]
async fn python_sdk_client_with_a_bearer_token_in_both_eras() {
    let issuer = AuthServer::start().await;
    let proxy = guarded(&issuer).await;
    let token = token(&issuer, &proxy, "alice").await;
    for (mode, version) in [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")] {
        let report = python_bearer(&proxy, mode, Some(&token)).await;
        assert_eq!(report.get("failed"), None, "{mode}: {report}");
        assert_eq!(report["version"], version);
        let tools = report["tools"].as_array().unwrap();
        assert!(tools.contains(&json!("echo")), "{mode}: {report}");
        assert_eq!(report["echoed"], format!("python {mode}"));
        assert_eq!(report["progressText"], "done after 3 steps");
        assert_eq!(report["progress"], json!([1.0, 2.0, 3.0]), "{mode}");
        let statuses = report["statuses"].as_array().unwrap();
        assert!(
            statuses.iter().all(|s| s.as_u64().unwrap() < 300),
            "{mode}: {report}"
        );
    }
    let metrics = proxy.running.metrics.render();
    assert!(
        !metrics.contains("mcp_proxy_auth_refused_requests_total{"),
        "nothing refused"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn python_sdk_client_without_a_token_is_refused_with_401() {
    let issuer = AuthServer::start().await;
    let proxy = guarded(&issuer).await;
    for mode in ["legacy", "2026-07-28"] {
        let report = python_bearer(&proxy, mode, None).await;
        assert_eq!(report["statuses"], json!([401]), "{mode}: {report}");
        assert_eq!(report["challenge"], challenge(&proxy), "{mode}");
        let failed = report["failed"].as_str().unwrap();
        assert!(
            failed.contains("Unauthorized: this server needs a bearer token"),
            "{mode}: {failed}"
        );
        assert_eq!(report.get("tools"), None, "{mode}");
    }
    assert_eq!(
        proxy.metric("mcp_proxy_auth_refused_requests_total{reason=\"missing\"}"),
        2
    );
    assert_eq!(proxy.metric("mcp_proxy_sessions_created_total"), 0);
    proxy.stop().await;
}

/// The full 2026-07-28 Python flow (tests/python/modern_client.py: tools, a resource, a listen,
/// elicitation and sampling through input_required) with the token as its credential: two
/// tokens of alice's reach the same server, bob's another.
#[tokio::test]
async fn python_sdk_client_of_the_2026_07_28_revision_keeps_its_principal_across_tokens() {
    let issuer = AuthServer::start().await;
    let proxy = guarded(&issuer).await;
    let run = |mode: &'static str, token: String| {
        let mut command = crate::harness::python_script("modern_client.py");
        command.arg(mcp_url(&proxy)).arg(mode).arg(token);
        async move {
            let stdout = crate::harness::stdout_of("the Python client", &mut command).await;
            serde_json::from_slice::<Value>(&stdout).expect("a JSON report")
        }
    };
    let first = token(&issuer, &proxy, "alice").await;
    let pinned = run("2026-07-28", first.clone()).await;
    assert_eq!(pinned["version"], "2026-07-28");
    assert_eq!(pinned["echoed"], "modern python");
    assert_eq!(pinned["read"], "Hello from the demo server");
    assert_eq!(pinned["updated"], "demo://counter");
    assert_eq!(pinned["elicited"], "Hello, Grace!");
    assert_eq!(pinned["sampled"], "The model said: Lyon");
    assert_eq!(pinned["counts"], json!(["1", "2"]));
    let refreshed = token(&issuer, &proxy, "alice").await;
    assert_ne!(first, refreshed);
    let auto = run("auto", refreshed).await;
    assert_eq!(
        auto["version"], "2026-07-28",
        "auto mode finds the modern face"
    );
    assert_eq!(auto["counts"], json!(["3", "4"]));
    let bob = run("2026-07-28", token(&issuer, &proxy, "bob").await).await;
    assert_eq!(bob["counts"], json!(["1", "2"]));
    proxy.stop().await;
}
