//! Data-layer sessions (seed `002`) in front of the legacy demo server: the seed's wire examples,
//! several isolated sessions per client on both eras (each its own child, its own counter), the
//! refusals (-32043 for a deleted, foreign or garbled cookie, -32044 where a session is
//! required) with a bystander unharmed, the bounds, expiry on the paused clock, and
//! `messages/listen` scoped to one session.

use std::time::Duration;

use crate::harness::{Client, Proxy};
use http::{Method, StatusCode};
use serde_json::{json, Value};

const KEY: &str = "io.modelcontextprotocol/session";
const VERSION: &str = "2026-07-28";

/// The cookie that names a session, from what `sessions/create` answered.
fn cookie(created: &Value) -> Value {
    let session = &created["result"]["session"];
    json!({ "sessionId": session["sessionId"], "state": session["state"] })
}

/// A legacy client's request within a data-layer session.
async fn within(client: &mut Client, cookie: &Value, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({ KEY: cookie });
    client.request(method, params).await
}

async fn count(client: &mut Client, cookie: &Value) -> String {
    let answer = within(client, cookie, "tools/call", json!({ "name": "counter" })).await;
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("counter answered {answer}"))
        .to_owned()
}

/// Sends a message exactly as written (the seed's examples) in `client`'s transport session.
async fn send_verbatim(client: &Client, text: &str) -> Value {
    let reply = client
        .post(&serde_json::from_str::<Value>(text).unwrap())
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{text}");
    reply.response().await
}

#[tokio::test]
async fn the_seeds_wire_examples_are_answered_as_it_writes_them() {
    let proxy = Proxy::start_with(|c| c.session.require_session = true).await;
    let mut client = proxy.client();
    let initialized = client.initialize("2025-11-25").await;
    let capabilities = &initialized["result"]["capabilities"];
    assert_eq!(capabilities["sessions"], json!({}), "{capabilities}");
    assert!(
        capabilities["experimental"]["sessions"]["dataLayer"]["methods"]
            .as_array()
            .unwrap()
            .contains(&json!("sessions/create"))
    );

    // Session creation.
    let created = send_verbatim(
        &client,
        r#"{"jsonrpc":"2.0","id":1,"method":"sessions/create"}"#,
    )
    .await;
    let session = &created["result"]["session"];
    let session_id = session["sessionId"].as_str().unwrap().to_owned();
    let state = session["state"].as_str().unwrap().to_owned();
    assert!(session_id.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    let expires_at = session["expiresAt"].as_str().unwrap();
    assert!(
        expires_at.ends_with('Z') && expires_at.len() == 20,
        "{expires_at}"
    );

    // Session usage, and the updated metadata in the result.
    let usage = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"echo","arguments":{{"msg":"hi"}},"_meta":{{"io.modelcontextprotocol/session":{{"sessionId":"{session_id}","state":"{state}"}}}}}}}}"#
    );
    let used = send_verbatim(&client, &usage).await;
    assert_eq!(used["id"], 2);
    assert_eq!(
        used["result"]["content"],
        json!([{ "type": "text", "text": "hi" }])
    );
    let metadata = &used["result"]["_meta"][KEY];
    assert_eq!(
        metadata["sessionId"],
        session_id.as_str(),
        "the id is never rewritten"
    );
    assert_eq!(metadata["state"], state.as_str());
    assert!(metadata["expiresAt"].as_str().unwrap().ends_with('Z'));

    // Session required.
    let required = send_verbatim(
        &client,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
    )
    .await;
    assert_eq!(required["id"], 4);
    assert_eq!(required["error"]["code"], -32044);
    assert!(required["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Session required"));

    // Session not found.
    let unknown = send_verbatim(
        &client,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{},"_meta":{"io.modelcontextprotocol/session":{"sessionId":"sess-invalid"}}}}"#,
    )
    .await;
    assert_eq!(unknown["id"], 3);
    assert_eq!(unknown["error"]["code"], -32043);
    assert_eq!(
        unknown["error"]["data"],
        json!({ "sessionId": "sess-invalid" })
    );
    assert!(unknown["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Session not found"));

    // Deleting (the client echoes the state it was given): the result revokes the cookie;
    // the session is gone.
    let delete = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"sessions/delete","params":{{"_meta":{{"io.modelcontextprotocol/session":{{"sessionId":"{session_id}","state":"{state}"}}}}}}}}"#
    );
    let deleted = send_verbatim(&client, &delete).await;
    assert_eq!(deleted["result"]["_meta"], json!({ KEY: null }));
    let after = send_verbatim(&client, &usage).await;
    assert_eq!(after["error"]["code"], -32043);
    assert_eq!(after["error"]["data"]["sessionId"], session_id.as_str());

    // Lists need no session; a create that carries a cookie is refused.
    let tools = client.request("tools/list", json!({})).await;
    assert!(tools["result"]["tools"].is_array());
    let reply = client
        .post(
            &json!({ "jsonrpc": "2.0", "id": 9, "method": "sessions/create",
                        "params": { "_meta": { KEY: { "sessionId": "x" } } } }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.response().await["error"]["code"], -32602);
    proxy.stop().await;
}

