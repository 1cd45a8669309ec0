//! The official conformance suite (npm `@modelcontextprotocol/conformance`, pinned in
//! tests/node) against the proxy in front of the demo server: every server scenario, pending
//! ones included, and not one check may fail or warn.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::Proxy;
use serde_json::Value;
use tokio::process::Command;

/// Polling (SEP-1699): streams close after 500 ms and clients resume them; the demo's
/// test_reconnection answers at 750 ms, on the resumed stream.
fn polling(config: &mut mcp_session_proxy::config::Config) {
    config.http.sse_close_after = Duration::from_millis(500);
    config.http.json_wait = Duration::from_millis(100);
}

#[tokio::test]
async fn every_server_scenario_passes_through_the_proxy() {
    let proxy = Proxy::start_with(polling).await;
    every_scenario_passes(&format!("http://{}/mcp", proxy.addr())).await;
    proxy.stop().await;
}

/// The same through the proxy's HTTP upstream: the demo served over Streamable HTTP behind it
/// (server requests, progress, resumption, all through the upstream hop).
#[tokio::test]
async fn every_server_scenario_passes_through_the_proxy_in_front_of_an_http_server() {
    let upstream = Proxy::start().await;
    let proxy = Proxy::start_with(|c| {
        polling(c);
        c.upstream.stdio = None;
        c.upstream.http = Some(format!("http://{}/mcp", upstream.addr()));
    })
    .await;
    every_scenario_passes(&format!("http://{}/mcp", proxy.addr())).await;
    proxy.stop().await;
    upstream.stop().await;
}

async fn every_scenario_passes(url: &str) {
    let node = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node");
    let bin = node.join("node_modules/.bin");
    assert!(
        bin.join("conformance").exists(),
        "the npm peers are not installed: run scripts/test (it runs `npm ci` in tests/node)"
    );
    let results = std::env::temp_dir().join(format!(
        "mcp-conformance-{}-{}",
        std::process::id(),
        url.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
    ));
    let _ = std::fs::remove_dir_all(&results);
    // The suite needs Node 22; the pinned `node` package puts one first on PATH.
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = Command::new(bin.join("conformance"))
        .args(["server", "--suite", "all", "--url", url, "--output-dir"])
        .arg(&results)
        .env("PATH", path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the conformance suite starts");
    let output = tokio::time::timeout(Duration::from_secs(300), run.wait_with_output())
        .await
        .expect("the suite finishes")
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout).into_owned();

    let mut statuses: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for entry in std::fs::read_dir(&results).expect("the suite wrote results") {
        let dir = entry.unwrap().path();
        let scenario = dir.file_name().unwrap().to_string_lossy().into_owned();
        let checks: Vec<Value> =
            serde_json::from_slice(&std::fs::read(dir.join("checks.json")).unwrap()).unwrap();
        for check in checks {
            let status = check["status"].as_str().unwrap_or("?").to_owned();
            *statuses
                .entry(status)
                .or_default()
                .entry(scenario.clone())
                .or_default() += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&results);
    let scenarios = statuses
        .values()
        .flat_map(|s| s.keys())
        .collect::<std::collections::BTreeSet<_>>();
    assert!(
        output.status.success()
            && !statuses.contains_key("FAILURE")
            && !statuses.contains_key("WARNING"),
        "failures or warnings: {:?} {:?}\n{report}\n{}",
        statuses.get("FAILURE"),
        statuses.get("WARNING"),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        scenarios.len(),
        32,
        "30 active and 2 pending scenarios ran: {scenarios:?}"
    );
    let successes: usize = statuses["SUCCESS"].values().sum();
    assert!(successes >= 45, "{successes} checks passed\n{report}");
}
