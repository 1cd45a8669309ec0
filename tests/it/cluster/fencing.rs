//! A deposed owner is fenced: a replica paused (SIGSTOP) past its `owner_timeout` while another
//! replica takes its session over comes back (SIGCONT) with no Redis error and its own copy of
//! the session. Its writes are refused (each is conditional on the owner epoch it held, which
//! the takeover changed), it drops its copy and its server, and requests that reach it follow
//! the session to its new owner: the client sees one session, one server.

use std::collections::{BTreeSet, HashMap};

use crate::harness::cluster::{metric, through, until_key, Redis, Replica, FAST_TAKEOVER};
use crate::harness::{until, Client, Proxy};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use redis::AsyncCommands;
use serde_json::json;

fn signal(replica: &Replica, signal: Signal) {
    kill(Pid::from_raw(replica.pid() as i32), signal).unwrap();
}

/// Waits until replica `name`'s heartbeat key has expired: every other replica sees it dead.
async fn seen_dead(redis: &Redis, name: &str) {
    let connection = redis.connection().await;
    let key = format!("mcp-proxy:node:{name}");
    until_key(
        "the paused replica's heartbeat to lapse",
        &connection,
        &key,
        false,
    )
    .await;
}

/// The positions of the entries of a session's log in Redis.
async fn logged(redis: &Redis, session: &str) -> Vec<u64> {
    let mut connection = redis.connection().await;
    let entries: redis::streams::StreamRangeReply = connection
        .xrange_all(format!("mcp-proxy:default:log:{session}"))
        .await
        .unwrap();
    entries
        .ids
        .iter()
        .map(|entry| entry.id.split('-').next().unwrap().parse().unwrap())
        .collect()
}

#[tokio::test]
async fn an_owner_paused_past_its_timeout_is_deposed_and_its_writes_are_refused() {
    let redis = Redis::start().await;
    // a holds its writes back 900 ms (they go to Redis together), so that a subscription it
    // took is still to be written when it is paused; it is dead 1.5 s after its last beat.
    let a = Replica::start(
        &redis,
        "a",
        &[
            "--heartbeat",
            "1s",
            "--owner-timeout",
            "1500ms",
            "--write-delay",
            "900ms",
        ],
    )
    .await;
    let b = Replica::start(&redis, "b", &FAST_TAKEOVER).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    let session = on_a.session.clone().unwrap();
    assert_eq!(on_a.call_tool("counter", json!({})).await, "1");
    assert_eq!(on_a.call_tool("counter", json!({})).await, "2");
    on_a.request(
        "resources/subscribe",
        json!({ "uri": "demo://written-late" }),
    )
    .await;
    signal(&a, Signal::SIGSTOP);
    let mut connection = redis.connection().await;
    let subs_key = format!("mcp-proxy:default:subs:{session}");
    let subscribed: BTreeSet<String> = connection.smembers(&subs_key).await.unwrap();
    assert!(
        subscribed.is_empty(),
        "a was paused before it wrote the subscription: {subscribed:?}"
    );

    // b sees a dead and takes the session over at the next request through it: a server of its
    // own (a child: the count starts again).
    seen_dead(&redis, "a").await;
    let mut on_b = through(&on_a, &b);
    assert_eq!(on_b.call_tool("counter", json!({})).await, "1");
    assert_eq!(metric(&b, "mcp_proxy_sessions_taken_over_total").await, 1);
    let at_takeover = logged(&redis, &session).await;

    // a wakes up with no Redis error. A request through it is served by b's server: a's copy
    // is not served (its count would say 3).
    signal(&a, Signal::SIGCONT);
    assert_eq!(on_a.call_tool("counter", json!({})).await, "2");
    assert_eq!(on_b.call_tool("counter", json!({})).await, "3");
    assert_eq!(on_a.call_tool("counter", json!({})).await, "4");

    // a counts and says it was deposed; what it still had to write (the subscription) was
    // refused once written at all.
    until("a to count the deposed session", 1, || {
        metric(&a, "mcp_proxy_sessions_deposed_total")
    })
    .await;
    assert_eq!(metric(&a, "mcp_proxy_sessions_open").await, 0);
    until("a's writes to be done with", 0, || {
        metric(&a, "mcp_proxy_store_write_queue")
    })
    .await;
    assert!(
        !a.warned("session deposed").is_empty(),
        "{:?}",
        a.warnings.lock().unwrap()
    );
    let subscribed: BTreeSet<String> = connection.smembers(&subs_key).await.unwrap();
    assert!(
        subscribed.is_empty(),
        "nothing of a's reached Redis after the takeover: {subscribed:?}"
    );
    let record: HashMap<String, String> = connection
        .hgetall(format!("mcp-proxy:default:session:{session}"))
        .await
        .unwrap();
    assert_eq!(record["owner"], "b", "{record:?}");
    // The log: a's entries (positions in the first block of 2^32) are those of before the
    // takeover; what came after is b's (positions in a block of its own), each once, in order.
    let now = logged(&redis, &session).await;
    let of_a = |log: &[u64]| -> Vec<u64> { log.iter().copied().filter(|s| s >> 32 == 0).collect() };
    assert_eq!(
        of_a(&now),
        of_a(&at_takeover),
        "nothing of a's was logged after the takeover"
    );
    assert!(now.windows(2).all(|pair| pair[0] < pair[1]), "{now:?}");
    // One server: b's child counts on, whichever replica is asked.
    assert_eq!(on_b.call_tool("counter", json!({})).await, "5");
    assert_eq!(metric(&b, "mcp_proxy_sessions_deposed_total").await, 0);
}

#[tokio::test]
async fn a_deposed_owner_leaves_the_servers_session_to_the_new_owner() {
    let redis = Redis::start().await;
    let server = Proxy::start().await;
    let url = format!("http://{}/mcp", server.addr());
    let options = [
        &FAST_TAKEOVER[..],
        &["--http", &url, "--upstream-protocol", "legacy"],
    ]
    .concat();
    let a = Replica::start(&redis, "a", &options).await;
    let b = Replica::start(&redis, "b", &options).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    assert_eq!(on_a.call_tool("counter", json!({})).await, "1");

    signal(&a, Signal::SIGSTOP);
    seen_dead(&redis, "a").await;
    let mut on_b = through(&on_a, &b);
    assert_eq!(
        on_b.call_tool("counter", json!({})).await,
        "2",
        "b goes on in the server's session"
    );
    signal(&a, Signal::SIGCONT);
    assert_eq!(on_a.call_tool("counter", json!({})).await, "3");
    until("a to count the deposed session", 1, || {
        metric(&a, "mcp_proxy_sessions_deposed_total")
    })
    .await;
    // a let its copy go without ending the server's session: b's next call counts on in it.
    assert_eq!(on_b.call_tool("counter", json!({})).await, "4");
    assert_eq!(server.metric("mcp_proxy_sessions_open"), 1);
    assert_eq!(server.metric("mcp_proxy_sessions_created_total"), 1);
    assert_eq!(on_a.call_tool("counter", json!({})).await, "5");
    server.stop().await;
}
