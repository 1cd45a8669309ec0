//! Real third-party peers through the proxy: the official TypeScript SDK client, in front of the
//! demo server and in front of npm `@modelcontextprotocol/server-everything` over stdio, and the
//! official Python client; and the clients of the 2026-07-28 revision (TypeScript
//! `@modelcontextprotocol/client`, Python `mcp` 2.x in its `2026-07-28` and `auto` modes). `scripts/test` installs them (tests/node, pinned by its
//! package-lock.json; tests/python/.venv from tests/python/requirements.txt).

use std::process::Stdio;
use std::time::Duration;

use crate::harness::Proxy;
use serde_json::Value;
use tokio::process::Command;

/// A proxy that closes streams mid-call (SEP-1699 polling), so clients must resume them.
async fn polling_proxy() -> Proxy {
    Proxy::start_with(|c| {
        c.http.sse_close_after = Duration::from_millis(500);
        c.http.json_wait = Duration::from_millis(100);
    })
    .await
}

/// The same in front of the demo's 2026-07-28-only mode: legacy clients bridged.
async fn polling_proxy_in_front_of_a_modern_server() -> Proxy {
    Proxy::start_with(|c| {
        c.http.sse_close_after = Duration::from_millis(500);
        c.http.json_wait = Duration::from_millis(100);
        c.upstream.stdio = Some(format!(
            "{} demo-server --protocol 2026-07-28",
            shell_words::quote(crate::harness::DEMO)
        ));
        c.upstream.protocol = mcp_session_proxy::wire::era::Era::Modern;
    })
    .await
}

/// A proxy in front of npm `server-everything` over stdio.
async fn in_front_of_server_everything() -> Proxy {
    let everything = crate::harness::node_dir()
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    Proxy::start_with(|c| {
        c.upstream.stdio = Some(format!(
            "node {} stdio",
            shell_words::quote(&everything.to_string_lossy())
        ));
    })
    .await
}

/// Runs the TypeScript SDK client script against the proxy and returns its JSON report.
async fn run_sdk_client(proxy: &Proxy, args: &[&str]) -> Value {
    crate::harness::sdk_client(&format!("http://{}/mcp", proxy.addr()), args).await
}

/// Runs a client program to completion and returns the JSON line it printed.
async fn run_client(mut command: Command) -> Value {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the client starts");
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the SDK client finishes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the client failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("a JSON report")
}

#[tokio::test]
async fn typescript_sdk_client_in_front_of_the_demo_server_resumes_a_closed_stream() {
    let proxy = polling_proxy().await;
    let report = run_sdk_client(&proxy, &["demo", "resume"]).await;
    assert_eq!(report["ok"], true);
    assert_eq!(report["echoed"], "hi");
    assert_eq!(report["updated"], "demo://counter");
    assert_eq!(report["resumed"], "Reconnection test completed");
    assert!(
        proxy.metric("mcp_proxy_replays_total") >= 1,
        "resumed with Last-Event-ID"
    );
    proxy.assert_one_session_ended_by_delete();
    proxy.stop().await;
}

