//! The owners' write-behind to Redis holds at most `cluster.max_write_queue` writes, whatever
//! queues them: with Redis stopped (SIGSTOP) while a chatty stdio server (one per session, or
//! shared) talks, the proxy stops reading that server at the bound and its memory stays flat;
//! once Redis goes on (SIGCONT) every message reaches the client, in order, none dropped.

use std::time::Duration;

use crate::harness::cluster::{metric, Redis, Replica};
use crate::harness::{until, Client, Reply};
use http::StatusCode;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use tokio::sync::watch;

/// What the server sends after its answer, and about how big each message is.
const MESSAGES: u64 = 100_000;
const MESSAGE_BYTES: u64 = 1000;
/// The replica's bound on queued writes.
const BOUND: u64 = 1000;
/// How much the proxy's memory may grow while the server talks to a stopped Redis: the replay
/// window (8 MiB at most) and some slack, where 100,000 queued messages of 1 kB take 100 MB.
const GROWTH_KIB: u64 = 40 << 10;
/// How long the client may take to read every message once Redis goes on (a debug build).
const READ_ALL: Duration = Duration::from_secs(180);

#[tokio::test]
async fn a_server_is_not_read_while_redis_is_behind_and_every_message_arrives_after() {
    held_back_then_delivered(&[]).await;
}

#[tokio::test]
async fn a_shared_server_is_held_back_the_same_way() {
    held_back_then_delivered(&["--isolation", "shared"]).await;
}

/// A replica in front of `chatty` (with `options`) and a client reading its GET stream: with
/// Redis stopped the server is read up to the bound and no further, the proxy's memory stays
/// flat; once Redis goes on, every message arrives in order.
async fn held_back_then_delivered(options: &[&str]) {
    let redis = Redis::start().await;
    let server = format!(
        "python3 {}",
        shell_words::quote(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/servers/chatty.py"
        ))
    );
    let bound = BOUND.to_string();
    let replica = Replica::start(
        &redis,
        "a",
        &[
            "--stdio",
            &server,
            "--max-write-queue",
            &bound,
            // Room for the client to fall behind a little while the server talks at full speed.
            "--window-events",
            "10000",
            "--window-bytes",
            "8388608",
        ]
        .iter()
        .chain(options)
        .copied()
        .collect::<Vec<_>>(),
    )
    .await;
    let mut client = Client::new(replica.addr);
    client.initialize("2025-11-25").await;
    let stream = client.get(None).await;
    assert_eq!(stream.status, StatusCode::OK);
    let (counted, received) = watch::channel(0);
    let reader = tokio::spawn(read_numbered(stream, counted));
    assert_eq!(
        metric(&replica, "mcp_proxy_store_write_queue_limit").await,
        BOUND
    );
    let before = crate::harness::memory_kib(replica.pid(), "VmRSS");

    signal(&redis, Signal::SIGSTOP);
    let arguments = json!({ "count": MESSAGES, "bytes": MESSAGE_BYTES });
    assert_eq!(client.call_tool("chatter", arguments).await, "chattering");
    until("the write queue to reach its bound", true, || async {
        metric(&replica, "mcp_proxy_store_write_queue").await >= BOUND
    })
    .await;
    // Each failed round trip to the stopped Redis makes room once, and the reader pauses again:
    // two pauses, and the server has been held back for at least one round trip's timeout.
    // A reader that does not wait for room never pauses: this times out, with every message
    // read at once and queued (some 190,000 writes, VmRSS about 160 MB).
    until("the server's reader to pause twice", true, || async {
        metric(&replica, "mcp_proxy_store_upstream_reads_paused_total").await >= 2
    })
    .await;
    let held = *received.borrow();
    let during = crate::harness::memory_kib(replica.pid(), "VmRSS");
    let peak = crate::harness::memory_kib(replica.pid(), "VmHWM");
    eprintln!(
        "Redis stopped: {held} of {MESSAGES} messages delivered; proxy VmRSS {before} KiB before, \
         {during} KiB while held back, VmHWM {peak} KiB"
    );
    assert!(
        held < MESSAGES / 2,
        "the server was held back: {held} messages read"
    );
    assert!(
        peak < before + GROWTH_KIB,
        "the proxy's memory grew from {before} KiB to a peak of {peak} KiB"
    );

    signal(&redis, Signal::SIGCONT);
    let delivered = tokio::time::timeout(READ_ALL, reader)
        .await
        .expect("every message within the bound")
        .unwrap();
    assert_eq!(delivered, Ok(MESSAGES), "every message, once, in order");
    until("the write queue to drain", 0, || {
        metric(&replica, "mcp_proxy_store_write_queue")
    })
    .await;
    eprintln!(
        "Redis going on: proxy VmHWM {} KiB",
        crate::harness::memory_kib(replica.pid(), "VmHWM")
    );
}

/// Reads `chatty`'s log messages off `stream`, counting them in `counted`: how many arrived,
/// numbered 0, 1, 2… with nothing else between them; or the first that broke the order.
async fn read_numbered(mut stream: Reply, counted: watch::Sender<u64>) -> Result<u64, String> {
    let mut next = 0;
    while next < MESSAGES {
        let Some(received) = stream.next_message().await else {
            return Err(format!("the stream ended after {next} messages"));
        };
        let message = received.message;
        if message["method"] != "notifications/message" || message["params"]["data"]["n"] != next {
            return Err(format!("message {next} expected, {message} came"));
        }
        next += 1;
        counted.send_replace(next);
    }
    Ok(next)
}

fn signal(redis: &Redis, signal: Signal) {
    kill(Pid::from_raw(redis.pid()), signal)
        .unwrap_or_else(|e| panic!("{signal} to redis-server: {e}"));
}
