//! The owner-aware balancers: nginx and HAProxy (Debian packages) running the shipped
//! config/nginx-owner.conf and config/haproxy-owner.cfg, their servers named as the three
//! replicas' `--node-id`, in front of replicas sharing a real `redis-server` and one Streamable
//! HTTP server (the demo, in this process). Sessions open round-robin, on every replica; then
//! each request that names a session, by `Mcp-Session-Id`, by `Mcp-Protocol-Session-Id` or by
//! the `sessionId` of a 2024-11-05 client's POST, reaches the replica its id names, and none
//! crosses to an owner over the hop. A replica killed: its sessions go on through the balancer
//! on the others, their count on the server going on, and new sessions open; started again
//! under its name, it serves the sessions it lost by forwarding their requests to their new
//! owners.

use std::net::SocketAddr;

use super::balancers::{metrics, sum};
use crate::harness::balancer::{Balancer, Kind};
use crate::harness::cluster::{call_until_served, Redis, Replica, FAST_TAKEOVER};
use crate::harness::{within, Client, Proxy, Reply};
use http::{Method, StatusCode};
use serde_json::{json, Value};

/// Three replicas on a Redis of their own, in front of `server`, behind a balancer.
struct Cluster {
    redis: Redis,
    server: Proxy,
    replicas: Vec<Replica>,
    balancer: Balancer,
}

/// Replicas a, b and c (with `extra` options) in front of the demo over Streamable HTTP,
/// accepting the Host clients dial and the one HAProxy's checks send, behind `kind`.
async fn three_behind(kind: Kind, extra: &[&str]) -> Cluster {
    let redis = Redis::start().await;
    let server = Proxy::start().await;
    let url = format!("http://{}/mcp", server.addr());
    let options = [
        extra,
        &[
            "--http",
            &url,
            "--upstream-protocol",
            "legacy",
            "--allowed-host",
            "127.0.0.1",
            "--allowed-host",
            "mcp.example.com",
        ],
    ]
    .concat();
    let (a, b, c) = tokio::join!(
        Replica::start(&redis, "a", &options),
        Replica::start(&redis, "b", &options),
        Replica::start(&redis, "c", &options),
    );
    let replicas = vec![a, b, c];
    let named: Vec<(&str, SocketAddr)> = replicas
        .iter()
        .map(|replica| (replica.name.as_str(), replica.addr))
        .collect();
    let balancer = Balancer::start_named(kind, &named).await;
    Cluster {
        redis,
        server,
        replicas,
        balancer,
    }
}

/// The replica a session id names: what comes before its first ".".
fn owner_of(id: &str) -> String {
    let (node, _) = id
        .split_once('.')
        .unwrap_or_else(|| panic!("{id} names no replica"));
    assert!(["a", "b", "c"].contains(&node), "{id} names no replica");
    node.to_owned()
}

fn session_of(client: &Client) -> String {
    owner_of(client.session.as_deref().expect("a session"))
}

fn text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a tool's text: {answer}"))
}

/// The next message on `stream` that answers request `id`.
async fn answer_on(stream: &mut Reply, id: u64) -> Value {
    within("the answer on the stream", async {
        loop {
            let message = stream.next_message().await.expect("the stream goes on");
            if message.message["id"] == id {
                return message.message;
            }
        }
    })
    .await
}

#[tokio::test]
async fn through_nginx_owner_each_session_is_served_by_its_owner() {
    sessions_are_served_by_their_owners(Kind::NginxOwner).await;
}

#[tokio::test]
async fn through_haproxy_owner_each_session_is_served_by_its_owner() {
    sessions_are_served_by_their_owners(Kind::HaproxyOwner).await;
}

/// Streamable HTTP sessions (calls, a GET stream with a subscription's update, DELETE), a
/// protocol-level session and a 2024-11-05 SSE session through the balancer: the sessions are
/// spread over every replica, and no request was forwarded to an owner.
async fn sessions_are_served_by_their_owners(kind: Kind) {
    let cluster = three_behind(kind, &[]).await;
    let addr = cluster.balancer.addr();
    let mut owners = Vec::new();
    let mut sessions = Vec::new();
    for _ in 0..6 {
        let mut client = Client::new(addr);
        client.initialize("2025-11-25").await;
        assert_eq!(client.call_tool("counter", json!({})).await, "1");
        assert_eq!(client.call_tool("counter", json!({})).await, "2");
        owners.push(session_of(&client));
        sessions.push(client);
    }
    let watched = &mut sessions[0];
    watched
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    let mut events = watched.get(None).await;
    assert_eq!(events.status, StatusCode::OK);
    assert_eq!(watched.call_tool("counter", json!({})).await, "3");
    let update = events
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], "demo://counter");
    drop(events);
    for client in &sessions {
        assert!(client.delete().await.is_success(), "the session ends");
    }
    owners.push(protocol_session(addr, addr).await);
    owners.push(legacy_session(addr, addr).await);

    for replica in &cluster.replicas {
        assert!(
            owners.contains(&replica.name),
            "{kind:?} opened no session on {}: {owners:?}",
            replica.name
        );
        let figures = metrics(replica, false).await;
        assert_eq!(
            sum(&figures, "mcp_proxy_sessions_forwarded_total", |_| true),
            0,
            "{kind:?} sent a request of a session to a replica that forwarded it to {}:\n{}",
            replica.name,
            cluster.balancer.logs()
        );
    }
    cluster.server.stop().await;
}

