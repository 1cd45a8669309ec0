//! The chaos run (`bench/chaos.py`) for a minute: three replicas sharing a real `redis-server`
//! in front of the demo server, replicas killed with `kill -9` and restarted, client streams
//! cut, load bursts from `mcp-bench`, and clients that check every promise the proxy makes
//! (nothing lost, duplicated, reordered or crossed; no 404 for a live session; 503s carry
//! Retry-After). The script stops everything it starts, also when this test times out and
//! kills it.

mod common;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::DEMO;
use tokio::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test]
async fn replicas_keep_their_promises_through_kills_cuts_and_bursts() {
    let python = root().join("tests/python/.venv/bin/python");
    assert!(
        python.exists(),
        "the tests' Python is not installed: run scripts/test (it creates tests/python/.venv)"
    );
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let report = std::env::temp_dir().join(format!(
        "mcp-chaos-report-{}-{nanos}.json",
        std::process::id()
    ));
    let run = Command::new(&python)
        .arg(root().join("bench/chaos.py"))
        .args(["--proxy", DEMO])
        .args(["--bench", env!("CARGO_BIN_EXE_mcp-bench")])
        .args(["--seconds", "60"])
        .arg("--report")
        .arg(&report)
        .current_dir(root())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the chaos run ends within 240 s")
        .expect("the tests' Python runs bench/chaos.py");
    let written = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    assert!(
        output.status.success(),
        "the chaos run failed ({}):\n{}\n--- report ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        if written.is_empty() {
            String::from_utf8_lossy(&output.stdout).into_owned()
        } else {
            written
        }
    );
}

/// A rolling restart through a balancer (`bench/chaos.py --through … --rolling-restart`):
/// eight clients call tools while each of three replicas in turn gets SIGTERM, drains and is
/// started again; not one call fails.
async fn rolling_restart_through(balancer: &str) {
    let python = root().join("tests/python/.venv/bin/python");
    let run = Command::new(&python)
        .arg(root().join("bench/chaos.py"))
        .args(["--proxy", DEMO])
        .args([
            "--through",
            balancer,
            "--rolling-restart",
            "--max-failed",
            "0",
        ])
        .current_dir(root())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the rolling restart ends within 240 s")
        .expect("the tests' Python runs bench/chaos.py");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && said.contains(": 0 of "),
        "a rolling restart through {balancer} ({}):\n{said}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
    );
}

#[tokio::test]
async fn a_rolling_restart_through_nginx_fails_no_call() {
    rolling_restart_through("nginx").await;
}

#[tokio::test]
async fn a_rolling_restart_through_haproxy_fails_no_call() {
    rolling_restart_through("haproxy").await;
}
