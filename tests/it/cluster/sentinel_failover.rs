//! Replicas on Redis with Sentinel: the master found through three Sentinels, and followed
//! when it is killed and the Sentinels promote its replica. Every session whose owner lives goes
//! on (its server's count continues, its replay window intact, never a 404), new sessions open
//! once the new master is there, and a replica's sessions are still taken over after the
//! failover; a planned failover (`SENTINEL FAILOVER`) is followed as soon as the Sentinels
//! announce it, under calls, none failing and nothing warned. Real `redis-server` processes: a
//! master, its replica, three Sentinels.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::StatusCode;
use serde_json::json;

use crate::harness::cluster::Redis;
use crate::harness::cluster::{
    call_until_served, each_session_counts_on, metric, metrics_text, resumes_whole,
    sessions_with_a_logged_stream, taken_over_afresh, through, Replica, FAST_TAKEOVER,
};
use crate::harness::sentinel::Sentinels;
use crate::harness::{eventually, Client, Received};

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

/// `SENTINEL FAILOVER` while calls go on through both replicas: the Sentinels announce the new
/// master (`+switch-master`) and each replica moves to it at once, while the old master still
/// answers as one (the Sentinels make it a replica seconds later). No call fails, no new
/// session is refused, neither replica warns, every stream logged before the move resumes
/// whole through the replica that does not own its session, and each replica followed one
/// master once (three Sentinels announce it).
#[tokio::test]
async fn a_planned_failover_is_followed_when_announced_and_no_call_fails() {
    let redis = Sentinels::start().await;
    let store = redis.url();
    // A window that holds every event of the test's calls: each stream can be resumed at the end.
    let mut flags = FAST_TAKEOVER.to_vec();
    flags.extend(["--window-events", "65536", "--window-bytes", "67108864"]);
    let a = Replica::start_on(&store, "a", &flags).await;
    let b = Replica::start_on(&store, "b", &flags).await;
    let (sessions, logged) = sessions_with_a_logged_stream(&a, &b, 2).await;

    let calls = Calls::start(sessions.clone(), [a.addr, b.addr]);
    eventually("calls before the failover", || calls.made() >= 40).await;
    let asked = Instant::now();
    let announced = redis.planned_failover().await;
    for replica in [&a, &b] {
        eventually("the replica to follow the announced master", || {
            !replica.masters_followed.lock().unwrap().is_empty()
        })
        .await;
    }
    let followed_first = redis.old_master_still_answers_as_one().await;
    let mut moved = announced;
    for replica in [&a, &b] {
        let at = replica.masters_followed.lock().unwrap()[0];
        moved = moved.max(at);
        println!(
            "replica {} followed the new master {:.0} ms after the announcement",
            replica.name,
            signed_ms(at, announced)
        );
    }
    assert!(
        followed_first,
        "both replicas followed the new master before the old one was made a replica"
    );

    // Calls go on until the old master is a replica of the new one, and a while after.
    redis.until_old_master_follows().await;
    let made = calls.made();
    eventually("calls after the old master is a replica", || {
        calls.made() >= made + 40
    })
    .await;
    let (made, failed, streams) = calls.stop().await;
    println!("{made} calls, {} failed", failed.len());
    assert!(failed.is_empty(), "{failed:#?}");

    for replica in [&a, &b] {
        let warnings = replica.warnings.lock().unwrap().clone();
        assert!(warnings.is_empty(), "{}: {warnings:#?}", replica.name);
        assert_eq!(replica.masters_followed.lock().unwrap().len(), 1);
        assert_eq!(metric(replica, "mcp_proxy_store_failovers_total").await, 1);
        let promoted = format!(
            "mcp_proxy_store_master{{address=\"127.0.0.1:{}\"}} 1",
            redis.replica.port
        );
        assert!(metrics_text(replica).await.contains(&promoted));
    }
    // Every stream logged before the move resumes whole through the replica that does not own
    // its session: it reads the log from the new master.
    resumes_whole(&sessions[1], &a, &logged).await;
    let around = asked - Duration::from_secs(1)..=moved;
    let mut resumed = 0;
    for (n, at, stream) in &streams {
        if around.contains(at) {
            let other = if n % 2 == 0 { &b } else { &a };
            resumes_whole(&sessions[*n], other, stream).await;
            resumed += 1;
        }
    }
    println!("{resumed} streams logged around the move resumed whole");
    assert!(resumed > 0);
}

/// Milliseconds from `from` to `to`, negative when `to` came first.
fn signed_ms(to: Instant, from: Instant) -> f64 {
    match to.checked_duration_since(from) {
        Some(after) => after.as_secs_f64() * 1e3,
        None => -(from - to).as_secs_f64() * 1e3,
    }
}

/// A session's stream as received: the session's index, when, its messages.
type Logged = (usize, Instant, Vec<Received>);

/// Calls going on until stopped, one at a time: each session in turn (even ones owned by the
/// first replica, odd ones by the second) through one replica and then the other, a `counter`
/// whose count must go on and a `progress` whose stream is kept, and now and then a new
/// session, one call, and its end. Anything but an answer, or a count that does not follow,
/// is a failure.
struct Calls {
    stop: Arc<AtomicBool>,
    made: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<(Vec<String>, Vec<Logged>)>,
}

