//! The official conformance suite (npm `@modelcontextprotocol/conformance`, pinned in
//! tests/node) against the proxy in front of the demo server: every server scenario of 0.1.16,
//! pending ones included, and not one check may fail or warn; and the 2026-07-28 requirements
//! of 0.2.0-alpha.12 in front of the same legacy-only demo, at the same time on the same proxy:
//! every scored scenario and every pending one passes, with no expected-failures file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::harness::Proxy;
use mcp_session_proxy::session::correlate::Anonymous;
use serde_json::Value;
use tokio::process::Command;

/// Polling (SEP-1699), which is opt-in (`http.sse_close_after`; closing streams costs
/// reconnections): streams close after 500 ms and clients resume them; the demo's
/// test_reconnection answers at 750 ms, on the resumed stream. Only with it does the
/// `server-sse-polling` scenario have anything to check.
fn polling(config: &mut mcp_session_proxy::config::Config) {
    config.http.sse_close_after = Duration::from_millis(500);
    config.http.json_wait = Duration::from_millis(100);
}

/// With every setting at its default.
#[tokio::test]
async fn every_server_scenario_passes_through_the_proxy() {
    let proxy = Proxy::start().await;
    every_scenario_passes(&format!("http://{}/mcp", proxy.addr()), DEFAULT_CHECKS).await;
    proxy.stop().await;
}

/// And with streams the server closes (polling): its scenario's checks too.
#[tokio::test]
async fn every_server_scenario_passes_through_the_proxy_with_polling() {
    let proxy = Proxy::start_with(polling).await;
    every_scenario_passes(&format!("http://{}/mcp", proxy.addr()), POLLING_CHECKS).await;
    proxy.stop().await;
}

/// Checks the legacy suite makes with the defaults, and with polling on.
const DEFAULT_CHECKS: usize = 43;
const POLLING_CHECKS: usize = 45;

/// The scenarios `--requirements 2026-07-28` scores, and its pending ones.
const SCORED_2026: [&str; 40] = [
    "server-stateless",
    "completion-complete",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
    "server-sse-multiple-streams",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "sep-2164-resource-not-found",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
    "caching",
    "input-required-result-basic-elicitation",
    "input-required-result-basic-sampling",
    "input-required-result-basic-list-roots",
    "input-required-result-request-state",
    "input-required-result-multiple-input-requests",
    "input-required-result-multi-round",
    "input-required-result-missing-input-response",
    "input-required-result-non-tool-request",
    "input-required-result-result-type",
    "input-required-result-unsupported-methods",
    "input-required-result-tampered-state",
    "input-required-result-capability-check",
    "input-required-result-ignore-extra-params",
    "input-required-result-validate-input",
    // Pending in 0.2.0-alpha.12 (not scored): held to the same bar.
    "json-schema-2020-12",
    "http-header-validation",
    "http-custom-header-server-validation",
];

/// Both eras' suites at once against one proxy in front of the legacy-only demo.
#[tokio::test]
async fn the_2026_07_28_requirements_and_the_legacy_suite_pass_on_one_proxy_at_once() {
    // The suite is one client without credentials whose listen must hear what its other calls
    // cause: its anonymous requests share one server session (by default each has its own).
    let proxy = Proxy::start_with(|config| {
        polling(config);
        config.session.anonymous = Anonymous::Shared;
    })
    .await;
    let url = format!("http://{}/mcp", proxy.addr());
    tokio::join!(
        every_scenario_passes(&url, POLLING_CHECKS),
        modern_requirements_pass(&url)
    );
    proxy.stop().await;
}

