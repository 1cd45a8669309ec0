//! The chaos run (`bench/chaos.py`) for a minute: three replicas sharing a real `redis-server`
//! in front of the demo server, replicas killed with `kill -9` and restarted, client streams
//! cut, load bursts from `mcp-bench`, and clients that check every promise the proxy makes
//! (nothing lost, duplicated, reordered or crossed; no 404 for a live session; 503s carry
//! Retry-After). Then its measurements through nginx and HAProxy: a rolling restart fails no
//! call, and a kill -9 of a session's owner fails only the calls under way when it died. The
//! script stops everything it starts, also when this test times out and kills it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::harness::{repo_root, DEMO};
use tokio::process::Command;

#[tokio::test]
async fn replicas_keep_their_promises_through_kills_cuts_and_bursts() {
    let python = repo_root().join("tests/python/.venv/bin/python");
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
        .arg(repo_root().join("bench/chaos.py"))
        .args(["--proxy", DEMO])
        .args(["--bench", env!("CARGO_BIN_EXE_mcp-bench")])
        .args(["--seconds", "60"])
        .arg("--report")
        .arg(&report)
        .current_dir(repo_root())
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

/// A measurement of `bench/chaos.py` through a balancer (`--through …`); its summary on stderr
/// must contain `expected`.
async fn measure_through(balancer: &str, measurement: &[&str], expected: &str) {
    let python = repo_root().join("tests/python/.venv/bin/python");
    let run = Command::new(&python)
        .arg(repo_root().join("bench/chaos.py"))
        .args(["--proxy", DEMO, "--through", balancer])
        .args(measurement)
        .current_dir(repo_root())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the measurement ends within 240 s")
        .expect("the tests' Python runs bench/chaos.py");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && said.contains(expected),
        "{measurement:?} through {balancer} ({}):\n{said}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
    );
}

/// A rolling restart: eight clients call tools while each of three replicas in turn gets
/// SIGTERM, drains and is started again; not one call fails.
const ROLLING_RESTART: &[&str] = &["--rolling-restart", "--max-failed", "0"];

/// kill -9 of a session's owner, twice, each down for 3 s (longer than its heartbeat, so the
/// other replicas take its sessions over rather than wait for it): the only calls that fail
/// are those under way when it died.
const KILL_OWNER: &[&str] = &[
    "--kill-owner",
    "--rounds",
    "2",
    "--down",
    "3",
    "--max-failed-not-in-flight",
    "0",
];

#[tokio::test]
async fn a_rolling_restart_through_nginx_fails_no_call() {
    measure_through("nginx", ROLLING_RESTART, ": 0 of ").await;
}

#[tokio::test]
async fn a_rolling_restart_through_haproxy_fails_no_call() {
    measure_through("haproxy", ROLLING_RESTART, ": 0 of ").await;
}

#[tokio::test]
async fn a_killed_owner_through_nginx_fails_only_the_calls_in_flight_on_it() {
    measure_through("nginx", KILL_OWNER, "not in flight: 0").await;
}

#[tokio::test]
async fn a_killed_owner_through_haproxy_fails_only_the_calls_in_flight_on_it() {
    measure_through("haproxy", KILL_OWNER, "not in flight: 0").await;
}
