//! Replicas on Redis with Sentinel: the master found through three Sentinels, and followed
//! when it is killed and the Sentinels promote its replica. Every session whose owner lives goes
//! on (its server's count continues, its replay window intact, never a 404), new sessions open
//! once the new master is there, and a replica's sessions are still taken over after the
//! failover. Real `redis-server` processes: a master, its replica, three Sentinels.

use serde_json::json;

use crate::harness::cluster::{call_until_served, metric, through, Replica, FAST_TAKEOVER};
use crate::harness::sentinel::Sentinels;
use crate::harness::{within, Client};

#[tokio::test]
async fn a_killed_master_is_followed_and_every_live_session_goes_on() {
    let mut redis = Sentinels::start().await;
    let store = redis.url();
    let mut a = Replica::start_on(&store, "a", &FAST_TAKEOVER).await;
    let b = Replica::start_on(&store, "b", &FAST_TAKEOVER).await;

    // Sessions on both replicas, each with a count of 1 and a logged stream.
    let mut sessions = Vec::new();
    for (n, owner) in [&a, &b, &a, &b].into_iter().enumerate() {
        let mut client = Client::new(owner.addr);
        client.initialize("2025-11-25").await;
        assert_eq!(
            client.call_tool("counter", json!({})).await,
            "1",
            "session {n}"
        );
        sessions.push(client);
    }
    let call = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": { "name": "progress", "arguments": { "steps": 3, "delay_ms": 2 },
                    "_meta": { "progressToken": "before" } } });
    let logged = within(
        "a logged stream",
        sessions[1].post(&call).await.remaining_messages(),
    )
    .await;
    assert_eq!(logged.len(), 4, "three steps and the answer");

    redis.kill_master().await;
    redis.until_promoted().await;

    // Every session goes on where its owner lives, through either replica: its count continues.
    for (n, client) in sessions.iter().enumerate() {
        let other = if n % 2 == 0 { &b } else { &a };
        for (via, client, count) in [
            ("its owner", client.clone(), "2"),
            ("the other replica", through(client, other), "3"),
        ] {
            let answer =
                call_until_served("a call after the failover", &client, "counter", json!({})).await;
            assert_eq!(
                answer["result"]["content"][0]["text"], count,
                "session {n} via {via}: {answer}"
            );
        }
    }
    // The replay window is intact: the stream logged before the failover resumes whole.
    let resumed = within(
        "the stream resumed",
        through(&sessions[1], &a)
            .get(logged[0].id.as_deref())
            .await
            .remaining_messages(),
    )
    .await;
    let resumed: Vec<_> = resumed.iter().map(|m| m.message.clone()).collect();
    let expected: Vec<_> = logged[1..].iter().map(|m| m.message.clone()).collect();
    assert_eq!(resumed, expected);
    assert!(metric(&a, "mcp_proxy_store_failovers_total").await >= 1);
    assert!(metric(&b, "mcp_proxy_store_failovers_total").await >= 1);

    // New sessions open on the new master.
    let mut fresh = Client::new(b.addr);
    fresh.initialize("2025-11-25").await;
    assert_eq!(fresh.call_tool("counter", json!({})).await, "1");

    // A replica dies after the failover: its sessions are taken over by the other.
    a.kill().await;
    let answer = call_until_served(
        "a session of the dead replica taken over",
        &through(&sessions[0], &b),
        "counter",
        json!({}),
    )
    .await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "1",
        "a fresh server"
    );
}