/// Runs `conformance server --requirements 2026-07-28` (0.2.0-alpha.12) against `url`: the
/// run passes, every scored scenario ran without a failing or warning check. Prints the
/// scenarios it does not score (the tasks extension, pending ones).
async fn modern_requirements_pass(url: &str) {
    let node = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node");
    let suite = node.join("node_modules/conformance-2026-07-28/dist/index.js");
    assert!(
        suite.exists(),
        "the npm peers are not installed: run scripts/test (it runs `npm ci` in tests/node)"
    );
    // Tests of one binary share a process under `cargo test`: the URL tells their runs apart.
    let results = std::env::temp_dir().join(format!(
        "mcp-conformance-2026-{}-{}",
        std::process::id(),
        url.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
    ));
    let _ = std::fs::remove_dir_all(&results);
    let output = run_suite(
        &suite,
        &["server", "--requirements", "2026-07-28", "--url", url, "-o"],
        &results,
    )
    .await;
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut failing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut ran = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&results).expect("the suite wrote results") {
        let dir = entry.unwrap().path();
        let folder = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Some(scenario) = SCORED_2026.iter().find(|name| {
            folder
                .strip_prefix("server-")
                .is_some_and(|f| f.starts_with(&format!("{name}-20")))
        }) else {
            continue;
        };
        ran.insert(*scenario);
        let checks: Vec<Value> =
            serde_json::from_slice(&std::fs::read(dir.join("checks.json")).unwrap()).unwrap();
        for check in checks {
            if matches!(check["status"].as_str(), Some("FAILURE" | "WARNING")) {
                failing
                    .entry(scenario.to_string())
                    .or_default()
                    .push(format!("{}: {}", check["id"], check["errorMessage"]));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&results);
    let not_scored = report
        .split("Not scored")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    println!("2026-07-28 requirements, not scored:{not_scored}");
    assert!(
        output.status.success() && failing.is_empty(),
        "failing or warning checks: {failing:#?}\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        ran.len(),
        40,
        "every scored and pending scenario ran: {ran:?}\n{report}"
    );
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
    every_scenario_passes(&format!("http://{}/mcp", proxy.addr()), POLLING_CHECKS).await;
    proxy.stop().await;
    upstream.stop().await;
}

/// The same in front of a 2026-07-28 server (the demo's modern-only mode): the legacy suite's
/// sessions, server requests, subscriptions and resumption, all bridged to a server that has
/// none of them.
#[tokio::test]
async fn every_server_scenario_passes_through_the_proxy_in_front_of_a_2026_07_28_server() {
    let proxy = Proxy::start_with(|c| {
        polling(c);
        in_front_of_the_modern_demo(c);
    })
    .await;
    every_scenario_passes(&format!("http://{}/mcp", proxy.addr()), POLLING_CHECKS).await;
    proxy.stop().await;
}

fn in_front_of_the_modern_demo(config: &mut mcp_session_proxy::config::Config) {
    config.upstream.stdio = Some(format!(
        "{} demo-server --protocol 2026-07-28",
        shell_words::quote(crate::harness::DEMO)
    ));
    config.upstream.protocol = mcp_session_proxy::wire::era::Era::Modern;
}

/// The 2026-07-28 requirements in front of the modern demo: the proxy does not break a modern
/// server for modern clients.
#[tokio::test]
async fn the_2026_07_28_requirements_pass_in_front_of_a_2026_07_28_server() {
    let proxy = Proxy::start_with(|config| {
        config.session.anonymous = Anonymous::Shared;
        in_front_of_the_modern_demo(config);
    })
    .await;
    modern_requirements_pass(&format!("http://{}/mcp", proxy.addr())).await;
    proxy.stop().await;
}

async fn every_scenario_passes(url: &str, checks: usize) {
    let node = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node");
    let bin = node.join("node_modules/.bin");
    assert!(
        bin.join("node").exists(),
        "the npm peers are not installed: run scripts/test (it runs `npm ci` in tests/node)"
    );
    let results = std::env::temp_dir().join(format!(
        "mcp-conformance-{}-{}",
        std::process::id(),
        url.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
    ));
    let _ = std::fs::remove_dir_all(&results);
    // Run by its own path: the 2026 suite, installed beside it, has the same `bin` name.
    let suite = node.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let output = run_suite(
        &suite,
        &["server", "--suite", "all", "--url", url, "--output-dir"],
        &results,
    )
    .await;
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
    assert!(successes >= checks, "{successes} checks passed\n{report}");
}

/// Runs a conformance suite (`suite`, its `dist/index.js`) with the pinned Node 22, writing its
/// results to `results`; bounded.
async fn run_suite(suite: &Path, args: &[&str], results: &Path) -> std::process::Output {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node/node_modules/.bin");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = Command::new(bin.join("node"))
        .arg(suite)
        .args(args)
        .arg(results)
        .env("PATH", path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the conformance suite starts");
    tokio::time::timeout(Duration::from_secs(300), run.wait_with_output())
        .await
        .expect("the suite finishes")
        .unwrap()
}
