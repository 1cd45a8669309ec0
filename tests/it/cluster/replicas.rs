//! Replicas sharing sessions through a real `redis-server`, as separate proxy processes on
//! 127.0.0.1: what an owner writes, and Redis trouble.

use crate::harness::cluster::{
    a_session_on_a, call_until_served, metric, through, until_key, Redis, Replica, FAST_TAKEOVER,
    SECRET,
};
use crate::harness::{free_port, modern_request, until, within, Client, DEMO};
use http::StatusCode;
use redis::AsyncCommands;
use serde_json::json;
use std::collections::HashMap;

#[tokio::test]
async fn redis_down_at_start_up_is_a_clear_error() {
    let unused = free_port();
    let output = within(
        "the proxy to give up",
        tokio::process::Command::new(DEMO)
            .args(["--listen", "127.0.0.1:0"])
            .args(["--store", &format!("redis://127.0.0.1:{unused}/0")])
            .env("MCP_PROXY_CLUSTER_SECRET", SECRET)
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
    // Two progress notifications, then the answer: an SSE stream a client may resume.
    let progressed = client
        .request(
            "tools/call",
            json!({ "name": "progress", "arguments": { "steps": 2 },
                                       "_meta": { "progressToken": "p" } }),
        )
        .await;
    assert!(progressed["result"].is_object(), "{progressed}");

    let mut redis_connection = redis.connection().await;
    let record_key = format!("mcp-proxy:default:session:{session}");
    let log_key = format!("mcp-proxy:default:log:{session}");
    let subs_key = format!("mcp-proxy:default:subs:{session}");
    until("the record and log to be written", true, || {
        let mut c = redis_connection.clone();
        let (subs_key, log_key) = (subs_key.clone(), log_key.clone());
        async move {
            let subs: bool = c.sismember(&subs_key, "demo://counter").await.unwrap();
            let logged: usize = c.xlen(&log_key).await.unwrap();
            subs && logged >= 3
        }
    })
    .await;
    // Answers given as JSON (initialize, subscribe) can never be resumed: not kept.
    let logged: usize = redis_connection.xlen(&log_key).await.unwrap();
    assert_eq!(logged, 3, "only the stream a client may resume");
    let record: HashMap<String, String> = redis_connection.hgetall(&record_key).await.unwrap();
    assert_eq!(record["owner"], "a");
    assert_eq!(record["shape"], "streams");
    assert_eq!(record["version"], "2025-11-25");
    assert!(record["init"].contains("clientInfo"), "{record:?}");
    let subs: Vec<String> = redis_connection.smembers(&subs_key).await.unwrap();
    assert_eq!(subs, ["demo://counter"]);
    assert!(record["upstream"].contains("demo-server"), "{record:?}");
    let node: String = redis_connection.get("mcp-proxy:node:a").await.unwrap();
    assert_eq!(node, format!("http://{}", a.addr));

    assert_eq!(client.delete().await, StatusCode::OK);
    until_key("the keys to go", &redis_connection, &record_key, false).await;
}

/// Requests answered within the write delay cost Redis nothing: neither their being in flight
/// nor their answer is written, a record field set at every request is written with its last
/// value, and no key is left without a TTL.
#[tokio::test]
async fn requests_answered_within_the_write_delay_never_reach_redis() {
    let redis = Redis::start().await;
    let a = Replica::start(&redis, "a", &["--write-delay", "900ms"]).await;
    let mut client = Client::new(a.addr);
    client.initialize("2025-11-25").await;
    let session = client.session.clone().unwrap();
    let mut connection = redis.connection().await;
    let record_key = format!("mcp-proxy:default:session:{session}");
    let next_stream = |c: &redis::aio::MultiplexedConnection| {
        let (mut c, key) = (c.clone(), record_key.clone());
        async move {
            let value: Option<u64> = c.hget(&key, "next_stream").await.unwrap();
            value.unwrap_or(0)
        }
    };
    until("the record to be written", true, || async {
        next_stream(&connection).await > 0
    })
    .await;
    let before = next_stream(&connection).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut connection)
        .await
        .unwrap();
    for n in 0..40 {
        assert_eq!(
            client
                .call_tool("echo", json!({ "text": n.to_string() }))
                .await,
            n.to_string()
        );
    }
    until("the record to count the 40 requests", before + 40, || {
        next_stream(&connection)
    })
    .await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connection)
        .await
        .unwrap();
    let calls = |command: &str| -> u64 {
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    };
    let writes = calls("hset") + calls("hdel") + calls("pexpire") + calls("xadd");
    // One per request in flight and one per answer were 80 writes; now a few per round trip.
    assert!(writes <= 16, "{writes} writes for 40 requests:\n{stats}");
    let ttl: i64 = connection.pttl(&record_key).await.unwrap();
    assert!(ttl > 0, "the record keeps its TTL: {ttl}");
    // The others exist (with a TTL) or are gone (-2), never without one (-1).
    for kind in ["log", "inflight"] {
        let ttl: i64 = connection
            .pttl(format!("mcp-proxy:default:{kind}:{session}"))
            .await
            .unwrap();
        assert_ne!(ttl, -1, "the {kind} key has no TTL");
    }
}