#[tokio::test]
async fn a_legacy_client_holds_several_sessions_on_one_transport_session_none_leaking() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let a = cookie(&client.request("sessions/create", json!({})).await);
    let b = cookie(&client.request("sessions/create", json!({})).await);
    assert_ne!(a["sessionId"], b["sessionId"]);
    assert_eq!(count(&mut client, &a).await, "1");
    assert_eq!(count(&mut client, &a).await, "2");
    assert_eq!(count(&mut client, &b).await, "1");
    assert_eq!(count(&mut client, &a).await, "3");
    assert_eq!(
        client.call_tool("counter", json!({})).await,
        "1",
        "the transport session's own server is a third one"
    );
    // A question of a's server is answered in the transport session and reaches a's server.
    let mut asking = client
        .post(&json!({ "jsonrpc": "2.0", "id": 30, "method": "tools/call",
                        "params": { "name": "list_roots", "_meta": { KEY: a.clone() } } }))
        .await;
    let question = asking.next_message().await.expect("the question");
    assert_eq!(
        question.id, None,
        "a named session's stream is not resumable by GET"
    );
    let question = question.message;
    assert_eq!(question["method"], "roots/list");
    let roots = json!({ "roots": [{ "uri": "file:///for-a", "name": "a" }] });
    let answered = client
        .post(&json!({ "jsonrpc": "2.0", "id": question["id"], "result": roots }))
        .await;
    assert_eq!(answered.status, StatusCode::ACCEPTED);
    let listed = crate::harness::within("the roots", async {
        loop {
            let received = asking.next_message().await.expect("the answer").message;
            if received["id"] == 30 {
                return received;
            }
        }
    })
    .await;
    let text = listed["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("file:///for-a"), "{listed}");
    assert_eq!(listed["result"]["_meta"][KEY]["sessionId"], a["sessionId"]);

    // The earlier drafts' names and key are taken too.
    let draft = client.request("session/create", json!({})).await;
    let id = draft["result"]["_meta"]["mcp/session"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = client
        .request(
            "tools/call",
            json!({ "name": "counter", "_meta": { "mcp/session": { "id": id } } }),
        )
        .await;
    assert_eq!(answer["result"]["content"][0]["text"], "1");
    let deleted = client.request("session/delete", json!({ "id": id })).await;
    assert_eq!(deleted["result"]["_meta"][KEY], Value::Null);
    // A data-layer session is never a transport session.
    let mut impostor = proxy.client();
    impostor.session = Some(a["sessionId"].as_str().unwrap().to_owned());
    impostor.protocol_version = Some("2025-11-25".into());
    let reply = impostor
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }))
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    proxy.stop().await;
}

/// A 2026-07-28 client: no transport session, `_meta` on every request.
struct Modern {
    client: Client,
    credential: String,
}

impl Modern {
    fn new(proxy: &Proxy, credential: &str) -> Modern {
        Modern::at(proxy.addr(), credential)
    }

    fn at(addr: std::net::SocketAddr, credential: &str) -> Modern {
        Modern {
            client: Client::new(addr),
            credential: format!("Bearer {credential}"),
        }
    }

    async fn send(
        &self,
        method: &str,
        params: Value,
        cookie: Option<&Value>,
    ) -> (StatusCode, Value) {
        let reply = self.send_raw(method, params, cookie).await;
        (reply.status, reply.response().await)
    }

