//! Sessions on a Streamable HTTP server survive their replica: the replica taking a session
//! over goes on in the session the server keeps for it (the same `Mcp-Session-Id`, no second
//! `initialize`), whether the owner was killed or left at shutdown (which ends no upstream
//! session); a server that forgot the session meanwhile gets a new one, transparently. Behind
//! nginx and HAProxy, a rolling restart of three replicas leaves a client's count on the server
//! going on from where it was, with no call failing.

use std::collections::HashMap;

use crate::harness::balancer::{Balancer, Kind};
use crate::harness::cluster::{
    call_until_served, metric, recording_relay, through, Redis, Replica, FAST_TAKEOVER,
};
use crate::harness::{until, Client, Proxy};
use redis::AsyncCommands;
use serde_json::{json, Value};

/// Two replicas in front of one HTTP server (the demo over Streamable HTTP, in this process),
/// quick to declare a dead owner; told the server's revision, they send it nothing before a
/// client's session (no probe).
async fn two_replicas(redis: &Redis, server: &Proxy) -> (Replica, Replica) {
    two_replicas_at(redis, &format!("http://{}/mcp", server.addr())).await
}

async fn two_replicas_at(redis: &Redis, url: &str) -> (Replica, Replica) {
    let options = [
        &FAST_TAKEOVER[..],
        &["--http", url, "--upstream-protocol", "legacy"],
    ]
    .concat();
    let a = Replica::start(redis, "a", &options).await;
    let b = Replica::start(redis, "b", &options).await;
    (a, b)
}

/// A session on `replica` that counted to 2 on the server, once its record (with the upstream
/// session) is in Redis.
async fn counted_to_two(redis: &Redis, replica: &Replica) -> (Client, HashMap<String, String>) {
    let mut client = Client::new(replica.addr);
    client.initialize("2025-11-25").await;
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    assert_eq!(client.call_tool("counter", json!({})).await, "2");
    let record = upstream_session_recorded(redis, &client).await;
    (client, record)
}

/// The session's record once it names the session the server keeps for it.
async fn upstream_session_recorded(redis: &Redis, client: &Client) -> HashMap<String, String> {
    let key = format!(
        "mcp-proxy:default:session:{}",
        client.session.as_deref().unwrap()
    );
    let connection = redis.connection().await;
    until("the upstream session to be recorded", true, || {
        let (mut c, key) = (connection.clone(), key.clone());
        async move {
            let field: Option<String> = c.hget(&key, "upstream_session").await.unwrap();
            field.is_some_and(|f| !f.is_empty())
        }
    })
    .await;
    connection.clone().hgetall(&key).await.unwrap()
}

fn text(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a tool's text: {reply}"))
}