#[tokio::test]
async fn a_client_that_sends_each_request_to_the_next_replica_gets_its_work_done() {
    let redis = Redis::start().await;
    let replicas = [
        Replica::start(&redis, "a", &[]).await,
        Replica::start(&redis, "b", &[]).await,
        Replica::start(&redis, "c", &[]).await,
    ];
    let mut first = Client::new(replicas[0].addr);
    first.initialize("2025-11-25").await;
    let mut turn = 1;
    let mut next = || {
        let replica = &replicas[turn % 3];
        turn += 1;
        through(&first, replica)
    };
    // The GET stream on another replica than the owner: fed from the shared log.
    let mut listener = next();
    let mut stream = listener.get(None).await;
    assert_eq!(stream.status, StatusCode::OK);
    next()
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    for expected in 1..=4 {
        let value = next().call_tool("counter", json!({})).await;
        assert_eq!(
            value,
            expected.to_string(),
            "one server behind every replica"
        );
        let update = stream
            .next_with_method("notifications/resources/updated")
            .await;
        assert_eq!(update["params"]["uri"], "demo://counter");
    }
    // Progress and the response of a call forwarded to the owner, on an SSE answer.
    let caller = next();
    let call = json!({ "jsonrpc": "2.0", "id": 77, "method": "tools/call",
        "params": { "name": "progress", "arguments": { "steps": 3, "delay_ms": 5 },
                    "_meta": { "progressToken": "rr" } } });
    let answer = caller.post(&call).await.remaining_messages().await;
    let methods: Vec<&str> = answer
        .iter()
        .map(|m| m.message["method"].as_str().unwrap_or("response"))
        .collect();
    assert_eq!(
        methods,
        [
            "notifications/progress",
            "notifications/progress",
            "notifications/progress",
            "response"
        ]
    );
    drop(listener.session.take());
    assert_eq!(next().delete().await, StatusCode::OK);
    let gone = next()
        .post(&json!({ "jsonrpc": "2.0", "id": 9, "method": "ping" }))
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "ended everywhere");
}