    async fn send_raw(
        &self,
        method: &str,
        mut params: Value,
        cookie: Option<&Value>,
    ) -> crate::harness::Reply {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": { "name": "data-layer-test", "version": "1" },
        });
        if let Some(cookie) = cookie {
            params["_meta"][KEY] = cookie.clone();
        }
        let name = params["name"].as_str().unwrap_or_default().to_owned();
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", VERSION),
            ("mcp-method", method),
            ("authorization", self.credential.as_str()),
        ];
        if !name.is_empty() {
            headers.push(("mcp-name", name.as_str()));
        }
        let body = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
        self.client
            .send(Method::POST, &headers, Some(body.to_string().into()))
            .await
    }

    async fn create(&self) -> Value {
        let (status, created) = self.send("sessions/create", json!({}), None).await;
        assert_eq!(status, StatusCode::OK, "{created}");
        assert_eq!(created["result"]["resultType"], "complete");
        cookie(&created)
    }

    async fn count(&self, cookie: Option<&Value>) -> String {
        let (status, answer) = self
            .send("tools/call", json!({ "name": "counter" }), cookie)
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"))
            .to_owned()
    }
}

#[tokio::test]
async fn a_modern_client_holds_several_sessions_that_count_apart() {
    let proxy = Proxy::start().await;
    let alice = Modern::new(&proxy, "alice");
    let (_, discovered) = alice.send("server/discover", json!({}), None).await;
    assert_eq!(discovered["result"]["capabilities"]["sessions"], json!({}));
    let a = alice.create().await;
    let b = alice.create().await;
    assert_eq!(alice.count(Some(&a)).await, "1");
    assert_eq!(alice.count(Some(&b)).await, "1");
    assert_eq!(alice.count(Some(&a)).await, "2");
    assert_eq!(
        alice.count(None).await,
        "1",
        "the principal's own session is apart"
    );
    let (_, answer) = alice
        .send("tools/call", json!({ "name": "counter" }), Some(&b))
        .await;
    assert_eq!(answer["result"]["content"][0]["text"], "2");
    assert_eq!(answer["result"]["resultType"], "complete");
    assert_eq!(answer["result"]["_meta"][KEY]["sessionId"], b["sessionId"]);
    assert!(answer["result"]["_meta"]["io.modelcontextprotocol/serverInfo"].is_object());
    // A subscription within b, heard on b's listen only.
    let mut on_b = alice.send_raw("messages/listen", json!({}), Some(&b)).await;
    let mut on_a = alice.send_raw("messages/listen", json!({}), Some(&a)).await;
    for listen in [&mut on_b, &mut on_a] {
        let ack = listen.next_message().await.unwrap().message;
        assert_eq!(ack["method"], "notifications/messages/listen");
    }
    let subscribe = json!({ "uri": "demo://counter" });
    let (status, subscribed) = alice.send("resources/subscribe", subscribe, Some(&b)).await;
    assert_eq!(status, StatusCode::OK, "{subscribed}");
    alice.count(Some(&b)).await;
    alice.count(Some(&a)).await;
    let updated = on_b
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(updated["params"]["uri"], "demo://counter");
    let (_, deleted) = alice.send("sessions/delete", json!({}), Some(&a)).await;
    assert_eq!(deleted["result"]["_meta"], json!({ KEY: null }));
    let (status, gone) = alice
        .send("tools/call", json!({ "name": "counter" }), Some(&a))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(gone["error"]["code"], -32043);
    proxy.stop().await;
}

#[tokio::test]
async fn deleted_foreign_and_garbled_cookies_are_unknown_sessions_and_a_bystander_goes_on() {
    let proxy = Proxy::start_with(|c| c.session.max_data_sessions_per_principal = 3).await;
    let alice = Modern::new(&proxy, "alice");
    let bob = Modern::new(&proxy, "bob");
    let bystander = alice.create().await;
    assert_eq!(alice.count(Some(&bystander)).await, "1");
    let deleted = alice.create().await;
    alice
        .send("sessions/delete", json!({}), Some(&deleted))
        .await;
    let mut tampered = bystander.clone();
    tampered["state"] = json!("AAAAAAAAAAAAAAAAAAAAAAAA");
    let stateless = json!({ "sessionId": bystander["sessionId"] });
    let refusals = [
        ("without its state", &alice, stateless),
        ("deleted", &alice, deleted.clone()),
        ("another principal's", &bob, bystander.clone()),
        ("tampered state", &alice, tampered),
        ("unknown", &alice, json!({ "sessionId": "sess-nobody" })),
        ("id not a string", &alice, json!({ "sessionId": 12 })),
        ("id with a space", &alice, json!({ "sessionId": "a b" })),
        ("not an object", &alice, json!("sess")),
    ];
    for (what, client, cookie) in refusals {
        let (status, answer) = client
            .send("tools/call", json!({ "name": "counter" }), Some(&cookie))
            .await;
        assert_eq!(status, StatusCode::OK, "{what}");
        assert_eq!(answer["error"]["code"], -32043, "{what}: {answer}");
        assert!(
            answer["error"]["data"]["sessionId"].is_string(),
            "{what}: {answer}"
        );
    }
    assert_eq!(
        alice.count(Some(&bystander)).await,
        "2",
        "the bystander counts on"
    );

    // Bounds: a state over the limit, and sessions per principal.
    let mut big = bystander.clone();
    big["state"] = json!("x".repeat(5000));
    let (status, answer) = alice
        .send("tools/call", json!({ "name": "counter" }), Some(&big))
        .await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32602))
    );
    alice.create().await;
    alice.create().await;
    let (status, answer) = alice.send("sessions/create", json!({}), None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{answer}");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("limit of 3"));
    bob.create().await;
    assert_eq!(alice.count(Some(&bystander)).await, "3");
    proxy.stop().await;
}

