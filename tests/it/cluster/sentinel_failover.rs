//! Replicas on Redis with Sentinel: the master found through three Sentinels, and followed
//! when it is killed and the Sentinels promote its replica. Every session whose owner lives goes
//! on (its server's count continues, its replay window intact, never a 404), new sessions open
//! once the new master is there, and a replica's sessions are still taken over after the
//! failover. Real `redis-server` processes: a master, its replica, three Sentinels.

use serde_json::json;

use crate::harness::cluster::{
    call_until_served, each_session_counts_on, metric, metrics_text, resumes_whole,
    sessions_with_a_logged_stream, taken_over_afresh, through, Replica, FAST_TAKEOVER,
};
use crate::harness::sentinel::Sentinels;
use crate::harness::Client;

#[tokio::test]
async fn a_killed_master_is_followed_and_every_live_session_goes_on() {
    let mut redis = Sentinels::start().await;
    let store = redis.url();
    let mut a = Replica::start_on(&store, "a", &FAST_TAKEOVER).await;
    let b = Replica::start_on(&store, "b", &FAST_TAKEOVER).await;

    // Sessions on both replicas, each with a count of 1, and a logged stream.
    let (sessions, logged) = sessions_with_a_logged_stream(&a, &b, 2).await;

    redis.kill_master().await;
    redis.until_promoted().await;

    // Every session goes on where its owner lives, through either replica: its count continues.
    each_session_counts_on(&sessions, &a, &b, 1).await;
    // The replay window is intact: the stream logged before the failover resumes whole.
    resumes_whole(&sessions[1], &a, &logged).await;
    for replica in [&a, &b] {
        assert!(metric(replica, "mcp_proxy_store_failovers_total").await >= 1);
        // The master in use is the promoted replica, and only it.
        let promoted = format!(
            "mcp_proxy_store_master{{address=\"127.0.0.1:{}\"}} 1",
            redis.replica.port
        );
        crate::harness::until("the metrics to name the new master", true, || {
            let promoted = promoted.clone();
            async move {
                let text = metrics_text(replica).await;
                text.contains(&promoted) && text.matches("mcp_proxy_store_master{").count() == 1
            }
        })
        .await;
    }

    // New sessions open on the new master.
    let mut fresh = Client::new(b.addr);
    fresh.initialize("2025-11-25").await;
    assert_eq!(fresh.call_tool("counter", json!({})).await, "1");

    // A replica dies after the failover: its sessions are taken over by the other.
    a.kill().await;
    taken_over_afresh(&sessions[0], &b).await;
}

/// The master and its replica behind a password, the Sentinels behind one of their own: the
/// replicas give each where it is asked (both from files), follow a failover, and a replica
/// given a wrong Sentinel password does not start, naming the store but not the password.
#[tokio::test]
async fn the_masters_and_the_sentinels_passwords_are_given_apart_and_each_where_it_belongs() {
    const PASSWORD: &str = "redis-pw-5e0a7c21";
    const SENTINEL_PASSWORD: &str = "sentinel-pw-b3f9d0e4";
    let mut redis = Sentinels::start_with(Some(PASSWORD), Some(SENTINEL_PASSWORD), None).await;
    let store = redis.url();
    let dir = std::env::temp_dir();
    let (password, sentinel_password) = (
        dir.join(format!("mcp-sentinel-pw-{}", std::process::id())),
        dir.join(format!("mcp-sentinel-spw-{}", std::process::id())),
    );
    std::fs::write(&password, PASSWORD).unwrap();
    std::fs::write(&sentinel_password, SENTINEL_PASSWORD).unwrap();
    let flags = [
        "--store-password-file",
        password.to_str().unwrap(),
        "--store-sentinel-password-file",
        sentinel_password.to_str().unwrap(),
    ];
    through_a_failover(&mut redis, &flags).await;

    let wrong = dir.join(format!("mcp-sentinel-wrong-{}", std::process::id()));
    std::fs::write(&wrong, "not-the-sentinel-password").unwrap();
    let stderr = crate::harness::refused_start(
        &[
            "--listen",
            "127.0.0.1:0",
            "--store",
            &store,
            "--store-password-file",
            password.to_str().unwrap(),
            "--store-sentinel-password-file",
            wrong.to_str().unwrap(),
        ],
        &[("MCP_PROXY_CLUSTER_SECRET", crate::harness::cluster::SECRET)],
    )
    .await;
    assert!(stderr.contains("cannot reach the Redis store"), "{stderr}");
    assert!(
        !stderr.contains(SENTINEL_PASSWORD) && !stderr.contains(PASSWORD),
        "{stderr}"
    );
    for file in [password, sentinel_password, wrong] {
        let _ = std::fs::remove_file(file);
    }
}

/// `rediss+sentinel://`: the Sentinels, the master and its replica speak TLS only (replication
/// too), with certificates of a CA made here; the replicas trust that CA, find the master
/// through the Sentinels over TLS and follow a failover.
#[tokio::test]
async fn over_tls_the_master_is_found_through_the_sentinels_and_followed() {
    let certificates = crate::harness::tls::Certificates::make();
    let mut redis = Sentinels::start_with(None, None, Some(&certificates)).await;
    let store = redis.url();
    assert!(store.starts_with("rediss+sentinel://"), "{store}");
    let ca = certificates.arg("ca.pem");
    let flags = ["--store-ca-file", ca.as_str()];
    through_a_failover(&mut redis, &flags).await;
}

/// Two replicas started with `flags` share a session; the master is killed; the session's
/// count goes on through the other replica once the Sentinels promoted the replica.
async fn through_a_failover(redis: &mut Sentinels, flags: &[&str]) {
    let store = redis.url();
    let a = Replica::start_on(&store, "a", flags).await;
    let b = Replica::start_on(&store, "b", flags).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    assert_eq!(on_a.call_tool("counter", json!({})).await, "1");
    redis.kill_master().await;
    redis.until_promoted().await;
    let answer = call_until_served(
        "a call after the failover",
        &through(&on_a, &b),
        "counter",
        json!({}),
    )
    .await;
    assert_eq!(answer["result"]["content"][0]["text"], "2", "{answer}");
}