#[tokio::test]
async fn when_the_owner_is_killed_the_client_resumes_elsewhere_with_everything_logged() {
    let redis = Redis::start().await;
    let mut a = Replica::start(&redis, "a", &FAST_TAKEOVER).await;
    let b = Replica::start(&redis, "b", &FAST_TAKEOVER).await;
    let c = Replica::start(&redis, "c", &FAST_TAKEOVER).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    on_a.request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    let session = on_a.session.clone().unwrap();

    // A stream of notifications from the owner: progress of a long call, on its POST stream.
    let call = json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": { "name": "progress", "arguments": { "steps": 1000, "delay_ms": 2 },
                    "_meta": { "progressToken": "long" } } });
    let mut stream = on_a.post(&call).await;
    let mut last_id = None;
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let received = within("progress", stream.next_message()).await.unwrap();
        last_id = received.id.clone();
        seen.push(received.message["params"]["progress"].as_u64().unwrap());
    }
    // Killed once those are in the shared log (the owner writes behind: what it sent and had
    // not written yet when it died is covered by the gap rule, not by the log).
    let mut redis_connection = redis.connection().await;
    let log_key = format!("mcp-proxy:default:log:{session}");
    until("the steps to be logged", true, || {
        let mut c = redis_connection.clone();
        let key = log_key.clone();
        async move { c.xlen::<_, usize>(&key).await.unwrap() >= 6 }
    })
    .await;
    a.kill().await;
    drop(stream);

    // Everything the owner logged for that stream, as Redis holds it.
    let logged: Vec<(String, HashMap<String, String>)> = redis_connection
        .xrange_all(format!("mcp-proxy:default:log:{session}"))
        .await
        .map(|reply: redis::streams::StreamRangeReply| {
            reply
                .ids
                .into_iter()
                .map(|entry| {
                    let fields = entry
                        .map
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                redis::from_redis_value::<String>(v.clone()).unwrap(),
                            )
                        })
                        .collect();
                    (entry.id, fields)
                })
                .collect()
        })
        .unwrap();
    let call_stream = last_id
        .as_deref()
        .unwrap()
        .split('.')
        .next()
        .unwrap()
        .to_owned();
    let progress_logged: Vec<u64> = logged
        .iter()
        .filter(|(_, fields)| {
            fields["k"] == call_stream && fields["p"].contains("notifications/progress")
        })
        .map(|(_, fields)| {
            let message: serde_json::Value = serde_json::from_str(&fields["p"]).unwrap();
            message["params"]["progress"].as_u64().unwrap()
        })
        .collect();
    assert!(progress_logged.len() >= 3, "{progress_logged:?}");

    // The client resumes its stream on another replica: every logged step after the last one
    // it saw, then (once the owner is declared dead and the session taken over) an error for
    // the call the dead owner never finished.
    let on_b = through(&on_a, &b);
    let resumed = within(
        "the resumed stream to end",
        on_b.get(last_id.as_deref()).await.remaining_messages(),
    )
    .await;
    let mut got: Vec<u64> = seen.clone();
    got.extend(
        resumed
            .iter()
            .filter_map(|m| m.message["params"]["progress"].as_u64()),
    );
    assert_eq!(
        got[..progress_logged.len()],
        progress_logged[..],
        "every logged step, once, in order"
    );

    // The session keeps working through any replica: the first requests may meet the dead
    // owner (503, retry), then a replica takes the session over with a fresh server.
    let mut on_c = through(&on_a, &c);
    let value =
        call_until_served("the session to be taken over", &on_c, "counter", json!({})).await;
    assert_eq!(value["result"]["content"][0]["text"], "1", "a fresh server");
    // The unfinished call was answered with an error on its stream.
    let rest = within(
        "the call's stream to end",
        on_c.get(last_id.as_deref()).await.remaining_messages(),
    )
    .await;
    let end = rest.last().expect("the stream's end").message.clone();
    assert_eq!(end["id"], 5);
    assert_eq!(end["error"]["code"], -32603);
    // The subscription was carried over: counter updates reach a GET stream.
    let mut listener = through(&on_a, &b).get(None).await;
    on_c.call_tool("counter", json!({})).await;
    let update = listener
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], "demo://counter");
}

async fn ready(replica: &Replica) -> StatusCode {
    Client::new(replica.addr)
        .send_to("/readyz", http::Method::GET, &[], None)
        .await
        .status
}

#[tokio::test]
async fn redis_stopped_and_started_again() {
    let mut redis = Redis::start().await;
    let a = Replica::start(&redis, "a", &FAST_TAKEOVER).await;
    let b = Replica::start(&redis, "b", &FAST_TAKEOVER).await;
    let mut client = Client::new(a.addr);
    client.initialize("2025-11-25").await;
    assert_eq!(ready(&a).await, StatusCode::OK);
    assert_eq!(metric(&a, "mcp_proxy_store_up").await, 1);
    // Every round trip to Redis is counted and timed (its heartbeat, at least).
    let round_trips = metric(&a, "mcp_proxy_store_round_trips_total").await;
    assert!(round_trips >= 1);
    assert!(metric(&a, "mcp_proxy_store_round_trip_duration_seconds_count").await >= round_trips);

    redis.stop().await;
    until(
        "/readyz to say the store is gone",
        StatusCode::SERVICE_UNAVAILABLE,
        || ready(&a),
    )
    .await;
    assert_eq!(metric(&a, "mcp_proxy_store_up").await, 0);
    assert!(metric(&a, "mcp_proxy_store_errors_total").await >= 1);
    // New sessions are refused; the live one keeps working on its owner.
    let refused = Client::new(a.addr)
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": { "name": "late", "version": "1" } } }))
        .await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(client.call_tool("counter", json!({})).await, "1");

    // Redis comes back empty; the owner writes its sessions again and all is as before.
    redis.restart().await;
    until("/readyz to recover", StatusCode::OK, || ready(&a)).await;
    until("/readyz to recover on b", StatusCode::OK, || ready(&b)).await;
    let mut fresh = Client::new(b.addr);
    fresh.initialize("2025-11-25").await;
    let via_b = through(&client, &b);
    let value = call_until_served(
        "the session to be found again",
        &via_b,
        "counter",
        json!({}),
    )
    .await;
    assert_eq!(
        value["result"]["content"][0]["text"], "2",
        "the same server, through b"
    );
}