impl Calls {
    fn start(sessions: Vec<Client>, replicas: [std::net::SocketAddr; 2]) -> Calls {
        let stop = Arc::new(AtomicBool::new(false));
        let made = Arc::new(AtomicU64::new(0));
        let (stopped, counted) = (stop.clone(), made.clone());
        let task = tokio::spawn(async move {
            let mut counts = vec![1u64; sessions.len()];
            let (mut failed, mut streams) = (Vec::new(), Vec::new());
            for round in 0.. {
                if stopped.load(Ordering::Acquire) {
                    break;
                }
                for (n, session) in sessions.iter().enumerate() {
                    let mut client = session.clone();
                    client.addr = replicas[(n + round) % 2];
                    counts[n] += 1;
                    match counted_on(&client, counts[n]).await {
                        Ok(()) => {}
                        Err((why, count)) => {
                            failed.push(format!("session {n} round {round}: {why}"));
                            counts[n] = count.unwrap_or(counts[n]);
                        }
                    }
                    match streamed(&client, round).await {
                        Ok(stream) => streams.push((n, Instant::now(), stream)),
                        Err(why) => failed.push(format!("session {n} round {round}: {why}")),
                    }
                    counted.fetch_add(2, Ordering::AcqRel);
                }
                if round % 5 == 0 {
                    let mut fresh = Client::new(replicas[round % 2]);
                    if let Err(status) = fresh.try_initialize("2025-11-25").await {
                        failed.push(format!("a new session in round {round}: {status}"));
                        continue;
                    }
                    if let Err((why, _)) = counted_on(&fresh, 1).await {
                        failed.push(format!("a new session in round {round}: {why}"));
                    }
                    let ended = fresh.delete().await;
                    if !ended.is_success() {
                        failed.push(format!("a new session's end in round {round}: {ended}"));
                    }
                    counted.fetch_add(3, Ordering::AcqRel);
                }
            }
            (failed, streams)
        });
        Calls { stop, made, task }
    }

    /// How many calls were made so far.
    fn made(&self) -> u64 {
        self.made.load(Ordering::Acquire)
    }

    /// Stops them: how many were made, what failed, the streams received.
    async fn stop(self) -> (u64, Vec<String>, Vec<Logged>) {
        self.stop.store(true, Ordering::Release);
        let (failed, streams) = crate::harness::within("the calls to stop", self.task)
            .await
            .expect("the calls go on without a panic");
        (self.made.load(Ordering::Acquire), failed, streams)
    }
}

/// Calls `counter` through `client`: an answer saying `count`, or why not (and the count it
/// said, if any).
async fn counted_on(client: &Client, count: u64) -> Result<(), (String, Option<u64>)> {
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": { "name": "counter", "arguments": {} } }))
        .await;
    if reply.status != StatusCode::OK {
        return Err((format!("counter answered {}", reply.status), None));
    }
    let answer = reply.response().await;
    let said = answer["result"]["content"][0]["text"].as_str();
    match said.and_then(|text| text.parse::<u64>().ok()) {
        Some(said) if said == count => Ok(()),
        said => Err((format!("counter said {answer}, not {count}"), said)),
    }
}

/// Calls `progress` with one step through `client`: its stream (the step and the answer), or
/// why not.
async fn streamed(client: &Client, round: usize) -> Result<Vec<Received>, String> {
    let mut reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": { "name": "progress", "arguments": { "steps": 1, "delay_ms": 0 },
                        "_meta": { "progressToken": format!("round-{round}") } } }))
        .await;
    if reply.status != StatusCode::OK || !reply.is_sse() {
        return Err(format!("progress answered {}", reply.status));
    }
    let stream = reply.remaining_messages().await;
    match stream.last() {
        Some(last) if stream.len() == 2 && last.message.get("result").is_some() => Ok(stream),
        _ => Err(format!("progress streamed {stream:?}")),
    }
}

/// A Sentinel (or the network between) that announces a master which is not one, a replica here
/// (a failover since undone, an announcement arriving late), moves nothing: the store checks
/// that the announced server says it is a master, stays on the one in use, and new sessions go
/// on opening. A Sentinel of the test's own, which announces what it is told.
#[tokio::test]
async fn an_announced_master_that_is_not_one_is_not_followed() {
    let master = Redis::start().await;
    let replica = Redis::start_with(
        None,
        vec![format!("replicaof 127.0.0.1 {}", master.port)],
        false,
    )
    .await;
    let port = crate::harness::free_port();
    let (_sentinel, listening, mut said) = crate::harness::spawn_announcing(
        "the test's Sentinel",
        crate::harness::python_script("../servers/fake_sentinel.py")
            .args([port.to_string(), master.port.to_string()]),
    )
    .await;
    assert_eq!(listening, "listening");
    let store = format!("redis+sentinel://127.0.0.1:{port}/mcp-store/0");
    let a = Replica::start_on(&store, "a", &[]).await;
    crate::harness::within("the store to hear the Sentinel", async {
        while said.next_line().await.unwrap().as_deref() != Some("subscribed") {}
    })
    .await;

    let mut sentinel = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let stale = format!(
        "mcp-store 127.0.0.1 {} 127.0.0.1 {}",
        master.port, replica.port
    );
    let heard: i64 = redis::cmd("ANNOUNCE")
        .arg(stale)
        .query_async(&mut sentinel)
        .await
        .unwrap();
    assert!(heard >= 1, "the store hears the announcement");
    crate::harness::until("the announcement to be turned down", true, || async {
        a.store_said("a Sentinel announced a master that does not say it is one: not followed")
    })
    .await;

    let in_use = format!(
        "mcp_proxy_store_master{{address=\"127.0.0.1:{}\"}} 1",
        master.port
    );
    let text = metrics_text(&a).await;
    assert!(text.contains(&in_use), "{text}");
    assert_eq!(metric(&a, "mcp_proxy_store_failovers_total").await, 0);
    let mut fresh = Client::new(a.addr);
    fresh.initialize("2025-11-25").await;
    assert_eq!(fresh.call_tool("counter", json!({})).await, "1");
    assert!(a.warned("").is_empty(), "{:?}", a.warned(""));
}
