//! Sessions with one stream, on replicas sharing a real `redis-server`: a 2024-11-05 SSE session
//! and a protocol-level session over Streamable HTTP whose client reads its stream on the owner
//! while its messages go to another replica (as a round-robin balancer sends them). The owner
//! takes each message over the hop and the answers come on the client's stream, which stays
//! open: the hop reads the answer beside the client's reader, never in its place.

use crate::harness::cluster::{metric, Redis, Replica};

use super::owner_routing::{legacy_session, protocol_session};

#[tokio::test]
async fn a_2024_11_05_session_keeps_its_stream_while_its_messages_go_to_another_replica() {
    let redis = Redis::start().await;
    let (a, b) = tokio::join!(
        Replica::start(&redis, "a", &[]),
        Replica::start(&redis, "b", &[])
    );
    assert_eq!(legacy_session(a.addr, b.addr).await, "a");
    assert!(metric(&a, "mcp_proxy_sessions_forwarded_total").await >= 2);
}

#[tokio::test]
async fn a_protocol_level_session_keeps_its_channel_while_its_messages_go_to_another_replica() {
    let redis = Redis::start().await;
    let (a, b) = tokio::join!(
        Replica::start(&redis, "a", &[]),
        Replica::start(&redis, "b", &[])
    );
    assert_eq!(protocol_session(a.addr, b.addr).await, "a");
    assert!(metric(&a, "mcp_proxy_sessions_forwarded_total").await >= 2);
}

/// A protocol-level session owned by a, its channel resumed on b, whose link to Redis is slow
/// (a far or loaded one): the answer to a message sent to a itself reaches the channel through
/// b's view of the shared log, a while later; a message sent to b meanwhile goes to a over the
/// hop, and its answer comes back with the hop before the earlier one has come through Redis.
/// The channel must still get both answers.
#[tokio::test]
async fn a_channel_on_a_view_gets_what_its_owner_logged_before_a_hop_came() {
    let redis = Redis::start().await;
    let (_relay, port) = slow_link(&redis, 300).await;
    let a = Replica::start(&redis, "a", &[]).await;
    let b = Replica::start(&Redis::at(port), "b", &[]).await;
    answers_reach_a_channel_on_a_view(&a, &b).await;
}

/// The same with a fast Redis and an owner that writes behind by 200 ms
/// (`cluster.write_delay`, which batches its writes).
#[tokio::test]
async fn a_channel_on_a_view_gets_what_a_writing_behind_owner_logged_before_a_hop_came() {
    let redis = Redis::start().await;
    let a = Replica::start(&redis, "a", &["--write-delay", "200ms"]).await;
    let b = Replica::start(&redis, "b", &[]).await;
    answers_reach_a_channel_on_a_view(&a, &b).await;
}

/// A protocol-level session started on `a`, its channel resumed on `b`; a request sent to `a`,
/// then 100 ms later one sent to `b` (over the hop): both answers come on the channel.
async fn answers_reach_a_channel_on_a_view(a: &Replica, b: &Replica) {
    use crate::harness::Client;
    use http::StatusCode;
    use serde_json::{json, Value};
    use std::time::Duration;

    let start = json!({ "jsonrpc": "2.0", "id": 1, "method": "session/start", "params": {} });
    let started = Client::new(a.addr).post(&start).await.json().await;
    let id = started["result"]["sessionId"].as_str().unwrap().to_owned();
    let mut on_b = Client::new(b.addr);
    on_b.extra_headers
        .push(("mcp-protocol-session-id".into(), id.clone()));
    let resume = json!({ "jsonrpc": "2.0", "id": 2, "method": "session/resume",
                         "params": { "sessionId": id } });
    let mut channel = on_b.post(&resume).await;
    assert_eq!(channel.status, StatusCode::OK);
    let mut on_a = on_b.clone();
    on_a.addr = a.addr;
    let sent = |client: &Client, message: Value| {
        let client = client.clone();
        async move {
            let reply = client.post(&message).await;
            assert_eq!(reply.status, StatusCode::ACCEPTED, "{message}");
        }
    };
    let mut seen: Vec<u64> = Vec::new();
    sent(
        &on_a,
        json!({ "jsonrpc": "2.0", "id": 3, "method": "initialize",
                        "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": { "name": "t", "version": "1" } } }),
    )
    .await;
    assert!(until_seen(&mut channel, &mut seen, &[3], Duration::from_secs(10)).await);
    sent(
        &on_a,
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
    )
    .await;
    // A request on the owner; its answer is logged there at once, and reaches b through its
    // slow link to Redis some 300 ms later.
    const ANSWERED: &str = "mcp_proxy_upstream_duration_seconds_count";
    let answered = metric(a, ANSWERED).await;
    sent(
        &on_a,
        json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/call",
                        "params": { "name": "counter", "arguments": {} } }),
    )
    .await;
    crate::harness::until("the owner to have the answer to 4", answered + 1, || {
        metric(a, ANSWERED)
    })
    .await;
    // Meanwhile one through b, over the hop.
    sent(
        &on_b,
        json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call",
                        "params": { "name": "echo", "arguments": { "text": "via b" } } }),
    )
    .await;
    let both = until_seen(&mut channel, &mut seen, &[4, 5], Duration::from_secs(5)).await;
    assert!(
        both,
        "the channel got the answers to {seen:?} (4 and 5 sent)"
    );
}

/// A relay to Redis that holds every chunk `delay_ms` (a slow, far or overloaded link).
async fn slow_link(redis: &Redis, delay_ms: u64) -> (tokio::process::Child, u16) {
    let port = crate::harness::free_port();
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

/// Reads `channel` until it has given answers to every one of `wanted` (ids noted in `seen`),
/// for at most `bound`: whether it did.
async fn until_seen(
    channel: &mut crate::harness::Reply,
    seen: &mut Vec<u64>,
    wanted: &[u64],
    bound: std::time::Duration,
) -> bool {
    let _ = tokio::time::timeout(bound, async {
        while !wanted.iter().all(|id| seen.contains(id)) {
            let Some(message) = channel.next_message().await else {
                return;
            };
            if let Some(id) = message.message["id"].as_u64() {
                seen.push(id);
            }
        }
    })
    .await;
    wanted.iter().all(|id| seen.contains(id))
}
