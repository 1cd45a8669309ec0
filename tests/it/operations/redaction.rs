//! What the proxy prints never holds a password: the real binary on a real Redis that takes a
//! password, in front of an HTTP server named by a URL with user info. Its logs and its error
//! answers show those URLs as `…://***@host`. (Session ids in logs and spans: `binary.rs` and
//! `tracing.rs`.) And a secret given on the command line, where every local user can read it,
//! is warned about.

use crate::harness::cluster::{Redis, SECRET};
use crate::harness::{spawn_proxy, spawn_proxy_with_env, within, Client};
use serde_json::{json, Value};

const REDIS_PASSWORD: &str = "redis-pw-7f3a91";
const UPSTREAM_PASSWORD: &str = "upstream-pw-c0ffee";

#[tokio::test]
async fn passwords_in_urls_never_reach_logs_or_answers() {
    let redis = Redis::start_with_password(REDIS_PASSWORD).await;
    let vacant = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = format!(
        "http://operator:{UPSTREAM_PASSWORD}@{}/mcp",
        vacant.local_addr().unwrap()
    );
    drop(vacant);
    let store = redis.url();
    assert!(store.contains(REDIS_PASSWORD), "the store URL holds it");
    // Each secret where a process's command line would not show it: the upstream's in the
    // configuration file, the others in the environment.
    let config = std::env::temp_dir().join(format!("mcp-redaction-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        format!("[upstream]\nhttp = {}\n", Value::from(upstream.clone())),
    )
    .unwrap();
    let (mut child, addr, mut logs, mut seen) = spawn_proxy_with_env(
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
        &[
            ("MCP_PROXY_STORE", &store),
            ("MCP_PROXY_CLUSTER_SECRET", SECRET),
        ],
    )
    .await;
    std::fs::remove_file(&config).unwrap();
    let joined = seen
        .iter()
        .find(|entry| {
            entry["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("joined the replicas"))
        })
        .unwrap_or_else(|| panic!("the proxy joined Redis: {seen:#?}"));
    assert!(
        joined.to_string().contains("redis://***@127.0.0.1:"),
        "{joined}"
    );

    // An upstream that cannot be reached: the error names it, without its password.
    let client = Client::new(addr);
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": { "name": "x", "version": "1" } } }))
        .await;
    let answer = within("the answer", reply.response()).await;
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("unreachable"), "{answer}");
    assert!(message.contains("http://***@127.0.0.1:"), "{answer}");

    within("the access line of the failed initialize", async {
        loop {
            let line = logs.next_line().await.unwrap().expect("the proxy logs on");
            let entry: Value = serde_json::from_str(&line).unwrap();
            let done = entry["target"] == "access";
            seen.push(entry);
            if done {
                break;
            }
        }
    })
    .await;
    child.kill().await.unwrap();
    while let Ok(Some(line)) = logs.next_line().await {
        seen.push(serde_json::from_str(&line).unwrap());
    }
    for entry in &seen {
        let line = entry.to_string();
        assert!(!line.contains(REDIS_PASSWORD), "{line}");
        assert!(!line.contains(UPSTREAM_PASSWORD), "{line}");
    }
    // Given by environment and file: nothing to warn about.
    assert_eq!(cmdline_warnings(&seen), Vec::<String>::new());
}

/// The warnings that a secret is readable in `/proc/<pid>/cmdline`.
fn cmdline_warnings(seen: &[Value]) -> Vec<String> {
    seen.iter()
        .filter(|entry| entry["level"] == "WARN")
        .map(|entry| entry.to_string())
        .filter(|line| line.contains("/cmdline"))
        .collect()
}

/// Every local user can read a process's command line (`/proc/<pid>/cmdline`): the proxy warns
/// at start of each secret it was given there, without the secret, and starts all the same.
#[tokio::test]
async fn secrets_on_the_command_line_are_warned_about() {
    let redis = Redis::start_with_password(REDIS_PASSWORD).await;
    let store = redis.url();
    let (_child, _addr, _logs, seen) = spawn_proxy(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        &store,
        "--cluster-secret",
        SECRET,
    ])
    .await;
    let warnings = cmdline_warnings(&seen);
    for flag in ["--cluster-secret", "--store"] {
        assert!(
            warnings.iter().any(|line| line.contains(flag)),
            "{flag}: {warnings:#?}"
        );
    }
    for line in &warnings {
        assert!(
            !line.contains(REDIS_PASSWORD) && !line.contains(SECRET),
            "{line}"
        );
    }
}