#[tokio::test]
async fn a_server_that_requires_sessions_refuses_calls_without_one_on_both_eras() {
    let proxy = Proxy::start_with(|c| c.session.require_session = true).await;
    let alice = Modern::new(&proxy, "alice");
    let (status, refused) = alice
        .send("tools/call", json!({ "name": "counter" }), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(refused["error"]["code"], -32044);
    let (_, listed) = alice.send("tools/list", json!({}), None).await;
    assert!(
        listed["result"]["tools"].is_array(),
        "lists need no session"
    );
    let a = alice.create().await;
    assert_eq!(alice.count(Some(&a)).await, "1");
    let mut legacy = proxy.initialized_client("2025-06-18").await;
    let refused = legacy
        .request("resources/read", json!({ "uri": "demo://greeting" }))
        .await;
    assert_eq!(refused["error"]["code"], -32044);
    proxy.stop().await;

    // With state handles, a call within a handle is within a session.
    let proxy = Proxy::start_with(|c| {
        c.session.require_session = true;
        c.session.correlation = mcp_session_proxy::config::Correlation::Handle;
    })
    .await;
    let alice = Modern::new(&proxy, "alice");
    let open = json!({ "name": "open_session_handle" });
    let (_, opened) = alice.send("tools/call", open, None).await;
    let handle = opened["result"]["structuredContent"]["handle"].clone();
    let within = json!({ "name": "counter", "arguments": { "session_handle": handle } });
    let (_, counted) = alice.send("tools/call", within, None).await;
    assert_eq!(counted["result"]["content"][0]["text"], "1", "{counted}");
    let (_, refused) = alice
        .send("tools/call", json!({ "name": "counter" }), None)
        .await;
    assert_eq!(refused["error"]["code"], -32044);
    proxy.stop().await;
}

/// Long enough that set-up cannot reach it on the paused clock (see `lifecycle.rs`).
const TTL: Duration = Duration::from_secs(6 * 3600);

#[tokio::test(start_paused = true)]
async fn a_data_layer_session_expires_unused_or_at_the_end_of_its_lifetime() {
    let proxy = Proxy::start_with(|c| {
        c.session.idle_ttl = 4 * TTL;
        c.session.data_session_idle_ttl = TTL;
        c.session.data_session_lifetime = 2 * TTL;
        c.upstream.request_timeout = 4 * TTL;
    })
    .await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let kept = cookie(&client.request("sessions/create", json!({})).await);
    let lapsing = cookie(&client.request("sessions/create", json!({})).await);
    assert_eq!(count(&mut client, &lapsing).await, "1");
    tokio::time::advance(TTL / 2).await;
    assert_eq!(count(&mut client, &kept).await, "1");
    tokio::time::advance(TTL / 2 + Duration::from_secs(30)).await;
    crate::harness::on_the_paused_clock_until("the unused session to expire", || {
        proxy.metric("mcp_proxy_sessions_expired_total") > 0
    })
    .await;
    let answer = within(
        &mut client,
        &lapsing,
        "tools/call",
        json!({ "name": "counter" }),
    )
    .await;
    assert_eq!(answer["error"]["code"], -32043, "{answer}");
    assert_eq!(
        count(&mut client, &kept).await,
        "2",
        "a session used meanwhile lives on"
    );
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    // However much it is used, a session ends with its lifetime.
    tokio::time::advance(TTL / 2).await;
    assert_eq!(count(&mut client, &kept).await, "3");
    tokio::time::advance(TTL / 2).await;
    let answer = within(
        &mut client,
        &kept,
        "tools/call",
        json!({ "name": "counter" }),
    )
    .await;
    assert_eq!(answer["error"]["code"], -32043, "{answer}");
    proxy.stop().await;
}

#[tokio::test]
async fn messages_listen_carries_a_sessions_updates_only_to_that_session() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let a = cookie(&client.request("sessions/create", json!({})).await);
    let b = cookie(&client.request("sessions/create", json!({})).await);
    let listen = |cookie: Option<&Value>| {
        let mut params = json!({});
        if let Some(cookie) = cookie {
            params["_meta"] = json!({ KEY: cookie });
        }
        json!({ "jsonrpc": "2.0", "id": 40, "method": "messages/listen", "params": params })
    };
    let mut on_a = client.post(&listen(Some(&a))).await;
    let mut on_b = client.post(&listen(Some(&b))).await;
    let mut global = client.post(&listen(None)).await;
    for stream in [&mut on_a, &mut on_b, &mut global] {
        assert!(stream.is_sse());
        let ack = stream.next_message().await.expect("acknowledged").message;
        assert_eq!(ack["method"], "notifications/messages/listen");
    }
    let emit =
        |uri: &str| json!({ "name": "emit_updates", "arguments": { "uris": [uri], "count": 1 } });
    within(&mut client, &b, "tools/call", emit("demo://for-b")).await;
    within(&mut client, &a, "tools/call", emit("demo://for-a")).await;
    client
        .call_tool(
            "emit_updates",
            json!({ "uris": ["demo://global"], "count": 1 }),
        )
        .await;
    const UPDATED: &str = "notifications/resources/updated";
    assert_eq!(
        on_a.next_with_method(UPDATED).await["params"]["uri"],
        "demo://for-a"
    );
    assert_eq!(
        on_b.next_with_method(UPDATED).await["params"]["uri"],
        "demo://for-b"
    );
    assert_eq!(
        global.next_with_method(UPDATED).await["params"]["uri"],
        "demo://global"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn state_handles_give_a_2026_07_28_python_client_isolated_sessions_through_tool_arguments() {
    let proxy = Proxy::start_with(|c| {
        c.session.correlation = mcp_session_proxy::config::Correlation::Handle;
    })
    .await;
    let mut command = crate::harness::python_script("handles_client.py");
    command
        .arg(format!("http://{}/mcp", proxy.addr()))
        .arg("alice");
    let stdout = crate::harness::stdout_of("the Python client with handles", &mut command).await;
    let report: Value = serde_json::from_slice(&stdout).expect("one JSON line");
    assert_eq!(report["version"], VERSION);
    let tools = report["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("open_session_handle")), "{report}");
    assert!(tools.contains(&json!("close_session_handle")), "{report}");
    assert_eq!(report["counter_arguments"], json!(["session_handle"]));
    assert_eq!(report["distinct"], true);
    assert_eq!(
        report["counts"],
        json!({ "first": ["1", "2", "3"], "second": ["1"], "none": ["1"] })
    );
    assert_eq!(report["closed"][0], false);
    assert_eq!(report["after_close"][0], true, "{report}");
    assert!(report["after_close"][1]
        .as_str()
        .unwrap()
        .contains("open_session_handle"));
    proxy.stop().await;
}

#[tokio::test]
async fn state_handles_serve_legacy_clients_and_the_tool_list_is_the_same_for_everyone() {
    let proxy = Proxy::start_with(|c| {
        c.session.correlation = mcp_session_proxy::config::Correlation::Handle;
    })
    .await;
    let mut client = proxy.initialized_client("2025-06-18").await;
    let legacy_list = client.request("tools/list", json!({})).await;
    let alice = Modern::new(&proxy, "alice");
    let (_, modern_list) = alice.send("tools/list", json!({}), None).await;
    assert_eq!(modern_list["result"]["cacheScope"], "public");
    assert_eq!(
        legacy_list["result"]["tools"],
        modern_list["result"]["tools"]
    );
    let opened = client.call_tool("open_session_handle", json!({})).await;
    let handle = opened
        .split_whitespace()
        .nth(3)
        .unwrap()
        .trim_end_matches('.')
        .to_owned();
    let within = json!({ "session_handle": handle });
    assert_eq!(client.call_tool("counter", within.clone()).await, "1");
    assert_eq!(client.call_tool("counter", within.clone()).await, "2");
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    // Another principal cannot use it.
    let (_, foreign) = Modern::new(&proxy, "bob")
        .send(
            "tools/call",
            json!({ "name": "counter", "arguments": within.clone() }),
            None,
        )
        .await;
    assert_eq!(foreign["result"]["isError"], true, "{foreign}");
    assert_eq!(client.call_tool("counter", within).await, "3");
    proxy.stop().await;
}

#[tokio::test]
async fn data_layer_sessions_are_served_by_every_replica_and_taken_over_with_their_owner() {
    use crate::harness::cluster::{Redis, Replica};
    let redis = Redis::start().await;
    let mut a = Replica::start(&redis, "a", &[]).await;
    let b = Replica::start(&redis, "b", &[]).await;
    let c = Replica::start(&redis, "c", &[]).await;
    let (via_a, via_b, via_c) = (
        Modern::at(a.addr, "alice"),
        Modern::at(b.addr, "alice"),
        Modern::at(c.addr, "alice"),
    );
    let x = via_a.create().await;
    let y = via_b.create().await;
    assert_eq!(via_b.count(Some(&x)).await, "1");
    assert_eq!(via_c.count(Some(&x)).await, "2");
    assert_eq!(via_a.count(Some(&x)).await, "3");
    assert_eq!(via_c.count(Some(&y)).await, "1");
    assert_eq!(via_a.count(Some(&y)).await, "2");
    let (_, foreign) = Modern::at(c.addr, "bob")
        .send("tools/call", json!({ "name": "counter" }), Some(&x))
        .await;
    assert_eq!(foreign["error"]["code"], -32043);

    // A legacy client whose transport session lives on b, naming x through c.
    let mut legacy = Client::new(b.addr);
    legacy.authorization = Some("Bearer alice".into());
    legacy.initialize("2025-11-25").await;
    legacy.addr = c.addr;
    assert_eq!(count(&mut legacy, &x).await, "4");
    // And creating one through c, where its transport session is a view.
    let z = cookie(&legacy.request("sessions/create", json!({})).await);
    assert_eq!(count(&mut legacy, &z).await, "1");
    legacy.addr = b.addr;
    assert_eq!(count(&mut legacy, &z).await, "2");

    // x's owner dies: another replica takes it over with a new server (its count starts again),
    // and the cookie still names it.
    a.kill().await;
    // Until then a 503 that says when to retry (as `crate::harness::cluster::call_until_served`).
    let answer = crate::harness::within("x to be served again", async {
        loop {
            let reply = via_b
                .send_raw("tools/call", json!({ "name": "counter" }), Some(&x))
                .await;
            if reply.status == StatusCode::OK {
                return reply.response().await;
            }
            assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
            assert!(
                reply.headers.contains_key("retry-after"),
                "told when to retry"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(answer["result"]["content"][0]["text"], "1", "{answer}");
    assert_eq!(answer["result"]["_meta"][KEY]["sessionId"], x["sessionId"]);
    assert_eq!(
        via_c.count(Some(&y)).await,
        "3",
        "y, owned by b, never moved"
    );
}

#[tokio::test]
async fn in_front_of_a_2026_07_28_server_each_session_is_a_bridge_of_its_own() {
    let proxy = Proxy::start_with(crate::harness::serve_the_modern_demo).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let a = cookie(&client.request("sessions/create", json!({})).await);
    let b = cookie(&client.request("sessions/create", json!({})).await);
    assert_eq!(count(&mut client, &a).await, "1");
    assert_eq!(count(&mut client, &a).await, "2");
    assert_eq!(count(&mut client, &b).await, "1");
    let alice = Modern::new(&proxy, "alice");
    let x = alice.create().await;
    let y = alice.create().await;
    assert_eq!(alice.count(Some(&x)).await, "1");
    assert_eq!(alice.count(Some(&y)).await, "1");
    assert_eq!(alice.count(Some(&x)).await, "2");
    proxy.stop().await;
}

#[tokio::test]
async fn a_websocket_connection_holds_data_layer_sessions_handles_and_listens() {
    use crate::harness::ws::Ws;
    let proxy = Proxy::start_with(|c| {
        c.session.correlation = mcp_session_proxy::config::Correlation::Handle;
    })
    .await;
    let mut ws = Ws::connect(proxy.addr()).await;
    let initialized = ws
        .request(
            "initialize",
            json!({ "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": { "name": "ws", "version": "1" } }),
        )
        .await;
    assert_eq!(initialized["result"]["capabilities"]["sessions"], json!({}));
    ws.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
        .await;
    let a = cookie(&ws.request("sessions/create", json!({})).await);
    let b = cookie(&ws.request("sessions/create", json!({})).await);
    let counter = |cookie: &Value| json!({ "name": "counter", "_meta": { KEY: cookie } });
    let text = |answer: Value| answer["result"]["content"][0]["text"].clone();
    assert_eq!(text(ws.request("tools/call", counter(&a)).await), "1");
    assert_eq!(text(ws.request("tools/call", counter(&a)).await), "2");
    assert_eq!(text(ws.request("tools/call", counter(&b)).await), "1");
    let own = ws.request("tools/call", json!({ "name": "counter" })).await;
    assert_eq!(text(own), "1", "the connection's own session is apart");

    // A listen scoped to b hears b's updates.
    ws.send(
        json!({ "jsonrpc": "2.0", "id": "listen-b", "method": "messages/listen",
                    "params": { "_meta": { KEY: b.clone() } } }),
    )
    .await;
    let emit = json!({ "name": "emit_updates", "_meta": { KEY: b.clone() },
                       "arguments": { "uris": ["demo://for-b"], "count": 1 } });
    ws.request("tools/call", emit).await;
    let mut heard = Vec::new();
    while heard.len() < 2 {
        let message = ws.recv().await;
        if let Some(method) = message["method"].as_str() {
            heard.push((method.to_owned(), message["params"]["uri"].clone()));
        }
    }
    assert_eq!(heard[0].0, "notifications/messages/listen");
    assert_eq!(
        heard[1],
        (
            "notifications/resources/updated".into(),
            json!("demo://for-b")
        )
    );

    // Handles: the list has the tools; a handle counts on its own.
    let tools = ws.request("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"open_session_handle"), "{names:?}");
    let opened = ws
        .request("tools/call", json!({ "name": "open_session_handle" }))
        .await;
    let handle = opened["result"]["structuredContent"]["handle"].clone();
    let within = json!({ "name": "counter", "arguments": { "session_handle": handle } });
    assert_eq!(text(ws.request("tools/call", within.clone()).await), "1");
    assert_eq!(text(ws.request("tools/call", within).await), "2");
    proxy.stop().await;
}

#[tokio::test]
async fn an_idle_messages_listen_carries_keep_alives_at_the_configured_interval() {
    let proxy = Proxy::start_with(|c| c.http.sse_keep_alive = Duration::from_millis(50)).await;
    let client = proxy.initialized_client("2025-11-25").await;
    let mut listening = client
        .post(&json!({ "jsonrpc": "2.0", "id": 40, "method": "messages/listen", "params": {} }))
        .await;
    assert!(listening.is_sse());
    // Three at 50 ms come at once; at a fixed 15 s they would take 45 s.
    crate::harness::keep_alives(&mut listening, 3).await;
}

/// A legacy client's cookie is the same cookie however its key is spelled in JSON: with an
/// escaped `/` (or any escape) it still names its session (and a foreign one is still refused),
/// and the server never sees it.
#[tokio::test]
async fn a_cookie_whose_key_is_written_with_escapes_names_its_session_all_the_same() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let a = cookie(&client.request("sessions/create", json!({})).await);
    assert_eq!(count(&mut client, &a).await, "1");
    let escaped = |id: u64, cookie: &Value| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"counter","_meta":{{"io.modelcontextprotocol\/session":{cookie}}}}}}}"#
        )
    };
    let reply = client.post_text(&escaped(90, &a)).await;
    assert_eq!(reply.status, StatusCode::OK);
    let answer = reply.response().await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "2",
        "counted in the named session, not the transport session: {answer}"
    );
    let unknown = json!({ "sessionId": "sess-nobody" });
    let reply = client.post_text(&escaped(91, &unknown)).await;
    let answer = reply.response().await;
    assert_eq!(answer["error"]["code"], -32043, "{answer}");
    assert_eq!(
        client.call_tool("counter", json!({})).await,
        "1",
        "the transport session's own counter was never touched"
    );
    proxy.stop().await;
}
