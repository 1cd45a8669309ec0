//! `docker/compose.yaml`: Redis, two replicas sharing it, and a plain round-robin balancer.
//! Checked with `docker compose config` where Docker Compose exists, and always by reading it.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_compose_file_runs_two_replicas_on_redis_behind_a_non_sticky_balancer() {
    let python = root().join("tests/python/.venv/bin/python");
    let output = Command::new(&python)
        .arg(root().join("tests/python/check_compose.py"))
        .arg(root().join("docker"))
        .output()
        .expect("the tests' Python (scripts/test makes it)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["services"],
        serde_json::json!(["balancer", "proxy-a", "proxy-b", "redis"])
    );
    for replica in ["proxy-a", "proxy-b"] {
        let command: Vec<&str> = report["commands"][replica]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let after =
            |flag: &str| command[command.iter().position(|c| *c == flag).unwrap() + 1].to_owned();
        assert_eq!(after("--store"), "redis://redis:6379/0");
        assert_eq!(after("--node-id"), replica);
        assert_eq!(after("--advertise"), format!("http://{replica}:8787"));
        assert_eq!(report["builds"][replica]["dockerfile"], "docker/Dockerfile");
        assert!(report["environment"][replica]["MCP_PROXY_CLUSTER_SECRET"]
            .as_str()
            .unwrap()
            .contains("MCP_PROXY_CLUSTER_SECRET"));
        // The replica's flags are the real binary's.
        let mut args: Vec<String> = command.iter().map(|c| c.to_string()).collect();
        args.push("--help".into());
        let help = Command::new(env!("CARGO_BIN_EXE_mcp-session-proxy"))
            .args(&args)
            .output()
            .unwrap();
        assert!(
            help.status.success(),
            "{}",
            String::from_utf8_lossy(&help.stderr)
        );
    }
    let nginx: String = report["nginx"]
        .as_str()
        .unwrap()
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(nginx.contains("server proxy-a:8787;") && nginx.contains("server proxy-b:8787;"));
    for sticky in ["ip_hash", "sticky", "hash $"] {
        assert!(!nginx.contains(sticky), "no stickiness: {sticky}");
    }
    assert!(
        nginx.contains("proxy_buffering off"),
        "SSE passes through unbuffered"
    );
    assert!(
        nginx.contains("proxy_set_header Upgrade"),
        "WebSockets pass through"
    );

    let compose_exists = Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if compose_exists {
        let config = Command::new("docker")
            .args(["compose", "-f"])
            .arg(root().join("docker/compose.yaml"))
            .arg("config")
            .env("MCP_PROXY_CLUSTER_SECRET", "x")
            .output()
            .unwrap();
        assert!(
            config.status.success(),
            "{}",
            String::from_utf8_lossy(&config.stderr)
        );
    }
}
