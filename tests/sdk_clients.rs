//! Real third-party peers through the proxy: the official TypeScript SDK client, in front of the
//! demo server and in front of npm `@modelcontextprotocol/server-everything` over stdio.
//! `scripts/test` installs them into tests/node (pinned by its package-lock.json).

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::Proxy;
use serde_json::Value;
use tokio::process::Command;

fn node_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/sdk").is_dir(),
        "the npm peers are not installed: run scripts/test (it runs `npm ci` in tests/node)"
    );
    dir
}

/// Runs the SDK client script against the proxy and returns its JSON report.
async fn run_sdk_client(proxy: &Proxy, server: &str) -> Value {
    let dir = node_dir();
    let url = format!("http://{}/mcp", proxy.addr());
    let child = Command::new("node")
        .arg(dir.join("sdk_client.mjs"))
        .args([&url, server])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the SDK client finishes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the SDK client failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("a JSON report")
}

#[tokio::test]
async fn typescript_sdk_client_in_front_of_the_demo_server() {
    let proxy = Proxy::start().await;
    let report = run_sdk_client(&proxy, "demo").await;
    assert_eq!(report["ok"], true);
    assert_eq!(report["echoed"], "hi");
    assert_eq!(report["updated"], "demo://counter");
    assert_eq!(proxy.metric("mcp_proxy_sessions_created_total"), 1);
    assert_eq!(
        proxy.metric("mcp_proxy_sessions_open"),
        0,
        "terminated by DELETE"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn typescript_sdk_client_in_front_of_server_everything_over_stdio() {
    let everything =
        node_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let proxy = Proxy::start_with(|c| {
        c.upstream.stdio = Some(format!(
            "node {} stdio",
            shell_words::quote(&everything.to_string_lossy())
        ));
    })
    .await;
    let report = run_sdk_client(&proxy, "everything").await;
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
