//! What the proxy prints never holds a password: the real binary on a real Redis that takes a
//! password, in front of an HTTP server named by a URL with user info. Its logs and its error
//! answers show those URLs as `…://***@host`. (Session ids in logs and spans: `binary.rs` and
//! `tracing.rs`.)

mod common;

use common::cluster::{Redis, SECRET};
use common::{spawn_proxy, within, Client};
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
    let (mut child, addr, mut logs, mut seen) = spawn_proxy(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        &store,
        "--cluster-secret",
        SECRET,
        "--http",
        &upstream,
    ])
    .await;
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
}
