//! Replicas on a Redis Cluster (three masters with a replica each, made by
//! `redis-cli --cluster create`): each session's keys in one hash slot, sessions shared by two
//! replicas, and a master killed under them: every session whose owner lives goes on (its
//! server's count continues, its replay window intact, never a 404), new sessions open, and a
//! replica's sessions are still taken over after the failover.

use serde_json::json;

use crate::harness::cluster::{
    each_session_counts_on, metric, metrics_text, resumes_whole, sessions_with_a_logged_stream,
    taken_over_afresh, through, Replica, FAST_TAKEOVER,
};
use crate::harness::redis_cluster::RedisCluster;
use crate::harness::{until, Client};

#[tokio::test]
async fn a_killed_master_of_the_cluster_loses_no_session_and_no_event() {
    let mut redis = RedisCluster::start().await;
    let store = redis.url();
    let mut a = Replica::start_on(&store, "a", &FAST_TAKEOVER).await;
    let b = Replica::start_on(&store, "b", &FAST_TAKEOVER).await;

    // Sessions on both replicas, each with a count of 1, and a logged stream.
    let (sessions, logged) = sessions_with_a_logged_stream(&a, &b, 3).await;
    // Every key of a session is in one slot: its id is their hash tag.
    let id = sessions[1].session.clone().unwrap();
    let log_key = format!("mcp-proxy:default:log:{{{id}}}");
    let record_key = format!("mcp-proxy:default:session:{{{id}}}");
    let master = redis.master_of(&log_key).await;
    assert_eq!(redis.master_of(&record_key).await, master);
    let mut on_master = redis::Client::open(format!("redis://127.0.0.1:{master}/0"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    until("the stream to be logged", true, || {
        let (mut on_master, log_key) = (on_master.clone(), log_key.clone());
        async move {
            redis::AsyncCommands::xlen::<_, usize>(&mut on_master, &log_key)
                .await
                .unwrap_or(0)
                >= 4
        }
    })
    .await;
    let owner: String = redis::AsyncCommands::hget(&mut on_master, &record_key, "owner")
        .await
        .unwrap();
    assert_eq!(owner, "b");

    // The master holding that session is killed; its replica takes its slots.
    redis.kill(master).await;
    redis.until_promoted(&log_key, master).await;

    // Every session goes on where its owner lives, through either replica: its count continues.
    each_session_counts_on(&sessions, &a, &b, 1).await;
    // The replay window is intact: the stream logged before the failover resumes whole.
    resumes_whole(&sessions[1], &a, &logged).await;
    // Each replica saw the masters change, and tells which node is down.
    let down = format!("mcp_proxy_store_node_up{{node=\"127.0.0.1:{master}\"}} 0");
    for replica in [&a, &b] {
        assert!(metric(replica, "mcp_proxy_store_failovers_total").await >= 1);
        until("the metrics to tell the node down", true, || {
            let down = down.clone();
            async move {
                let text = metrics_text(replica).await;
                text.contains(&down) && text.matches("mcp_proxy_store_master{").count() == 3
            }
        })
        .await;
    }

    // New sessions open, whatever their slot.
    for owner in [&a, &b, &a, &b] {
        let mut fresh = Client::new(owner.addr);
        fresh.initialize("2025-11-25").await;
        assert_eq!(fresh.call_tool("counter", json!({})).await, "1");
    }

    // A replica dies after the failover: its sessions are taken over by the other.
    a.kill().await;
    for client in [&sessions[0], &sessions[2], &sessions[4]] {
        taken_over_afresh(client, &b).await;
    }
}

/// What spans sessions works on a cluster without a command of two slots: a principal's
/// sessions counted for both replicas, and a tool call taking from its principal's bucket and
/// the tool's in one script (both keys tagged with the principal).
#[tokio::test]
async fn a_principals_sessions_and_rate_buckets_are_shared_on_a_cluster() {
    let redis = RedisCluster::start().await;
    let store = redis.url();
    let config =
        std::env::temp_dir().join(format!("mcp-cluster-limits-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        "[limits]\nrequests_per_second = 1000\n[limits.tools]\necho = 0.01\n",
    )
    .unwrap();
    let flags = [
        "--config",
        config.to_str().unwrap(),
        "--max-sessions-per-principal",
        "1",
    ];
    let a = Replica::start_on(&store, "a", &flags).await;
    let b = Replica::start_on(&store, "b", &flags).await;
    let mut alice = Client::new(a.addr);
    alice.authorization = Some("Bearer alice".into());
    alice.initialize("2025-11-25").await;
    // A second session of alice's, on the other replica: refused, the first counts there too.
    let mut again = Client::new(b.addr);
    again.authorization = Some("Bearer alice".into());
    let refused = again
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": { "name": "limits", "version": "1" } } }))
        .await;
    crate::harness::assert_refused_for(refused, "max_sessions_per_principal").await;
    let mut bob = Client::new(b.addr);
    bob.authorization = Some("Bearer bob".into());
    bob.initialize("2025-11-25").await;

    // echo once through a, then through b: its bucket is shared, the other tools go on.
    assert_eq!(
        alice.call_tool("echo", json!({ "text": "once" })).await,
        "once"
    );
    let mut on_b = through(&alice, &b);
    let limited = on_b
        .post(&json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": { "name": "echo", "arguments": { "text": "twice" } } }))
        .await;
    assert_eq!(limited.status, http::StatusCode::TOO_MANY_REQUESTS);
    let limited: serde_json::Value = serde_json::from_slice(&limited.bytes().await).unwrap();
    assert_eq!(limited["error"]["code"], -32029, "{limited}");
    assert_eq!(on_b.call_tool("counter", json!({})).await, "1");
    assert_eq!(
        metric(&b, "mcp_proxy_rate_limited_tool_calls_total").await,
        1
    );
    for replica in [&a, &b] {
        let failed = replica.warned("Redis");
        assert!(failed.is_empty(), "{}: {failed:#?}", replica.name);
        let uncounted = replica.warned("could not");
        assert!(uncounted.is_empty(), "{}: {uncounted:#?}", replica.name);
    }
    let _ = std::fs::remove_file(config);
}