#[tokio::test]
async fn streams_resume_and_protocol_sessions_resume_on_any_replica() {
    let redis = Redis::start().await;
    let a = Replica::start(&redis, "a", &[]).await;
    let b = Replica::start(&redis, "b", &[]).await;
    let c = Replica::start(&redis, "c", &[]).await;

    // Transport mode: a GET stream cut on the owner resumes on a third replica.
    let mut client = Client::new(a.addr);
    client.initialize("2025-11-25").await;
    client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    let mut stream = client.get(None).await;
    client.call_tool("counter", json!({})).await;
    let first = within("an update", stream.next_message()).await.unwrap();
    let last_id = first.id.clone().unwrap();
    drop(stream);
    let mut via_b = through(&client, &b);
    via_b.call_tool("counter", json!({})).await;
    via_b.call_tool("counter", json!({})).await;
    let mut resumed = through(&client, &c).get(Some(&last_id)).await;
    assert_eq!(resumed.status, StatusCode::OK);
    let missed = resumed
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(
        missed["params"]["uri"], "demo://counter",
        "missed while away"
    );

    // Protocol mode: session/start over WebSocket on a, resumed over WebSocket on b with
    // catch-up of what was sent, while detached, over HTTP through c.
    let mut ws = crate::harness::ws::Ws::connect(a.addr).await;
    let session_id = ws.start_session().await;
    ws.initialize().await;
    ws.call_tool("emit_updates", json!({ "uris": ["x://1"], "count": 1 }))
        .await;
    let live = ws.recv().await;
    let last = live["params"]["sessionEventId"].clone();
    ws.cut();
    let mut on_c = Client::new(c.addr);
    on_c.extra_headers
        .push(("mcp-protocol-session-id".into(), session_id.clone()));
    let accepted = on_c
        .post(&json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": { "name": "emit_updates", "arguments": { "uris": ["x://1"], "count": 3 } } }))
        .await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED);
    let mut on_b = crate::harness::ws::Ws::connect(b.addr).await;
    let resumed = on_b
        .request(
            "session/resume",
            json!({ "sessionId": session_id, "lastSessionEventId": last }),
        )
        .await;
    assert_eq!(resumed["result"]["catchup"], true);
    let answer = on_b.response_to(json!(9)).await;
    assert_eq!(answer["result"]["content"][0]["text"], "emitted 3 updates");
    assert_eq!(
        on_b.call_tool("echo", json!({ "text": "from b" })).await,
        "from b"
    );
    let ended = on_b
        .request("session/end", json!({ "sessionId": session_id }))
        .await;
    assert_eq!(ended["result"], json!({}));
}

#[tokio::test]
async fn a_session_read_on_another_replica_does_not_idle_out_on_its_owner() {
    let redis = Redis::start().await;
    let short = ["--idle-ttl", "400ms"];
    let a = Replica::start(&redis, "a", &short).await;
    let b = Replica::start(&redis, "b", &short).await;
    let mut client = Client::new(a.addr);
    client.initialize("2025-11-25").await;
    // Only a GET stream, on b: no request reaches a for many idle TTLs.
    let mut listener = through(&client, &b).get(None).await;
    assert_eq!(listener.status, StatusCode::OK);
    let touches = metric(&a, "mcp_proxy_sessions_forwarded_total").await;
    until(
        "b to tell a, many times, that the session is read",
        true,
        || async { metric(&a, "mcp_proxy_sessions_forwarded_total").await >= touches + 8 },
    )
    .await;
    assert_eq!(metric(&a, "mcp_proxy_sessions_expired_total").await, 0);
    // The session and the listener on b both still work.
    client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    let update = listener
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], "demo://counter");
}

