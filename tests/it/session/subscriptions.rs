//! Resource subscriptions over real sockets: bounded per session (one more is refused without
//! reaching the server, and the session goes on), and written to Redis one change at a time.

use std::collections::BTreeSet;

use crate::harness::cluster::{
    call_until_served, through, until_key, Redis, Replica, FAST_TAKEOVER,
};
use crate::harness::{until, within, Client, Proxy};
use redis::AsyncCommands;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

async fn subscribe(client: &mut Client, uri: &str) -> Value {
    client
        .request("resources/subscribe", json!({ "uri": uri }))
        .await
}

#[tokio::test]
async fn a_subscription_past_the_limit_is_refused_and_the_session_goes_on() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let mut updates = client.get(None).await;
    for n in 0..1000 {
        let subscribed = subscribe(&mut client, &format!("demo://item/{n}")).await;
        assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    }
    let refused = subscribe(&mut client, "demo://counter").await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("1000") && message.contains("session.max_subscriptions"),
        "{message}"
    );
    assert_eq!(proxy.metric("mcp_proxy_subscriptions_refused_total"), 1);
    let again = subscribe(&mut client, "demo://item/0").await;
    assert_eq!(again["result"], json!({}), "one it holds is no new one");

    // The server never heard of it: the counter's update would come before the marker's.
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    client
        .call_tool(
            "emit_updates",
            json!({ "uris": ["demo://marker"], "count": 1 }),
        )
        .await;
    let first = updates
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(first["params"]["uri"], "demo://marker");

    // Room made by an unsubscribe is taken again, and the session works as before.
    let unsubscribed = client
        .request("resources/unsubscribe", json!({ "uri": "demo://item/0" }))
        .await;
    assert_eq!(unsubscribed["result"], json!({}));
    let subscribed = subscribe(&mut client, "demo://counter").await;
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    assert_eq!(client.call_tool("counter", json!({})).await, "2");
    let counted = updates
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(counted["params"]["uri"], "demo://counter");
    assert_eq!(proxy.metric("mcp_proxy_subscriptions_refused_total"), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn a_duplicated_uri_is_no_way_past_the_limit() {
    let proxy = Proxy::start_with(|config| config.session.max_subscriptions = 1).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let subscribed = subscribe(&mut client, "demo://a").await;
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    let refused = subscribe(&mut client, "demo://b").await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let id = client.next_id();
    let reply = client
        .post_text(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/subscribe",
                "params":{{"uri":"demo://b","uri":"demo://b"}}}}"#
        ))
        .await;
    crate::harness::assert_duplicate_refused(reply, id, "params.uri").await;
    assert_eq!(proxy.metric("mcp_proxy_subscriptions_refused_total"), 1);
    proxy.stop().await;
}

/// What Redis is asked to do, as `MONITOR` shows it: one line per command.
async fn monitor(redis: &Redis) -> tokio::io::Lines<BufReader<tokio::net::TcpStream>> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", redis.port))
        .await
        .unwrap();
    stream.write_all(b"MONITOR\r\n").await.unwrap();
    let mut lines = BufReader::new(stream).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("+OK"));
    lines
}

