//! The benchmark harness in smoke mode (tiny counts): every measurement `bench/run` takes still
//! runs and reports sane figures, and the relay it uses as the floor of a hop passes calls through.

use crate::harness::{stdout_of, Proxy};
use serde_json::Value;
use tokio::process::Command;

async fn bench(args: &[&str]) -> Value {
    let stdout = stdout_of(
        &format!("mcp-bench {args:?}"),
        Command::new(env!("CARGO_BIN_EXE_mcp-bench")).args(args),
    )
    .await;
    serde_json::from_slice(&stdout).expect("one JSON report")
}

/// Two sessions (or 2026-07-28 clients) making 20 calls each.
async fn calls_from(url: &str, era: &str) -> Value {
    bench(&[
        "calls",
        "--url",
        url,
        "--sessions",
        "2",
        "--calls",
        "20",
        "--warmup",
        "2",
        "--era",
        era,
    ])
    .await
}

#[tokio::test]
async fn every_measurement_runs_in_smoke_mode() {
    let proxy = Proxy::start().await;
    let url = format!("http://{}/mcp", proxy.addr());

    let calls = calls_from(&url, "legacy").await;
    assert_eq!(calls["calls"], 40);
    assert_eq!(calls["errors"], 0);
    assert!(calls["p50_us"].as_f64().unwrap() > 0.0);
    assert!(calls["p99_us"].as_f64().unwrap() >= calls["p50_us"].as_f64().unwrap());
    assert!(calls["throughput_rps"].as_f64().unwrap() > 0.0);
    // The same calls from 2026-07-28 clients (no session; each a principal of its own).
    let modern = calls_from(&url, "modern").await;
    assert_eq!(modern["era"], "modern");
    assert_eq!(modern["calls"], 40);
    assert_eq!(modern["errors"], 0);
    // And within a data-layer session each.
    let layered = calls_from(&url, "data-layer").await;
    assert_eq!(layered["era"], "data-layer");
    assert_eq!(layered["calls"], 40);
    assert_eq!(layered["errors"], 0);

    let resume = bench(&["resume", "--url", &url, "--missed", "50"]).await;
    assert_eq!(
        resume["received"], 50,
        "every missed event, none coalesced away"
    );

    let idle = bench(&["idle", "--url", &url, "--sessions", "5"]).await;
    assert_eq!(idle["sessions"], 5);

    let (mut relay, line, _) = crate::harness::spawn_announcing(
        "the relay's address",
        Command::new(env!("CARGO_BIN_EXE_mcp-bench")).args([
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--to",
            &proxy.addr().to_string(),
        ]),
    )
    .await;
    let listening: Value = serde_json::from_str(&line).unwrap();
    let relayed_url = format!("http://{}/mcp", listening["listening"].as_str().unwrap());
    let relayed = bench(&[
        "calls",
        "--url",
        &relayed_url,
        "--calls",
        "10",
        "--warmup",
        "1",
    ])
    .await;
    assert_eq!(
        relayed["errors"], 0,
        "the relay passes calls through untouched"
    );
    assert_eq!(relayed["calls"], 10);
    relay.kill().await.unwrap();

    let log = bench(&["log", "--events", "5000"]).await;
    assert_eq!(log["replayed_per_round"], 1000);
    assert!(log["append_per_second"].as_f64().unwrap() > 0.0);
    proxy.stop().await;
}

/// `mcp-bench calls --ca-file` against a proxy whose listener speaks TLS (bench/tls_cost.py's
/// listener over https://): the calls made over TLS, trusting the CA given alone.
#[tokio::test]
async fn the_load_generator_calls_over_tls_trusting_the_ca_it_is_given() {
    let certificates = crate::harness::tls::Certificates::make();
    let (cert, key) = (
        certificates.path("server.pem"),
        certificates.path("server-key.pem"),
    );
    let proxy = Proxy::start_with(|c| {
        c.tls.cert_file = Some(cert);
        c.tls.key_file = Some(key);
    })
    .await;
    let url = format!("https://{}/mcp", proxy.addr());
    let ca = certificates.arg("ca.pem");
    let args = ["calls", "--url", &url, "--calls", "10", "--warmup", "1"];
    let calls = bench(&[&args[..], &["--ca-file", &ca]].concat()).await;
    assert_eq!(calls["calls"], 10);
    assert_eq!(calls["errors"], 0);
    // Another CA's certificate is not trusted: the load generator says so and stops.
    let other = certificates.arg("other-ca.pem");
    let refused = Command::new(env!("CARGO_BIN_EXE_mcp-bench"))
        .args([&args[..], &["--ca-file", &other]].concat())
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success());
    proxy.stop().await;
}