#[tokio::test]
async fn a_replica_that_stops_leaves_its_sessions_to_the_others() {
    let redis = Redis::start().await;
    // Answers not ready at once come on an SSE stream.
    let mut a = Replica::start(&redis, "a", &["--json-wait", "10ms"]).await;
    let b = Replica::start(&redis, "b", &[]).await;
    let mut client = Client::new(a.addr);
    client.initialize("2025-11-25").await;
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    // A request in flight when a is told to stop is answered before a leaves.
    let slow = client
        .post(&json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": { "name": "sleep", "arguments": { "ms": 400 } } }))
        .await;
    assert_eq!(slow.status, StatusCode::OK);
    assert!(slow.is_sse(), "still in flight");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(a.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // A rolling restart: while a drains and leaves, a request through b meets 503s (retry),
    // never a 404 or an error; then b takes the session over, at the first request after a
    // left.
    let mut via_b = through(&client, &b);
    let value = call_until_served(
        "b to take the session over",
        &via_b,
        "echo",
        json!({ "text": "still here" }),
    )
    .await;
    assert_eq!(
        value["result"]["content"][0]["text"], "still here",
        "{value}"
    );
    let answer = slow.response().await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "slept 400 ms",
        "{answer}"
    );
    assert!(a.exited().await.success(), "a stops cleanly");
    assert_eq!(
        via_b.call_tool("counter", json!({})).await,
        "1",
        "a new server"
    );
    assert_eq!(metric(&b, "mcp_proxy_sessions_taken_over_total").await, 1);
    // The log tells it in order, each line naming the other replica (read as the logs come).
    let told = |replica: &Replica, line: &str| replica.session_story().iter().any(|l| l == line);
    crate::harness::eventually("a's end logged", || {
        told(&a, "session ended reason=handed_over")
    })
    .await;
    let story = a.session_story();
    let handed = story
        .iter()
        .position(|line| line == "session handed over to=b");
    let ended = story
        .iter()
        .position(|line| line == "session ended reason=handed_over");
    assert!(handed.is_some() && handed < ended, "{story:?}");
    crate::harness::eventually("b's takeover logged", || {
        told(&b, "session taken over from=a")
    })
    .await;
}

#[tokio::test]
async fn a_replica_cut_off_from_redis_hands_over_and_serves_the_session_as_a_view_when_back() {
    let redis = Redis::start().await;
    // a reaches Redis through a relay the test can cut; b directly.
    let relay_port = free_port();
    let relay = |port: u16| async move {
        crate::harness::spawn_announcing(
            "the relay",
            tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-bench"))
                .args(["relay", "--listen", &format!("127.0.0.1:{port}")])
                .args(["--to", &format!("127.0.0.1:{}", redis.port)]),
        )
        .await
        .0
    };
    let mut cut = relay(relay_port).await;
    let through_relay = Redis::at(relay_port);
    let a = Replica::start(&through_relay, "a", &FAST_TAKEOVER).await;
    let b = Replica::start(&redis, "b", &FAST_TAKEOVER).await;
    let mut client = Client::new(a.addr);
    client.initialize("2025-11-25").await;
    assert_eq!(client.call_tool("counter", json!({})).await, "1");

    cut.kill().await.unwrap();
    until("a to notice", StatusCode::SERVICE_UNAVAILABLE, || ready(&a)).await;
    // b, holding a view of the session, takes it over once a's heartbeat has lapsed.
    let mut via_b = through(&client, &b);
    let mut listener = via_b.get(None).await;
    assert_eq!(listener.status, StatusCode::OK);
    until("b to take over", 1, || {
        metric(&b, "mcp_proxy_sessions_taken_over_total")
    })
    .await;
    // The stream read through the view reads on in b's own session.
    via_b
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(
        via_b.call_tool("counter", json!({})).await,
        "1",
        "b's own server now"
    );
    let update = listener
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], "demo://counter");
    // b's server counts on from here; a's old one (still running on a) would say "2".
    assert_eq!(via_b.call_tool("counter", json!({})).await, "2");

    // a gets Redis back, sees it lost the session, ends its own copy, and from then on serves
    // the session through b.
    let _back = relay(relay_port).await;
    until("a to recover", StatusCode::OK, || ready(&a)).await;
    until("a to give the session up", 0, || {
        metric(&a, "mcp_proxy_sessions_open")
    })
    .await;
    assert_eq!(
        client.call_tool("counter", json!({})).await,
        "3",
        "b's server, one owner"
    );
}