#[tokio::test]
async fn typescript_sdk_client_in_front_of_server_everything_over_stdio() {
    let proxy = in_front_of_server_everything().await;
    let report = run_sdk_client(&proxy, &["everything"]).await;
    assert_eq!(report["ok"], true);
    assert_eq!(report["echoed"], "Echo: hi");
    assert!(report["updated"].as_str().unwrap().starts_with("demo://"));
    assert_eq!(
        proxy.metric("mcp_proxy_sessions_open"),
        0,
        "terminated by DELETE"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn python_sdk_client_through_the_proxy_resumes_a_closed_stream() {
    python_legacy_client_resumes(polling_proxy().await).await;
}

/// The legacy Python client in front of a server that has no sessions, no subscriptions and no
/// resumable streams: the proxy gives it all three.
#[tokio::test]
async fn python_sdk_client_in_legacy_mode_in_front_of_a_2026_07_28_server() {
    python_legacy_client_resumes(polling_proxy_in_front_of_a_modern_server().await).await;
}

#[tokio::test]
async fn typescript_sdk_client_in_front_of_a_2026_07_28_server() {
    let proxy = polling_proxy_in_front_of_a_modern_server().await;
    let report = run_sdk_client(&proxy, &["demo", "resume"]).await;
    assert_eq!(report["ok"], true);
    assert_eq!(report["echoed"], "hi");
    assert_eq!(report["updated"], "demo://counter");
    assert_eq!(report["resumed"], "Reconnection test completed");
    assert!(proxy.metric("mcp_proxy_replays_total") >= 1);
    proxy.stop().await;
}

async fn python_legacy_client_resumes(proxy: Proxy) {
    let mut command = crate::harness::python_script("client.py");
    command.arg(format!("http://{}/mcp", proxy.addr()));
    let report = run_client(command).await;
    assert_eq!(report["ok"], true);
    assert_eq!(report["echoed"], "from python");
    assert_eq!(report["updated"], "demo://counter");
    assert_eq!(report["resumed"], "Reconnection test completed");
    assert!(
        proxy.metric("mcp_proxy_replays_total") >= 1,
        "resumed with Last-Event-ID"
    );
    assert_eq!(
        proxy.metric("mcp_proxy_sessions_open"),
        0,
        "closed by DELETE"
    );
    proxy.stop().await;
}

/// Runs the Python client as a 2026-07-28 client (`mode`: pinned or `auto`) as `credential`.
async fn python_modern(proxy: &Proxy, mode: &str, credential: Option<&str>) -> Value {
    let mut command = crate::harness::python_script("modern_client.py");
    command
        .arg(format!("http://{}/mcp", proxy.addr()))
        .arg(mode)
        .args(credential);
    run_client(command).await
}

#[tokio::test]
async fn python_sdk_client_of_the_2026_07_28_revision_in_front_of_the_legacy_demo() {
    let proxy = Proxy::start().await;
    let pinned = python_modern(&proxy, "2026-07-28", Some("alice")).await;
    assert_eq!(pinned["version"], "2026-07-28");
    assert_eq!(pinned["echoed"], "modern python");
    assert!(pinned["tools"].as_array().unwrap().contains(&"echo".into()));
    assert_eq!(pinned["read"], "Hello from the demo server");
    assert_eq!(pinned["counts"], serde_json::json!(["1", "2"]));
    assert_eq!(
        pinned["updated"], "demo://counter",
        "an update on subscriptions/listen"
    );
    assert_eq!(
        pinned["elicited"], "Hello, Grace!",
        "elicitation through input_required"
    );
    assert_eq!(
        pinned["sampled"], "The model said: Lyon",
        "sampling through input_required"
    );
    // In auto mode it discovers the proxy's modern face and picks it; the same principal is
    // served by the same server, another one by its own.
    let auto = python_modern(&proxy, "auto", Some("alice")).await;
    assert_eq!(auto["version"], "2026-07-28");
    assert_eq!(auto["server"], "mcp-session-proxy-demo");
    assert_eq!(auto["counts"], serde_json::json!(["3", "4"]));
    let bob = python_modern(&proxy, "auto", Some("bob")).await;
    assert_eq!(bob["counts"], serde_json::json!(["1", "2"]));
    let stranger = python_modern(&proxy, "auto", None).await;
    assert_eq!(
        stranger["counts"],
        serde_json::json!(["1", "1"]),
        "requests without a principal share no server"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn typescript_client_of_the_2026_07_28_revision_in_front_of_the_legacy_demo() {
    let proxy = Proxy::start().await;
    let url = format!("http://{}/mcp", proxy.addr());
    let pinned =
        crate::harness::pinned_node_client("modern_client.mjs", &url, &["pin", "demo", "alice"])
            .await;
    assert_eq!(pinned["version"], "2026-07-28");
    assert_eq!(pinned["echoed"], "modern ts");
    assert_eq!(pinned["read"], "Hello from the demo server");
    assert_eq!(
        pinned["updated"], "demo://counter",
        "an update on subscriptions/listen"
    );
    assert_eq!(pinned["counts"], serde_json::json!(["1", "2"]));
    assert_eq!(
        pinned["elicited"], "Hello, Ada!",
        "elicitation through input_required"
    );
    assert_eq!(
        pinned["sampled"], "The model said: Paris",
        "sampling through input_required"
    );
    assert_eq!(
        pinned["multiple"], "Paris Ada (1 roots)",
        "three at once, roots too"
    );
    // In auto mode it discovers the proxy's modern face and picks it: alice's server counts on,
    // bob's is his own.
    let auto =
        crate::harness::pinned_node_client("modern_client.mjs", &url, &["auto", "demo", "alice"])
            .await;
    assert_eq!(auto["version"], "2026-07-28");
    assert_eq!(auto["counts"], serde_json::json!(["3", "4"]));
    let bob =
        crate::harness::pinned_node_client("modern_client.mjs", &url, &["auto", "demo", "bob"])
            .await;
    assert_eq!(bob["counts"], serde_json::json!(["1", "2"]));
    proxy.stop().await;
}

#[tokio::test]
async fn typescript_client_of_the_2026_07_28_revision_in_front_of_server_everything_over_stdio() {
    let proxy = in_front_of_server_everything().await;
    let url = format!("http://{}/mcp", proxy.addr());
    let report = crate::harness::pinned_node_client(
        "modern_client.mjs",
        &url,
        &["pin", "everything", "alice"],
    )
    .await;
    assert_eq!(report["version"], "2026-07-28");
    assert_eq!(report["echoed"], "Echo: modern ts");
    assert!(report["updated"].as_str().unwrap().starts_with("demo://"));
    assert!(
        report["elicited"].as_str().unwrap().contains("- Name: Ada"),
        "{report}"
    );
    assert!(
        report["sampled"].as_str().unwrap().contains("Paris"),
        "{report}"
    );
    proxy.stop().await;
}
