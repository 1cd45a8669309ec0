//! `session.max_sessions_per_principal` across replicas on one real Redis: a principal gets its
//! limit in all, wherever its sessions land; a session ended frees its place everywhere; a
//! replica killed with sessions holds their places only as long as their records live; a
//! session taken over counts once; and while Redis cannot count, each replica counts its own.

use crate::harness::cluster::{call_until_served, metric, Redis, Replica, FAST_TAKEOVER};
use crate::harness::Client;
use http::StatusCode;
use redis::AsyncCommands;
use serde_json::json;

const LIMIT_TWO: [&str; 2] = ["--max-sessions-per-principal", "2"];
const LIMIT_ONE: [&str; 2] = ["--max-sessions-per-principal", "1"];

fn client_of(replica: &Replica, principal: &str) -> Client {
    let mut client = Client::new(replica.addr);
    client.authorization = Some(format!("Bearer {principal}"));
    client
}

/// A new session of `principal` on `replica`.
async fn opened(replica: &Replica, principal: &str) -> Client {
    let mut client = client_of(replica, principal);
    client.initialize("2025-11-25").await;
    client
}

/// Asserts that `principal` may open no more sessions on `replica`: 503 with `Retry-After`,
/// naming the limit, counted as such.
async fn assert_refused(replica: &Replica, principal: &str, refused_so_far: u64) {
    let reply = client_of(replica, principal)
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": { "name": "limits", "version": "1" } } }))
        .await;
    crate::harness::assert_refused_for(reply, "max_sessions_per_principal").await;
    let counted = metric(
        replica,
        "mcp_proxy_sessions_rejected_total{server=\"default\",reason=\"per_principal\"}",
    )
    .await;
    assert_eq!(counted, refused_so_far);
}

#[tokio::test]
async fn replicas_share_each_principals_session_limit() {
    let mut redis = Redis::start().await;
    let a = Replica::start(&redis, "a", &LIMIT_TWO).await;
    let b = Replica::start(&redis, "b", &LIMIT_TWO).await;
    let first = opened(&a, "alice").await;
    let second = opened(&b, "alice").await;
    assert_refused(&a, "alice", 1).await;
    assert_refused(&b, "alice", 1).await;

    // Counted in one set named by a digest of the principal, never by its credential.
    let mut connection = redis.connection().await;
    let sets: Vec<String> = connection
        .keys("mcp-proxy:default:principal:*")
        .await
        .unwrap();
    assert_eq!(sets.len(), 1, "{sets:?}");
    assert!(!sets[0].contains("alice"), "{sets:?}");
    let mut counted: Vec<String> = connection.zrange(&sets[0], 0, -1).await.unwrap();
    counted.sort();
    let mut ids = [&first, &second].map(|client| client.session.clone().unwrap());
    ids.sort();
    assert_eq!(counted, ids, "the sessions' ids");
    let ttl: i64 = connection.pttl(&sets[0]).await.unwrap();
    assert!(ttl > 0, "it lives as long as its sessions' records: {ttl}");

    // Another principal has a limit of its own.
    let _bob = opened(&a, "bob").await;
    let _bob_again = opened(&b, "bob").await;

    // A session ended on one replica frees its place on every one.
    assert_eq!(second.delete().await, StatusCode::OK);
    let _third = opened(&a, "alice").await;
    assert_refused(&b, "alice", 2).await;
    redis.stop().await;
}

#[tokio::test]
async fn a_killed_replicas_sessions_count_until_their_records_expire() {
    let mut redis = Redis::start().await;
    // Records expire 1.5 s after their last write (the idle TTL and the owner timeout).
    let flags = [&FAST_TAKEOVER[..], &LIMIT_ONE[..], &["--idle-ttl", "1s"]].concat();
    let a = Replica::start(&redis, "a", &flags).await;
    let mut b = Replica::start(&redis, "b", &flags).await;
    let on_b = opened(&b, "alice").await;
    b.kill().await;
    // Its session lives on in Redis (another replica would take it over): it still counts.
    assert_refused(&a, "alice", 1).await;

    // Its record expires, as its TTL makes it do when nobody uses the session; from then on
    // it no longer counts.
    let record = format!("mcp-proxy:default:session:{}", on_b.session.unwrap());
    let connection = redis.connection().await;
    crate::harness::until("the record to expire", true, || {
        let (mut connection, record) = (connection.clone(), record.clone());
        async move { !connection.exists::<_, bool>(&record).await.unwrap() }
    })
    .await;
    let _fresh = opened(&a, "alice").await;
    assert_refused(&a, "alice", 2).await;
    redis.stop().await;
}

#[tokio::test]
async fn a_session_taken_over_counts_once() {
    let mut redis = Redis::start().await;
    let a = Replica::start(&redis, "a", &[&FAST_TAKEOVER[..], &LIMIT_ONE[..]].concat()).await;
    let mut b = Replica::start(&redis, "b", &[&FAST_TAKEOVER[..], &LIMIT_ONE[..]].concat()).await;
    let on_b = opened(&b, "alice").await;
    b.kill().await;

    // The session goes on on a: taken over, though its principal is at its limit.
    let mut on_a = on_b.clone();
    on_a.addr = a.addr;
    let echoed = call_until_served("the takeover", &on_a, "echo", json!({ "text": "on" })).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "on", "{echoed}");
    assert_eq!(metric(&a, "mcp_proxy_sessions_taken_over_total").await, 1);
    assert_refused(&a, "alice", 1).await;
    assert_eq!(on_a.delete().await, StatusCode::OK);
    let _fresh = opened(&a, "alice").await;
    redis.stop().await;
}

#[tokio::test]
async fn while_redis_cannot_count_each_replica_counts_its_own() {
    let mut redis = Redis::start().await;
    let a = Replica::start(&redis, "a", &LIMIT_ONE).await;
    let b = Replica::start(&redis, "b", &LIMIT_ONE).await;
    // Redis answers everything but scripts.
    let mut connection = redis.connection().await;
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-eval")
        .query_async(&mut connection)
        .await
        .unwrap();
    let _on_a = opened(&a, "alice").await;
    assert_refused(&a, "alice", 1).await;
    let _on_b = opened(&b, "alice").await;
    crate::harness::eventually("the warning", || {
        !a.warned("could not be counted in Redis").is_empty()
    })
    .await;
    assert_eq!(
        a.warned("could not be counted in Redis").len(),
        1,
        "said once"
    );
    redis.stop().await;
}