#[tokio::test]
async fn each_subscription_change_is_written_to_redis_alone() {
    let redis = Redis::start().await;
    let a = Replica::start(&redis, "a", &[]).await;
    let mut client = Client::new(a.addr);
    client.initialize("2025-11-25").await;
    let session = client.session.clone().unwrap();
    let subs_key = format!("mcp-proxy:default:subs:{session}");
    let mut commands = monitor(&redis).await;

    for uri in ["demo://a", "demo://b", "demo://c"] {
        subscribe(&mut client, uri).await;
    }
    client
        .request("resources/unsubscribe", json!({ "uri": "demo://b" }))
        .await;
    let mut connection = redis.connection().await;
    until("the set to hold what is subscribed", true, || {
        let mut c = connection.clone();
        let key = subs_key.clone();
        async move {
            let members: BTreeSet<String> = c.smembers(&key).await.unwrap();
            members == BTreeSet::from(["demo://a".into(), "demo://c".into()])
        }
    })
    .await;
    let record_key = format!("mcp-proxy:default:session:{session}");
    let in_record: bool = connection.hexists(&record_key, "subs").await.unwrap();
    assert!(!in_record, "not in the record");
    let ttl: i64 = connection.pttl(&subs_key).await.unwrap();
    assert!(ttl > 0, "the set expires with the session ({ttl})");

    // Each change was one command naming one URI; the whole set was never written again.
    let mut changes = Vec::new();
    within("the changes in MONITOR", async {
        while changes.len() < 4 {
            let line = commands.next_line().await.unwrap().unwrap();
            assert!(!line.contains("\"subs\""), "a record field: {line}");
            let Some((_, command)) = line.split_once("] ") else {
                continue;
            };
            let writes = ["\"SADD\"", "\"SREM\"", "\"DEL\""];
            if command.contains(&subs_key) && writes.iter().any(|w| command.starts_with(w)) {
                changes.push(command.to_owned());
            }
        }
    })
    .await;
    let expected: Vec<String> = [
        ("SADD", "demo://a"),
        ("SADD", "demo://b"),
        ("SADD", "demo://c"),
        ("SREM", "demo://b"),
    ]
    .iter()
    .map(|(command, uri)| format!("\"{command}\" \"{subs_key}\" \"{uri}\""))
    .collect();
    assert_eq!(changes, expected);

    assert_eq!(client.delete().await, http::StatusCode::OK);
    until_key(
        "the set to go with the session",
        &connection,
        &subs_key,
        false,
    )
    .await;
}

#[tokio::test]
async fn a_replica_taking_over_subscribes_its_server_to_what_an_earlier_version_recorded() {
    let redis = Redis::start().await;
    let mut a = Replica::start(&redis, "a", &FAST_TAKEOVER).await;
    let b = Replica::start(&redis, "b", &FAST_TAKEOVER).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    let session = on_a.session.clone().unwrap();
    let record_key = format!("mcp-proxy:default:session:{session}");
    let subs_key = format!("mcp-proxy:default:subs:{session}");
    let mut connection = redis.connection().await;
    until_key("the record to be written", &connection, &record_key, true).await;
    // An earlier version kept the subscriptions in the record, as a JSON array.
    let _: () = connection
        .hset(&record_key, "subs", r#"["demo://counter"]"#)
        .await
        .unwrap();
    a.kill().await;

    let mut on_b = through(&on_a, &b);
    call_until_served(
        "the session to be taken over",
        &on_b,
        "echo",
        json!({ "text": "x" }),
    )
    .await;
    let mut listener = on_b.get(None).await;
    // First the gap rule's invalidation, from the proxy; then the new server's own update.
    let invalidated = listener
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(invalidated["params"]["uri"], "demo://counter");
    on_b.call_tool("counter", json!({})).await;
    let update = listener
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], "demo://counter");
    let members: BTreeSet<String> = connection.smembers(&subs_key).await.unwrap();
    assert_eq!(members, BTreeSet::from(["demo://counter".to_owned()]));
    let in_record: bool = connection.hexists(&record_key, "subs").await.unwrap();
    assert!(!in_record, "moved to the set");
}

#[tokio::test]
async fn subscribed_uris_are_bounded_in_bytes_too() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let long = |n: u32| format!("demo://long/{n}/{}", "x".repeat(300_000));
    for n in 0..3 {
        let subscribed = subscribe(&mut client, &long(n)).await;
        assert_eq!(subscribed["result"], json!({}), "{n}");
    }
    let refused = subscribe(&mut client, &long(3)).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("1048576 bytes"), "{message}");
    assert_eq!(proxy.metric("mcp_proxy_subscriptions_refused_total"), 1);
    let short = subscribe(&mut client, "demo://counter").await;
    assert_eq!(short["result"], json!({}), "a short one still fits");
    proxy.stop().await;
}