/// A protocol-level session started and resumed at `at` (through a balancer: round-robin, then
/// its replica), initialized and called with `Mcp-Protocol-Session-Id` at `posts`, every answer
/// on the channel the resume opened: its replica's name.
pub(super) async fn protocol_session(at: SocketAddr, posts: SocketAddr) -> String {
    let start = json!({ "jsonrpc": "2.0", "id": 1, "method": "session/start", "params": {} });
    let started = Client::new(at).post(&start).await.json().await;
    let id = started["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_owned();
    let mut client = Client::new(at);
    client
        .extra_headers
        .push(("mcp-protocol-session-id".into(), id.clone()));
    let resume = json!({ "jsonrpc": "2.0", "id": 2, "method": "session/resume",
                         "params": { "sessionId": id } });
    let mut channel = client.post(&resume).await;
    assert_eq!(channel.status, StatusCode::OK);
    assert_eq!(answer_on(&mut channel, 2).await["result"]["resumed"], true);
    client.addr = posts;
    let sent = |message: Value| {
        let client = client.clone();
        async move {
            let reply = client.post(&message).await;
            assert_eq!(reply.status, StatusCode::ACCEPTED, "{message}");
        }
    };
    sent(json!({ "jsonrpc": "2.0", "id": 3, "method": "initialize",
                 "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                             "clientInfo": { "name": "t", "version": "1" } } }))
    .await;
    answer_on(&mut channel, 3).await;
    sent(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
    sent(json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/call",
                 "params": { "name": "counter", "arguments": {} } }))
    .await;
    assert_eq!(text(&answer_on(&mut channel, 4).await), "1");
    owner_of(&id)
}

/// A 2024-11-05 session: its stream opened at `at` (through a balancer: round-robin), its
/// messages POSTed at `posts` to the endpoint the stream named (`/messages?sessionId=…`), every
/// answer on the stream: its replica's name.
pub(super) async fn legacy_session(at: SocketAddr, posts: SocketAddr) -> String {
    let mut client = Client::new(at);
    let (mut stream, endpoint) = client.open_legacy_sse("/sse").await;
    client.addr = posts;
    let id = endpoint
        .split_once("sessionId=")
        .unwrap_or_else(|| panic!("{endpoint}"))
        .1
        .to_owned();
    let sent = |message: Value| {
        let (client, endpoint) = (client.clone(), endpoint.clone());
        async move {
            let headers = [("content-type", "application/json")];
            let body = Some(message.to_string().into());
            let reply = client
                .send_to(&endpoint, Method::POST, &headers, body)
                .await;
            assert_eq!(reply.status, StatusCode::ACCEPTED, "{message}");
        }
    };
    sent(json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": { "protocolVersion": "2024-11-05", "capabilities": {},
                             "clientInfo": { "name": "old", "version": "1" } } }))
    .await;
    answer_on(&mut stream, 1).await;
    sent(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
    sent(json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": { "name": "counter", "arguments": {} } }))
    .await;
    assert_eq!(text(&answer_on(&mut stream, 2).await), "1");
    owner_of(&id)
}

#[tokio::test]
async fn through_nginx_owner_a_killed_replicas_sessions_go_on_elsewhere() {
    a_killed_replicas_sessions_go_on(Kind::NginxOwner).await;
}

#[tokio::test]
async fn through_haproxy_owner_a_killed_replicas_sessions_go_on_elsewhere() {
    a_killed_replicas_sessions_go_on(Kind::HaproxyOwner).await;
}

/// Six sessions through the balancer, each at a count of 1; the owner of the first killed
/// (SIGKILL). Every session goes on through the balancer, its count with it, the dead
/// replica's taken over by the others; new sessions open on the replicas that are up. Started
/// again, the replica gets the requests of the sessions it lost and forwards them to their
/// new owners, the counts going on.
async fn a_killed_replicas_sessions_go_on(kind: Kind) {
    let mut cluster = three_behind(kind, &FAST_TAKEOVER).await;
    let addr = cluster.balancer.addr();
    let mut sessions = Vec::new();
    for _ in 0..6 {
        let mut client = Client::new(addr);
        client.initialize("2025-11-25").await;
        assert_eq!(client.call_tool("counter", json!({})).await, "1");
        sessions.push(client);
    }
    let victim = session_of(&sessions[0]);
    let lost: Vec<Client> = sessions
        .iter()
        .filter(|client| session_of(client) == victim)
        .cloned()
        .collect();
    let at = cluster.replicas.iter().position(|r| r.name == victim);
    let at = at.unwrap();
    cluster.replicas[at].kill().await;

    for (n, client) in sessions.iter().enumerate() {
        for count in ["2", "3"] {
            let what = format!("session {n}'s call after the kill");
            let answer = call_until_served(&what, client, "counter", json!({})).await;
            assert_eq!(text(&answer), count, "session {n} of {victim}'s");
        }
    }
    let mut taken_over = 0;
    for replica in cluster.replicas.iter().filter(|r| r.name != victim) {
        let figures = metrics(replica, false).await;
        taken_over += sum(&figures, "mcp_proxy_sessions_taken_over_total", |_| true);
    }
    assert_eq!(taken_over, lost.len() as u64, "{victim}'s sessions moved");
    for _ in 0..3 {
        let mut client = Client::new(addr);
        client.initialize("2025-11-25").await;
        assert_ne!(
            session_of(&client),
            victim,
            "a new session on a replica that is up"
        );
        assert_eq!(client.call_tool("counter", json!({})).await, "1");
    }

    if kind == Kind::HaproxyOwner {
        down_is_skipped(&cluster.balancer, &victim, &lost).await;
    }

    cluster.replicas[at].restart(&cluster.redis).await;
    let counted = if kind == Kind::HaproxyOwner { 4 } else { 3 };
    served_through_the_replica_back(&lost, &cluster.replicas[at], counted).await;
    cluster.server.stop().await;
}

/// Once HAProxy's checks mark `victim` down, the `use-server` rule naming it is skipped: each
/// of `lost` (at a count of 3) is called once more, and HAProxy logs each call sent straight
/// to a replica that is up, with no retry (the fourth of its connection counts,
/// `%ac/%fc/%bc/%sc/%rc`, is 0; a request sent to the dead server first would show `+1`).
async fn down_is_skipped(balancer: &Balancer, victim: &str, lost: &[Client]) {
    let down = format!("Server replicas/{victim} is DOWN");
    // What HAProxy had logged by then: every earlier call among it, long answered.
    let seen = within("HAProxy's checks to mark the killed replica down", async {
        loop {
            let logs = balancer.logs();
            if logs.contains(&down) {
                return logs.len();
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    for client in lost {
        assert_eq!(client.clone().call_tool("counter", json!({})).await, "4");
    }
    for client in lost {
        let session = format!("{{{}}}", client.session.as_deref().unwrap());
        // HAProxy logs a request once it has answered it: its line may follow the answer.
        let line = within("HAProxy to log the call", async {
            loop {
                let logs = balancer.logs();
                let logged = logs[seen..]
                    .lines()
                    .find(|line| line.contains(&session) && line.contains("\"POST /mcp"));
                if let Some(line) = logged {
                    return line.to_owned();
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await;
        let mut counts = line
            .split_whitespace()
            .filter(|word| word.matches('/').count() == 4);
        let retries = counts.nth(1).and_then(|counts| counts.rsplit('/').next());
        assert_eq!(retries, Some("0"), "sent to the dead server first: {line}");
    }
}

/// Calls on each of `lost` (at a count of `counted`) through the balancer until `back`, the
/// replica they were created on, has answered some: it owns none of them any more, so it
/// forwarded them. Each count goes on.
async fn served_through_the_replica_back(lost: &[Client], back: &Replica, counted: u64) {
    let mut counts = vec![counted; lost.len()];
    within("the replica back to serve the sessions it lost", async {
        loop {
            for (client, count) in lost.iter().zip(counts.iter_mut()) {
                *count += 1;
                let what = "a call of a session its replica lost";
                let answer = call_until_served(what, client, "counter", json!({})).await;
                assert_eq!(text(&answer), count.to_string());
            }
            let figures = metrics(back, false).await;
            let answered = sum(&figures, "mcp_proxy_requests_total", |labels| {
                labels.contains("method=\"tools/call\"") && labels.contains("status=\"200\"")
            });
            if answered > 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}