fn sigterm(replica: &Replica) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(replica.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

#[tokio::test]
async fn a_session_whose_owner_is_killed_goes_on_in_the_same_server_session() {
    let redis = Redis::start().await;
    let server = Proxy::start().await;
    let (mut a, b) = two_replicas(&redis, &server).await;
    let (on_a, record) = counted_to_two(&redis, &a).await;
    let upstream: Value = serde_json::from_str(&record["upstream_session"]).unwrap();
    assert_eq!(upstream["version"], "2025-11-25", "{upstream}");
    assert!(upstream["id"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(
        record["upstream_ids"], "1025",
        "a block of request ids reserved"
    );

    a.kill().await;
    let on_b = through(&on_a, &b);
    let reply = call_until_served("b to take the session over", &on_b, "counter", json!({})).await;
    assert_eq!(
        text(&reply),
        "3",
        "the server's session, and its state, survived"
    );
    assert_eq!(metric(&b, "mcp_proxy_sessions_taken_over_total").await, 1);
    assert_eq!(
        server.metric("mcp_proxy_sessions_created_total"),
        1,
        "no second initialize reached the server"
    );
    assert_eq!(server.metric("mcp_proxy_sessions_open"), 1);
    until("b to reserve request ids past a's", true, || async {
        upstream_session_recorded(&redis, &on_a).await["upstream_ids"] == "2049"
    })
    .await;
    let after = upstream_session_recorded(&redis, &on_a).await;
    assert_eq!(after["upstream_session"], record["upstream_session"]);
    assert_eq!(after["owner"], "b");

    // Notifications of the server's session reach the client through its new owner.
    let mut on_b = on_b;
    on_b.request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    let mut events = on_b.get(None).await;
    assert_eq!(on_b.call_tool("counter", json!({})).await, "4");
    let update = events
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], "demo://counter");
    server.stop().await;
}

#[tokio::test]
async fn a_replica_that_stops_leaves_its_server_sessions_to_the_others_without_ending_them() {
    let redis = Redis::start().await;
    let server = Proxy::start().await;
    let (mut a, b) = two_replicas(&redis, &server).await;
    let (on_a, _) = counted_to_two(&redis, &a).await;

    sigterm(&a);
    assert!(a.exited().await.success(), "a stops cleanly");
    assert_eq!(
        server.metric("mcp_proxy_sessions_open"),
        1,
        "the leaving replica ended no server session"
    );
    let reply = call_until_served(
        "b to take the session over",
        &through(&on_a, &b),
        "counter",
        json!({}),
    )
    .await;
    assert_eq!(text(&reply), "3", "the server's session went on");
    assert_eq!(server.metric("mcp_proxy_sessions_created_total"), 1);
    assert_eq!(server.metric("mcp_proxy_sessions_open"), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_server_that_forgot_the_session_gets_a_new_one_when_it_is_taken_over() {
    let redis = Redis::start().await;
    let server = Proxy::start().await;
    let addr = server.addr();
    let (mut a, b) = two_replicas(&redis, &server).await;
    let (on_a, record) = counted_to_two(&redis, &a).await;

    a.kill().await;
    server.stop().await; // every server session is gone
    let server = Proxy::start_with(|c| c.listen = addr).await;
    let on_b = through(&on_a, &b);
    let reply = call_until_served("b to take the session over", &on_b, "counter", json!({})).await;
    assert_eq!(text(&reply), "1", "a new server session, no error");
    assert_eq!(
        server.metric("mcp_proxy_sessions_created_total"),
        1,
        "initialized once more"
    );
    let mut on_b = on_b;
    assert_eq!(on_b.call_tool("counter", json!({})).await, "2");
    until("the new upstream session to be recorded", true, || async {
        upstream_session_recorded(&redis, &on_a).await["upstream_session"]
            != record["upstream_session"]
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn a_session_taken_over_before_its_client_said_initialized_holds_one_server_stream() {
    let redis = Redis::start().await;
    let server = Proxy::start().await;
    let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", relay.local_addr().unwrap());
    let target = std::sync::Arc::new(std::sync::Mutex::new(Some(server.addr())));
    let recorded = recording_relay(relay, target);
    let (mut a, b) = two_replicas_at(&redis, &url).await;
    let mut on_a = Client::new(a.addr);
    let reply = on_a
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": { "name": "harness", "version": "1" } } }))
        .await;
    on_a.session = Some(reply.headers["mcp-session-id"].to_str().unwrap().to_owned());
    on_a.protocol_version = Some("2025-11-25".into());
    assert!(reply.response().await["result"].is_object());
    upstream_session_recorded(&redis, &on_a).await;

    a.kill().await;
    let before = recorded.lock().unwrap().len();
    let mut on_b = through(&on_a, &b);
    let reply = call_until_served("b to take the session over", &on_b, "counter", json!({})).await;
    assert_eq!(text(&reply), "1");
    let ack = on_b
        .post(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
        .await;
    assert_eq!(ack.status, http::StatusCode::ACCEPTED);
    assert_eq!(on_b.call_tool("counter", json!({})).await, "2");
    let sent = String::from_utf8_lossy(&recorded.lock().unwrap()[before..]).into_owned();
    assert_eq!(
        sent.matches("GET /mcp HTTP/1.1").count(),
        1,
        "the GET stream the new owner opened at once is the session's only one: {sent}"
    );
    assert!(
        sent.contains("notifications/initialized"),
        "the client's, passed on"
    );
    server.stop().await;
}

/// Three replicas with the operator's defaults (the 5 s drain included) behind `kind`, in front
/// of one HTTP server; one client counts on the server while each replica in turn gets SIGTERM,
/// drains, exits and starts again. Every call is answered at the first try, the count goes on
/// one by one, and the server saw one `initialize` and has one session at the end.
async fn a_count_through_a_rolling_restart(kind: Kind) {
    let redis = Redis::start().await;
    let server = Proxy::start().await;
    let url = format!("http://{}/mcp", server.addr());
    let options = [
        "--http",
        &url,
        "--upstream-protocol",
        "legacy",
        "--allowed-host",
        "127.0.0.1",
        "--allowed-host",
        "mcp.example.com",
        "--drain-delay=5s",
    ];
    let (a, b, c) = tokio::join!(
        Replica::start(&redis, "a", &options),
        Replica::start(&redis, "b", &options),
        Replica::start(&redis, "c", &options),
    );
    let mut replicas = [a, b, c];
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let balancer = Balancer::start(kind, &addrs).await;
    let mut client = Client::new(balancer.addr());
    client.initialize("2025-11-25").await;

    let mut counted = 0;
    count_on(&mut client, &mut counted, 3).await;
    for replica in replicas.iter_mut() {
        sigterm(replica);
        count_on(&mut client, &mut counted, 1).await;
        assert!(
            replica.exited().await.success(),
            "{} stops cleanly",
            replica.name
        );
        count_on(&mut client, &mut counted, 3).await;
        replica.restart(&redis).await;
        count_on(&mut client, &mut counted, 3).await;
    }
    assert_eq!(
        server.metric("mcp_proxy_sessions_created_total"),
        1,
        "one initialize reached the server"
    );
    assert_eq!(server.metric("mcp_proxy_sessions_open"), 1);
    drop(balancer);
    server.stop().await;
}

/// `times` calls of the counter, each answered with the count after the last.
async fn count_on(client: &mut Client, counted: &mut u32, times: u32) {
    for _ in 0..times {
        *counted += 1;
        assert_eq!(
            client.call_tool("counter", json!({})).await,
            counted.to_string()
        );
    }
}

#[tokio::test]
async fn a_count_on_an_http_server_goes_on_through_a_rolling_restart_behind_nginx() {
    a_count_through_a_rolling_restart(Kind::Nginx).await;
}

#[tokio::test]
async fn a_count_on_an_http_server_goes_on_through_a_rolling_restart_behind_haproxy() {
    a_count_through_a_rolling_restart(Kind::Haproxy).await;
}