/// A client's trace context crosses the replica hop: sent to the replica that does not own the
/// session, it reaches the owner's server in `_meta`.
#[tokio::test]
async fn a_trace_context_crosses_the_replica_hop_to_the_server() {
    let redis = Redis::start().await;
    let (a, b, on_a) = a_session_on_a(&redis).await;
    let mut on_b = through(&on_a, &b);
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    on_b.extra_headers = vec![("traceparent".into(), traceparent.into())];
    let answer = on_b
        .request("tools/call", json!({ "name": "trace_context" }))
        .await;
    assert_eq!(
        answer["result"]["structuredContent"]["traceparent"], traceparent,
        "{answer}"
    );
    assert!(
        metric(&a, "mcp_proxy_sessions_forwarded_total").await >= 1,
        "served through the hop from b"
    );
}

/// A 2026-07-28 `tools/call` through `replica` as `alice`, with `extra` params.
async fn modern_call(
    replica: &Replica,
    id: u64,
    tool: &str,
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut params = json!({ "name": tool, "arguments": {} });
    for (key, value) in extra.as_object().cloned().unwrap_or_default() {
        params[key] = value;
    }
    let body = modern_request(id, "tools/call", params, json!({ "elicitation": {} }));
    let mut client = Client::new(replica.addr);
    client.authorization = Some("Bearer alice".into());
    within("a 2026-07-28 call", async {
        client.post_modern(&body, &[]).await.response().await
    })
    .await
}

#[tokio::test]
async fn a_request_state_is_good_for_one_retry_on_any_replica_even_two_at_once() {
    let redis = Redis::start().await;
    let a = Replica::start(&redis, "a", &[]).await;
    let b = Replica::start(&redis, "b", &[]).await;
    let tool = "test_input_required_result_elicitation";
    let asked = modern_call(&a, 1, tool, json!({})).await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"].clone();
    let retry = json!({ "requestState": state,
        "inputResponses": { "user_name": { "action": "accept", "content": { "name": "Alice" } } } });
    let (on_a, on_b) = tokio::join!(
        modern_call(&a, 2, tool, retry.clone()),
        modern_call(&b, 3, tool, retry.clone()),
    );
    let completed = [&on_a, &on_b]
        .iter()
        .filter(|answer| answer["result"]["resultType"] == "complete")
        .count();
    let refused: Vec<_> = [&on_a, &on_b]
        .iter()
        .filter(|answer| answer["error"]["code"] == -32602)
        .map(|answer| answer["error"]["message"].to_string())
        .collect();
    assert_eq!(completed, 1, "one retry is carried out: {on_a} {on_b}");
    assert_eq!(refused.len(), 1, "{on_a} {on_b}");
    assert!(refused[0].contains("already used"), "{}", refused[0]);
    let again = modern_call(&b, 4, tool, retry).await;
    assert_eq!(again["error"]["code"], -32602, "{again}");
}

/// A takeover's line names whom the session came from: the dead owner after a claim, and, for a
/// replica restarted under its name that reclaims what it had taken over, itself (a claim
/// forgets who handed a session over earlier).
#[tokio::test]
async fn a_takeover_names_the_replica_it_took_the_session_from() {
    let redis = Redis::start().await;
    let mut a = Replica::start(&redis, "a", &FAST_TAKEOVER).await;
    let mut b = Replica::start(&redis, "b", &FAST_TAKEOVER).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    assert_eq!(on_a.call_tool("counter", json!({})).await, "1");
    a.kill().await;
    let on_b = through(&on_a, &b);
    call_until_served("b takes it over", &on_b, "echo", json!({ "text": "x" })).await;
    let told = |r: &Replica, l: &str| r.session_story().iter().any(|x| x == l);
    crate::harness::eventually("b's takeover", || told(&b, "session taken over from=a")).await;
    b.kill().await;
    b.restart(&redis).await;
    let on_b = through(&on_a, &b);
    call_until_served("b reclaims it", &on_b, "echo", json!({ "text": "y" })).await;
    crate::harness::eventually("b's reclaim", || told(&b, "session taken over from=b")).await;
}
