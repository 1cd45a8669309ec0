//! Replicas sharing sessions through a real `redis-server`, as separate proxy processes on
//! 127.0.0.1: what an owner writes, and Redis trouble.

mod common;

use common::cluster::{Redis, Replica, SECRET};
use common::{within, Client, DEMO};
use http::StatusCode;
use redis::AsyncCommands;
use serde_json::json;
use std::collections::HashMap;

#[tokio::test]
async fn redis_down_at_start_up_is_a_clear_error() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let output = within(
        "the proxy to give up",
        tokio::process::Command::new(DEMO)
            .args(["--listen", "127.0.0.1:0", "--cluster-secret", SECRET])
            .args(["--store", &format!("redis://127.0.0.1:{unused}/0")])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot reach the Redis store at redis://127.0.0.1:{unused}/0"
        )),
        "{stderr}"
    );

    let no_secret = tokio::process::Command::new(DEMO)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "redis://127.0.0.1:1/0",
        ])
        .env_remove("MCP_PROXY_CLUSTER_SECRET")
        .output()
        .await
        .unwrap();
    assert!(!no_secret.status.success());
    assert!(String::from_utf8_lossy(&no_secret.stderr).contains("cluster.secret"));
}

#[tokio::test]
async fn an_owner_records_its_sessions_and_their_logs_in_redis() {
    let redis = Redis::start().await;
    let a = Replica::start(&redis, "a", &[]).await;
    let mut client = Client::new(a.addr);
    client.initialize("2025-11-25").await;
    let session = client.session.clone().unwrap();
    client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(
        client.call_tool("echo", json!({ "text": "hi" })).await,
        "hi"
    );

    let mut redis_connection = redis.connection().await;
    let record_key = format!("mcp-proxy:default:session:{session}");
    let log_key = format!("mcp-proxy:default:log:{session}");
    let record: HashMap<String, String> = within("the record", async {
        loop {
            let record: HashMap<String, String> =
                redis_connection.hgetall(&record_key).await.unwrap();
            let logged: usize = redis_connection.xlen(&log_key).await.unwrap();
            if record.contains_key("subs") && logged >= 3 {
                return record;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(record["owner"], "a");
    assert_eq!(record["shape"], "streams");
    assert_eq!(record["version"], "2025-11-25");
    assert!(record["init"].contains("clientInfo"), "{record:?}");
    assert_eq!(record["subs"], r#"["demo://counter"]"#);
    let node: String = redis_connection.get("mcp-proxy:node:a").await.unwrap();
    assert_eq!(node, format!("http://{}", a.addr));

    assert_eq!(client.delete().await, StatusCode::OK);
    within("the keys to go", async {
        loop {
            let exists: bool = redis_connection.exists(&record_key).await.unwrap();
            if !exists {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
}
