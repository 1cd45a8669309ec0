//! Replicas under the faults that used to lose events or answer 404 for live sessions: GET
//! streams held on a replica that does not own the session, owners restarted at the same
//! address, a slow link to Redis, a session not yet in Redis, positions ahead of the log.

use std::collections::HashMap;
use std::time::Duration;

use crate::harness::cluster::{
    a_session_on_a, call_until_served, metric, recording_relay, through, until_key, Redis, Replica,
    FAST_TAKEOVER,
};
use crate::harness::{free_port, until, within, Client};
use http::StatusCode;
use redis::AsyncCommands;
use serde_json::{json, Value};

/// (tag, index) of a tagged `resources/updated`, and its URI.
fn tagged(update: &Value) -> (String, u64, String) {
    let meta = &update["params"]["_meta"];
    (
        meta["demo/tag"].as_str().unwrap_or_default().to_owned(),
        meta["demo/index"].as_u64().unwrap_or(u64::MAX),
        update["params"]["uri"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn a_get_stream_on_a_replica_that_does_not_own_the_session_receives_every_update() {
    let redis = Redis::start().await;
    let (a, b, on_a) = a_session_on_a(&redis).await;
    let mut on_b = through(&on_a, &b);
    let mut stream = on_b.get(None).await;
    assert_eq!(stream.status, StatusCode::OK);
    let uris = ["demo://doc/0", "demo://doc/1", "demo://doc/2"];
    for n in 0..150 {
        let tag = format!("c{n}");
        on_b.call_tool(
            "emit_updates",
            json!({ "uris": uris, "count": 3, "tag": tag }),
        )
        .await;
    }
    let mut received = Vec::new();
    while received.len() < 450 {
        let update = stream
            .next_with_method("notifications/resources/updated")
            .await;
        received.push(tagged(&update));
    }
    let expected: Vec<(String, u64, String)> = (0..150)
        .flat_map(|n| (0..3).map(move |i| (format!("c{n}"), i, uris[i as usize].to_owned())))
        .collect();
    assert_eq!(received, expected, "every update, once, in order");

    // Read again from the start, on either replica: what a client catches up on is the latest
    // update of each URI, the same wherever it reads.
    for replica in [&a, &b] {
        let mut again = through(&on_a, replica).get(Some("g.0")).await;
        assert_eq!(again.status, StatusCode::OK);
        let mut latest = Vec::new();
        while latest.len() < 3 {
            let update = again
                .next_with_method("notifications/resources/updated")
                .await;
            latest.push(tagged(&update));
        }
        let newest: Vec<(String, u64, String)> = (0..3)
            .map(|i| ("c149".to_owned(), i, uris[i as usize].to_owned()))
            .collect();
        assert_eq!(latest, newest, "on {}", replica.name);
    }

    // With no fault, following the log never fails: wait until any blocking read of it (2 s)
    // has run out, as Redis shows the follower's client: blocked in XREAD for a second or more
    // and then in a new one, or not blocked and idle past a block and a second.
    let mut redis_connection = redis.connection().await;
    let mut follower = async || -> Option<(String, bool, u64)> {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut redis_connection)
            .await
            .unwrap();
        clients.lines().find_map(|client| {
            let field = |name: &str| {
                client
                    .split(' ')
                    .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            };
            (field("cmd")? == "xread").then_some(())?;
            let blocked = field("flags")?.contains('b');
            Some((
                field("id")?.to_owned(),
                blocked,
                field("idle")?.parse().ok()?,
            ))
        })
    };
    let mut waited_a_second = None;
    within("a blocking read of the log to run out", async {
        loop {
            match (follower().await, &waited_a_second) {
                (Some((_, false, 3..)), _) => break,
                (Some((id, true, 0)), Some(waited)) if id == *waited => break,
                (Some((id, true, 1..)), _) => waited_a_second = Some(id),
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(metric(&b, "mcp_proxy_store_errors_total").await, 0);
    assert_eq!(b.warned("Redis").len(), 0, "{:?}", b.warned("Redis"));
}

#[tokio::test]
async fn live_sessions_are_never_404_while_their_owner_restarts_at_the_same_address() {
    let redis = Redis::start().await;
    let mut a = Replica::start_unnamed(&redis, &FAST_TAKEOVER).await;
    let b = Replica::start_unnamed(&redis, &FAST_TAKEOVER).await;
    let c = Replica::start_unnamed(&redis, &FAST_TAKEOVER).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    // b and c each serve the session once: both hold views of it, linked to a.
    assert_eq!(
        through(&on_a, &b).call_tool("counter", json!({})).await,
        "1"
    );
    assert_eq!(
        through(&on_a, &c).call_tool("counter", json!({})).await,
        "2"
    );

    a.kill().await;
    a.restart(&redis).await; // same address, another name: it knows nothing of the session
    let restarted = metric(&a, "mcp_proxy_sessions_open").await;
    assert_eq!(restarted, 0);
    // Through every replica, a 503 with Retry-After until the session is served again (taken
    // over once a's heartbeat has lapsed), never a 404.
    for replica in [&b, &c, &a] {
        let reply = call_until_served(
            "the session to be served again",
            &through(&on_a, replica),
            "echo",
            json!({ "text": "alive" }),
        )
        .await;
        assert_eq!(reply["result"]["content"][0]["text"], "alive", "{reply}");
    }
    let takeovers = metric(&b, "mcp_proxy_sessions_taken_over_total").await
        + metric(&c, "mcp_proxy_sessions_taken_over_total").await
        + metric(&a, "mcp_proxy_sessions_taken_over_total").await;
    assert_eq!(takeovers, 1, "one replica took it over");
    // And every replica goes on serving it.
    for replica in [&a, &b, &c] {
        assert_eq!(
            through(&on_a, replica)
                .call_tool("echo", json!({ "text": "still" }))
                .await,
            "still"
        );
    }
}

#[tokio::test]
async fn a_last_event_id_ahead_of_the_log_is_refused_on_any_replica() {
    let redis = Redis::start().await;
    let (a, b, mut on_a) = a_session_on_a(&redis).await;
    let mut stream = on_a.get(None).await;
    on_a.call_tool("emit_updates", json!({ "uris": ["demo://x"], "count": 1 }))
        .await;
    let update = within("the update", stream.next_message()).await.unwrap();
    let last = update.id.unwrap();
    drop(stream);
    for replica in [&a, &b] {
        let client = through(&on_a, replica);
        let ahead = client.get(Some("g.1000000")).await;
        assert_eq!(ahead.status, StatusCode::BAD_REQUEST, "on {}", replica.name);
        let body = ahead.json().await;
        assert_eq!(body["error"]["code"], -32600);
        assert!(
            body["error"]["message"].as_str().unwrap().contains("ahead"),
            "{body}"
        );
        // The newest position the owner sent is fine on either.
        assert_eq!(client.get(Some(&last)).await.status, StatusCode::OK);
    }
}

/// A relay to Redis that holds every chunk `delay_ms` (a slow, far or overloaded link).
async fn slow_link(redis: &Redis, delay_ms: u64) -> (tokio::process::Child, u16) {
    let port = free_port();
    let (child, _, _) = crate::harness::spawn_announcing(
        "the relay",
        tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-bench"))
            .args(["relay", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--to", &format!("127.0.0.1:{}", redis.port)])
            .args(["--delay-ms", &delay_ms.to_string()]),
    )
    .await;
    (child, port)
}

#[tokio::test]
async fn behind_a_slow_link_to_redis_a_new_session_is_recorded_before_its_id_is_handed_out() {
    let redis = Redis::start().await;
    let (_relay, port) = slow_link(&redis, 150).await;
    let a = Replica::start(&Redis::at(port), "a", &[]).await;
    let b = Replica::start(&redis, "b", &[]).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    let session = on_a.session.clone().unwrap();
    // The record, with what a takeover needs, is in Redis before initialize was answered.
    let mut connection = redis.connection().await;
    let record: HashMap<String, String> = connection
        .hgetall(format!("mcp-proxy:default:session:{session}"))
        .await
        .unwrap();
    assert_eq!(
        record.get("owner").map(String::as_str),
        Some("a"),
        "{record:?}"
    );
    assert!(
        record.contains_key("init") && record.contains_key("version"),
        "{record:?}"
    );
    // The very next request, on another replica, is served.
    assert_eq!(
        through(&on_a, &b)
            .call_tool("echo", json!({ "text": "on b" }))
            .await,
        "on b"
    );
    // The write-behind lag is exposed.
    on_a.call_tool("counter", json!({})).await;
    until("the lag to be measured", true, || async {
        metric(&a, "mcp_proxy_store_write_lag_ms").await >= 150
    })
    .await;
}

#[tokio::test]
async fn a_session_redis_does_not_have_yet_is_found_through_the_replica_its_id_names() {
    let redis = Redis::start().await;
    let (_a, b, on_a) = a_session_on_a(&redis).await;
    let session = on_a.session.clone().unwrap();
    assert!(
        session.starts_with("a."),
        "the id names its replica: {session}"
    );
    // As if the record's write were still on its way.
    let mut connection = redis.connection().await;
    let _: () = connection
        .del(format!("mcp-proxy:default:session:{session}"))
        .await
        .unwrap();
    let on_b = through(&on_a, &b);
    let reply = call_until_served("b to find a", &on_b, "counter", json!({})).await;
    assert_eq!(reply["result"]["content"][0]["text"], "1", "a's server");
    // Ended on its owner, it is gone everywhere: now a 404 is the truth.
    assert_eq!(on_a.delete().await, StatusCode::OK);
    let gone = on_b
        .post(&json!({ "jsonrpc": "2.0", "id": 3, "method": "ping" }))
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
}

/// A request forwarded to an owner that dies before answering may have been carried out: the
/// client is told so (as for a request in flight at a takeover), not asked to send it again with
/// a 503 (which would run it twice).
#[tokio::test]
async fn a_request_whose_owner_dies_mid_hop_is_reported_as_maybe_carried_out() {
    let redis = Redis::start().await;
    // a holds the hop open while its server works (the answer comes with the hop).
    let mut a = Replica::start(
        &redis,
        "a",
        &[&FAST_TAKEOVER[..], &["--json-wait", "10s"]].concat(),
    )
    .await;
    let b = Replica::start(&redis, "b", &FAST_TAKEOVER).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    let session = on_a.session.clone().unwrap();
    let on_b = through(&on_a, &b);
    let call = tokio::spawn(async move {
        on_b.post(&json!({ "jsonrpc": "2.0", "id": 41, "method": "tools/call",
                           "params": { "name": "sleep", "arguments": { "ms": 5000 } } }))
            .await
    });
    // The owner has taken the request (it records requests in flight in Redis).
    let connection = redis.connection().await;
    let inflight = format!("mcp-proxy:default:inflight:{session}");
    until_key("a to take the request", &connection, &inflight, true).await;
    a.kill().await;
    let reply = within("b's answer", call).await.unwrap();
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "an answer, not a 503 to retry"
    );
    let answer = reply.response().await;
    assert_eq!(answer["id"], 41);
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("may or may not have been carried out"),
        "{answer}"
    );
}

/// A view still linked to a dead owner's address, where a restarted replica now owns the
/// session: the hop meant for the old owner is refused there before anything runs, and the
/// message runs once, on the session's new owner.
#[tokio::test]
async fn a_hop_meant_for_a_dead_owner_never_runs_on_its_successor_at_the_same_address() {
    let redis = Redis::start().await;
    let mut a = Replica::start_unnamed(&redis, &FAST_TAKEOVER).await;
    // b checks its views seldom, so the restarted a is the one that takes the session over.
    let b = Replica::start_unnamed(&redis, &["--heartbeat", "5s", "--owner-timeout", "15s"]).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    // b serves the session once: its view links to a's address and a's name.
    assert_eq!(
        through(&on_a, &b)
            .call_tool("echo", json!({ "text": "b" }))
            .await,
        "b"
    );
    a.kill().await;
    a.restart(&redis).await;
    // The restarted replica takes the session over (a fresh server, its counter at 0).
    call_until_served("a to take over", &on_a, "echo", json!({ "text": "a" })).await;
    assert_eq!(metric(&a, "mcp_proxy_sessions_taken_over_total").await, 1);
    // Through b's stale view: the counter goes to 1, once.
    let counted = call_until_served(
        "the call through b",
        &through(&on_a, &b),
        "counter",
        json!({}),
    )
    .await;
    assert_eq!(counted["result"]["content"][0]["text"], "1", "{counted}");
    assert_eq!(on_a.call_tool("counter", json!({})).await, "2");
}

/// The heads of the HTTP requests in `recorded`, lowercased.
fn request_heads(recorded: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(recorded).to_lowercase();
    text.match_indices(" /mcp http/1.1\r\n")
        .map(|(at, _)| {
            let head = &text[at..];
            head[..head.find("\r\n\r\n").unwrap_or(head.len())].to_owned()
        })
        .collect()
}

#[tokio::test]
async fn a_session_taken_over_reaches_its_server_with_the_clients_credential() {
    let redis = Redis::start().await;
    let server = crate::harness::Proxy::start().await;
    let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", relay.local_addr().unwrap());
    let target = std::sync::Arc::new(std::sync::Mutex::new(Some(server.addr())));
    let recorded = recording_relay(relay, target);
    let options = [
        &FAST_TAKEOVER[..],
        &["--http", &url, "--forward-authorization"],
    ]
    .concat();
    let mut a = Replica::start(&redis, "a", &options).await;
    let b = Replica::start(&redis, "b", &options).await;
    let mut on_a = Client::new(a.addr);
    on_a.authorization = Some("Bearer alice-token".into());
    on_a.initialize("2025-11-25").await;
    assert_eq!(on_a.call_tool("echo", json!({ "text": "hi" })).await, "hi");
    let before = recorded.lock().unwrap().len();

    a.kill().await;
    let reply = call_until_served(
        "the session to be taken over",
        &through(&on_a, &b),
        "echo",
        json!({ "text": "again" }),
    )
    .await;
    assert_eq!(reply["result"]["content"][0]["text"], "again", "{reply}");
    assert_eq!(metric(&b, "mcp_proxy_sessions_taken_over_total").await, 1);
    let after = recorded.lock().unwrap()[before..].to_vec();
    assert!(
        !String::from_utf8_lossy(&after).contains("\"initialize\""),
        "the new owner goes on in the server's session: no new initialize"
    );
    let heads = request_heads(&after);
    assert!(!heads.is_empty());
    for head in heads {
        assert!(
            head.contains("authorization: bearer alice-token"),
            "every request of the new owner carries the client's credential: {head}"
        );
    }
}

#[tokio::test]
async fn a_session_claimed_by_a_replica_at_its_limit_is_given_back_and_taken_by_another() {
    let redis = Redis::start().await;
    let mut a = Replica::start(&redis, "a", &FAST_TAKEOVER).await;
    let full: Vec<&str> = FAST_TAKEOVER
        .iter()
        .copied()
        .chain(["--max-sessions", "1"])
        .collect();
    let b = Replica::start(&redis, "b", &full).await;
    let c = Replica::start(&redis, "c", &FAST_TAKEOVER).await;
    Client::new(b.addr).initialize("2025-11-25").await; // b is full
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;

    a.kill().await;
    // b claims the session once a's heartbeat lapses, cannot open it, and gives it back.
    let on_b = through(&on_a, &b);
    within("b to give the session back", async {
        while b.warned("given back").is_empty() {
            let reply = on_b
                .post(&json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
                               "params": { "name": "echo", "arguments": { "text": "x" } } }))
                .await;
            // 503 with Retry-After while the owner is not yet declared dead or the session is
            // over b's limit; an error for a request lost with its owner; never a 404.
            assert_ne!(reply.status, StatusCode::NOT_FOUND);
            if reply.status == StatusCode::SERVICE_UNAVAILABLE {
                assert!(reply.headers.contains_key("retry-after"));
            } else {
                let answer = reply.response().await;
                assert!(answer["error"].is_object(), "b cannot serve it: {answer}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Not orphaned on b: c, which has room, takes it over and serves it.
    let reply = call_until_served(
        "c to take the session over",
        &through(&on_a, &c),
        "echo",
        json!({ "text": "served" }),
    )
    .await;
    assert_eq!(reply["result"]["content"][0]["text"], "served", "{reply}");
    assert_eq!(metric(&c, "mcp_proxy_sessions_taken_over_total").await, 1);
    assert_eq!(metric(&b, "mcp_proxy_sessions_taken_over_total").await, 0);
}

#[tokio::test]
async fn a_call_through_another_replica_waits_out_its_owners_death_instead_of_a_503() {
    let mut redis = Redis::start().await;
    let (mut a, b, on_a) = a_session_on_a(&redis).await;
    let mut on_b = through(&on_a, &b);
    assert_eq!(
        on_b.call_tool("echo", json!({ "text": "via a" })).await,
        "via a"
    );
    assert_eq!(metric(&b, "mcp_proxy_sessions_forwarded_total").await, 0);

    // kill -9 of the owner: b's next call finds it dead (refused, its heartbeat missed) and
    // takes the session over while the call waits, instead of answering 503 meanwhile.
    a.kill().await;
    assert_eq!(
        on_b.call_tool("echo", json!({ "text": "after" })).await,
        "after"
    );
    assert_eq!(metric(&b, "mcp_proxy_sessions_taken_over_total").await, 1);
    let counted = on_b.call_tool("counter", json!({})).await;
    assert_eq!(counted, "1", "a fresh server for the session");
    redis.stop().await;
}
