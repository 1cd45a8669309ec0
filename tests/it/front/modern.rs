//! Clients of the 2026-07-28 revision in front of the legacy demo server: no initialize, no
//! session; per-request `_meta`; discover; results as modern clients read them; one upstream
//! session per principal (anonymous requests each their own, prepared ahead in a bounded pool);
//! every refusal with the code the spec gives it, and legacy sessions beside them untouched.

use crate::harness::{modern_meta, Client, Proxy, MODERN};
use http::{Method, StatusCode};
use serde_json::{json, Value};

/// A modern request: its headers mirror the body, as a conforming client sends them.
struct Modern {
    client: Client,
}

impl Modern {
    fn new(proxy: &Proxy, credential: Option<&str>) -> Modern {
        Modern::through(proxy.client(), credential)
    }

    /// Requests sent to `client`'s address and path, with `credential` as their bearer token.
    fn through(mut client: Client, credential: Option<&str>) -> Modern {
        client.authorization = credential.map(|c| format!("Bearer {c}"));
        Modern { client }
    }

    async fn send(&self, body: &Value, extra: &[(&str, &str)]) -> crate::harness::Reply {
        self.client.post_modern(body, extra).await
    }

    async fn request(&self, id: u64, method: &str, mut params: Value) -> (StatusCode, Value) {
        params["_meta"] = modern_meta(json!({}));
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let reply = self.send(&body, &[]).await;
        (reply.status, reply.response().await)
    }

    async fn call(&self, tool: &str, arguments: Value) -> Value {
        let (status, answer) = self
            .request(
                1,
                "tools/call",
                json!({ "name": tool, "arguments": arguments }),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        answer
    }
}

#[tokio::test]
async fn discover_describes_the_legacy_server_in_the_modern_form() {
    let proxy = Proxy::start().await;
    let modern = Modern::new(&proxy, Some("alice"));
    let (status, answer) = modern.request(1, "server/discover", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let result = &answer["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"], json!([MODERN]));
    assert!(result["capabilities"]["tools"].is_object(), "{result}");
    // The protocol-level sessions are the legacy face's; data-layer sessions are both faces'.
    assert_eq!(
        result["capabilities"]["experimental"],
        json!({ "sessions": { "dataLayer": {
            "methods": ["sessions/create", "sessions/delete", "messages/listen"],
            "meta": "io.modelcontextprotocol/session" } } }),
        "{result}"
    );
    assert_eq!(result["capabilities"]["sessions"], json!({}));
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-session-proxy-demo"
    );
    assert!(result.get("serverInfo").is_none());
    assert_eq!(result["ttlMs"], 0);
    assert_eq!(result["cacheScope"], "private");
    assert!(result["instructions"].is_string());
}

#[tokio::test]
async fn results_carry_their_type_server_and_caching_and_progress_streams_without_ids() {
    let proxy = Proxy::start_with(|config| {
        config.upstream.cache_ttl = std::time::Duration::from_secs(30);
        config.upstream.cache_scope = mcp_session_proxy::front::settings::CacheScope::Public;
    })
    .await;
    let modern = Modern::new(&proxy, Some("alice"));
    let echoed = modern.call("echo", json!({ "text": "hi" })).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "hi");
    assert_eq!(echoed["result"]["resultType"], "complete");
    assert!(
        echoed["result"].get("ttlMs").is_none(),
        "a call is not cacheable"
    );
    let (_, listed) = modern.request(2, "tools/list", json!({})).await;
    assert_eq!(listed["id"], 2);
    assert_eq!(listed["result"]["ttlMs"], 30_000);
    assert_eq!(listed["result"]["cacheScope"], "public");
    let (_, read) = modern
        .request(3, "resources/read", json!({ "uri": "demo://greeting" }))
        .await;
    assert_eq!(read["result"]["cacheScope"], "public");

    let mut params = json!({ "name": "progress", "arguments": { "steps": 3, "delay_ms": 50 } });
    params["_meta"] = modern_meta(json!({}));
    params["_meta"]["progressToken"] = json!("p-1");
    let body = json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params });
    let mut reply = modern.send(&body, &[]).await;
    assert!(reply.is_sse());
    let mut progress = Vec::new();
    let answer = loop {
        let received = reply.next_message().await.expect("the answer");
        assert_eq!(received.id, None, "nothing is resumable: no event ids");
        match received.message["method"].as_str() {
            Some(method) => {
                assert_eq!(method, "notifications/progress");
                assert_eq!(received.message["params"]["progressToken"], "p-1");
                progress.push(received.message["params"]["progress"].clone());
            }
            None => break received.message,
        }
    };
    assert_eq!(progress, vec![json!(1), json!(2), json!(3)]);
    assert_eq!(answer["id"], 9);
    assert_eq!(answer["result"]["resultType"], "complete");
}

#[tokio::test]
async fn each_principal_has_its_own_server_and_anonymous_requests_share_none() {
    let proxy = Proxy::start().await;
    let alice = Modern::new(&proxy, Some("alice"));
    let bob = Modern::new(&proxy, Some("bob"));
    let text = |answer: Value| answer["result"]["content"][0]["text"].clone();
    assert_eq!(text(alice.call("counter", json!({})).await), "1");
    assert_eq!(text(alice.call("counter", json!({})).await), "2");
    assert_eq!(text(bob.call("counter", json!({})).await), "1");
    assert_eq!(text(alice.call("counter", json!({})).await), "3");
    let stranger = Modern::new(&proxy, None);
    assert_eq!(text(stranger.call("counter", json!({})).await), "1");
    assert_eq!(text(stranger.call("counter", json!({})).await), "1");
    // Theirs ended with them; the pool holds fresh ones for the next strangers.
    let pooled = mcp_session_proxy::session::correlate::pool::DEFAULT_SIZE as u64;
    crate::harness::until("the strangers' sessions to end", 2 + pooled, || async {
        proxy.metric("mcp_proxy_sessions_open")
    })
    .await;
}

#[tokio::test]
async fn refusals_have_the_codes_the_spec_gives_them_and_bystanders_go_on() {
    let proxy = Proxy::start().await;
    let mut legacy = proxy.initialized_client("2025-11-25").await;
    assert_eq!(legacy.call_tool("counter", json!({})).await, "1");
    let modern = Modern::new(&proxy, Some("alice"));
    assert_eq!(
        modern.call("counter", json!({})).await["result"]["content"][0]["text"],
        "1"
    );

    let refused = |status: StatusCode, code: i64| {
        move |(got, answer): (StatusCode, Value)| {
            assert_eq!(got, status, "{answer}");
            assert_eq!(answer["error"]["code"], code, "{answer}");
            answer
        }
    };
    // No _meta, or one without a required field: -32602, 400, the id echoed.
    let body = json!({ "jsonrpc": "2.0", "id": 101, "method": "server/discover", "params": {} });
    let reply = modern.send(&body, &[]).await;
    let answer = refused(StatusCode::BAD_REQUEST, -32602)((reply.status, reply.json().await));
    assert_eq!(answer["id"], 101);
    let mut params = json!({ "_meta": modern_meta(json!({})) });
    params["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let body =
        json!({ "jsonrpc": "2.0", "id": 104, "method": "server/discover", "params": params });
    let reply = modern.send(&body, &[]).await;
    refused(StatusCode::BAD_REQUEST, -32602)((reply.status, reply.json().await));

    // Headers that do not mirror the body: -32020.
    let discover = json!({ "jsonrpc": "2.0", "id": 302, "method": "server/discover",
                           "params": { "_meta": modern_meta(json!({})) } });
    for extra in [
        vec![("mcp-method", "tools/list")],
        vec![("mcp-method", "SERVER/DISCOVER")],
    ] {
        let reply = modern.send(&discover, &extra).await;
        refused(StatusCode::BAD_REQUEST, -32020)((reply.status, reply.json().await));
    }
    let mut odd = discover.clone();
    odd["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let reply = modern.send(&odd, &[]).await;
    refused(StatusCode::BAD_REQUEST, -32020)((reply.status, reply.json().await));
    let call = json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "echo", "arguments": { "text": "x" }, "_meta": modern_meta(json!({})) } });
    let reply = modern.send(&call, &[("mcp-name", "add")]).await;
    refused(StatusCode::BAD_REQUEST, -32020)((reply.status, reply.json().await));
    let reply = modern
        .send(&call, &[("mcp-name", "=?base64?ZWNobw==?=")])
        .await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "the encoded form of the name is taken"
    );

    // A version not served: -32022 with what is.
    let reply = modern
        .send(&odd, &[("mcp-protocol-version", "v999.0.0")])
        .await;
    let answer = refused(StatusCode::BAD_REQUEST, -32022)((reply.status, reply.json().await));
    assert_eq!(
        answer["error"]["data"],
        json!({ "supported": [MODERN], "requested": "v999.0.0" })
    );

    // Removed and unknown methods: 404, -32601.
    for method in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "unknown/method",
    ] {
        let (status, answer) = modern.request(500, method, json!({})).await;
        let answer = refused(StatusCode::NOT_FOUND, -32601)((status, answer));
        assert_eq!(answer["id"], 500, "{method}");
    }

    // A server request the client did not declare the capability for: -32021.
    let (status, answer) = modern
        .request(
            401,
            "tools/call",
            json!({ "name": "list_roots", "arguments": {} }),
        )
        .await;
    let answer = refused(StatusCode::BAD_REQUEST, -32021)((status, answer));
    assert_eq!(
        answer["error"]["data"]["requiredCapabilities"],
        json!({ "roots": {} })
    );

    // GET and DELETE: 405.
    for method in [Method::GET, Method::DELETE] {
        let reply = proxy
            .client()
            .send(method, &[("mcp-protocol-version", MODERN)], None)
            .await;
        assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(reply.headers["allow"], "POST");
    }

    // Nothing of it reached the sessions beside it.
    assert_eq!(legacy.call_tool("counter", json!({})).await, "2");
    assert_eq!(
        modern.call("counter", json!({})).await["result"]["content"][0]["text"],
        "2"
    );
}

#[tokio::test]
async fn log_messages_reach_only_a_request_that_asked_for_their_level() {
    let proxy = Proxy::start().await;
    let modern = Modern::new(&proxy, Some("alice"));
    let logged = |level: Option<&str>| {
        let mut params = json!({ "name": "test_tool_with_logging", "arguments": {} });
        params["_meta"] = modern_meta(json!({}));
        if let Some(level) = level {
            params["_meta"]["io.modelcontextprotocol/logLevel"] = json!(level);
        }
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params });
        let modern = &modern;
        async move {
            let mut reply = modern.send(&body, &[]).await;
            let mut messages = 0;
            while let Some(received) = reply.next_message().await {
                match received.message["method"].as_str() {
                    Some("notifications/message") => messages += 1,
                    Some(other) => panic!("unexpected {other}"),
                    None => {
                        assert_eq!(received.message["result"]["resultType"], "complete");
                        break;
                    }
                }
            }
            messages
        }
    };
    assert_eq!(logged(None).await, 0, "no logLevel: no log messages");
    assert_eq!(logged(Some("debug")).await, 3);
    assert_eq!(logged(Some("info")).await, 3);
    assert_eq!(logged(Some("warning")).await, 0, "info is below warning");
    let mut params = json!({ "name": "echo", "arguments": {} });
    params["_meta"] = modern_meta(json!({}));
    params["_meta"]["io.modelcontextprotocol/logLevel"] = json!("loud");
    let body = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params });
    let reply = modern.send(&body, &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json().await["error"]["code"], -32602);
}

const ALL: fn() -> Value = || json!({ "elicitation": {}, "sampling": {}, "roots": {} });

impl Modern {
    /// `tools/call` declaring every capability, with `extra` params (inputResponses, state).
    async fn call_with(&self, id: u64, tool: &str, extra: Value) -> (StatusCode, Value) {
        let mut params = json!({ "name": tool, "arguments": {} });
        for (key, value) in extra.as_object().cloned().unwrap_or_default() {
            params[key] = value;
        }
        params["_meta"] = modern_meta(ALL());
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
        let reply = self.send(&body, &[]).await;
        (reply.status, reply.response().await)
    }
}

impl Modern {
    /// Retries the demo's elicitation call with `name` as the answer; the tool's text.
    async fn answer_name(&self, id: u64, state: &str, name: &str) -> Value {
        let answer = json!({ "user_name": { "action": "accept", "content": { "name": name } } });
        let extra = json!({ "inputResponses": answer, "requestState": state });
        let (_, done) = self
            .call_with(id, "test_input_required_result_elicitation", extra)
            .await;
        done["result"]["content"][0]["text"].clone()
    }
}

#[tokio::test]
async fn server_requests_become_input_required_and_the_retries_carry_the_answers() {
    let proxy = Proxy::start().await;
    let alice = Modern::new(&proxy, Some("alice"));
    // Three questions at once, in one answer.
    let (status, first) = alice
        .call_with(1, "test_input_required_result_multiple_inputs", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let requests = result["inputRequests"].as_object().unwrap();
    let methods: Vec<&str> = requests
        .values()
        .map(|r| r["method"].as_str().unwrap())
        .collect();
    assert_eq!(requests.len(), 3, "{first}");
    for method in ["elicitation/create", "sampling/createMessage", "roots/list"] {
        assert!(methods.contains(&method), "{first}");
    }
    assert!(requests
        .values()
        .all(|r| r.get("id").is_none() && r.get("jsonrpc").is_none()));
    let state = result["requestState"].as_str().unwrap().to_owned();
    let answers = json!({
        "user_name": { "action": "accept", "content": { "name": "Alice" } },
        "greeting": { "role": "assistant", "content": { "type": "text", "text": "Hello there!" }, "model": "m" },
        "client_roots": { "roots": [{ "uri": "file:///r", "name": "r" }] },
    });
    let (_, done) = alice
        .call_with(
            2,
            "test_input_required_result_multiple_inputs",
            json!({ "inputResponses": answers, "requestState": state }),
        )
        .await;
    assert_eq!(done["id"], 2, "the retry's own id");
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Hello there! Alice (1 roots)"
    );
    // A state is good for one retry.
    let (status, reused) = alice
        .call_with(
            3,
            "test_input_required_result_multiple_inputs",
            json!({ "inputResponses": answers, "requestState": state }),
        )
        .await;
    assert_eq!(
        (status, reused["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32602))
    );

    // Round after round, each with a state of its own.
    let (_, round1) = alice
        .call_with(4, "test_input_required_result_multi_round", json!({}))
        .await;
    let state1 = round1["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, round2) = alice
        .call_with(
            5,
            "test_input_required_result_multi_round",
            json!({
            "inputResponses": { "step1": { "action": "accept", "content": { "name": "Alice" } } },
            "requestState": state1 }),
        )
        .await;
    assert_eq!(round2["result"]["resultType"], "input_required", "{round2}");
    assert!(
        round2["result"]["inputRequests"].get("step2").is_some(),
        "{round2}"
    );
    let state2 = round2["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(state1, state2);
    let (_, round3) = alice
        .call_with(
            6,
            "test_input_required_result_multi_round",
            json!({
            "inputResponses": { "step2": { "action": "accept", "content": { "color": "blue" } } },
            "requestState": state2 }),
        )
        .await;
    assert_eq!(round3["result"]["content"][0]["text"], "Alice likes blue");
}

#[tokio::test]
async fn a_request_state_that_is_tampered_foreign_or_expired_is_refused_and_nothing_stays_held() {
    let proxy = Proxy::start_with(|config| {
        config.session.input_ttl = std::time::Duration::from_millis(300);
    })
    .await;
    let alice = Modern::new(&proxy, Some("alice"));
    let bob = Modern::new(&proxy, Some("bob"));
    let tool = "test_input_required_result_elicitation";
    let answer = json!({ "user_name": { "action": "accept", "content": { "name": "A" } } });
    let (_, first) = alice.call_with(1, tool, json!({})).await;
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let odd = [
        (&alice, json!(format!("{state}-TAMPERED"))),
        (&bob, json!(state)),
        (&alice, json!({ "state": state })),
    ];
    for (who, state) in odd {
        let (status, refused) = who
            .call_with(
                2,
                tool,
                json!({ "inputResponses": answer, "requestState": state }),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert_eq!(refused["id"], 2);
    }
    // The call is still held for alice: a retry of hers completes it.
    assert_eq!(alice.answer_name(3, &state, "A").await, "Hello, A!");

    // A stranger never comes back: after input_ttl the held request is released upstream, and
    // its session (one of its own) ends, beside alice's and the pool's; its state is refused as
    // expired.
    let stranger = Modern::new(&proxy, None);
    let (_, asked) = stranger.call_with(4, tool, json!({})).await;
    let state = asked["result"]["requestState"].as_str().unwrap().to_owned();
    let pooled = mcp_session_proxy::session::correlate::pool::DEFAULT_SIZE as u64;
    crate::harness::until(
        "the stranger's held call to be released",
        1 + pooled,
        || async { proxy.metric("mcp_proxy_sessions_open") },
    )
    .await;
    assert_eq!(proxy.metric("mcp_proxy_input_required_held"), 0);
    let (status, late) = stranger
        .call_with(
            5,
            tool,
            json!({ "inputResponses": answer, "requestState": state }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        late["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{late}"
    );
}

#[tokio::test]
async fn a_listen_acknowledges_what_it_can_carry_and_carries_only_that_tagged_with_its_id() {
    let proxy = Proxy::start().await;
    let alice = Modern::new(&proxy, Some("alice"));
    let listen = |id: u64, notifications: Value| {
        let mut params = json!({ "notifications": notifications });
        params["_meta"] = modern_meta(json!({}));
        json!({ "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": params })
    };
    let body = listen(
        7,
        json!({ "resourceSubscriptions": ["demo://counter"], "promptsListChanged": true,
                "toolsListChanged": true }),
    );
    let mut updates = alice.send(&body, &[]).await;
    assert!(updates.is_sse());
    let ack = updates.next_message().await.unwrap().message;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        7
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({ "toolsListChanged": true, "resourceSubscriptions": ["demo://counter"] }),
        "the demo announces no prompt list changes"
    );
    let mut tools_only = alice
        .send(&listen(8, json!({ "toolsListChanged": true })), &[])
        .await;
    assert_eq!(
        tools_only.next_message().await.unwrap().message["method"],
        "notifications/subscriptions/acknowledged"
    );

    alice.call("counter", json!({})).await;
    let update = updates.next_message().await.unwrap().message;
    assert_eq!(update["method"], "notifications/resources/updated");
    assert_eq!(update["params"]["uri"], "demo://counter");
    assert_eq!(
        update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        7
    );
    alice
        .call("notify_list_changed", json!({ "list": "tools" }))
        .await;
    for (stream, id) in [(&mut updates, 7), (&mut tools_only, 8)] {
        let changed = stream.next_message().await.unwrap().message;
        assert_eq!(
            changed["method"], "notifications/tools/list_changed",
            "{changed}"
        );
        assert_eq!(
            changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            id
        );
    }

    // Stopping the proxy ends each listen with its result.
    proxy.stop().await;
    for (stream, id) in [(&mut updates, 7), (&mut tools_only, 8)] {
        let end = crate::harness::within("the listen's result", stream.next_message())
            .await
            .expect("the result before the stream ends")
            .message;
        assert_eq!(end["id"], id, "{end}");
        assert_eq!(end["result"]["resultType"], "complete");
        assert_eq!(
            end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            id
        );
    }
}

#[tokio::test]
async fn a_principal_whose_server_died_gets_a_new_one_at_its_next_request() {
    let proxy = Proxy::start().await;
    let alice = Modern::new(&proxy, Some("alice"));
    let text = |answer: Value| answer["result"]["content"][0]["text"].clone();
    assert_eq!(text(alice.call("counter", json!({})).await), "1");
    assert_eq!(text(alice.call("counter", json!({})).await), "2");
    let (_, crashed) = alice
        .request(
            3,
            "tools/call",
            json!({ "name": "crash", "arguments": { "code": 3 } }),
        )
        .await;
    assert_eq!(crashed["error"]["code"], -32603, "{crashed}");
    assert_eq!(
        text(alice.call("counter", json!({})).await),
        "1",
        "a new server, opened transparently"
    );
}

#[tokio::test]
async fn calls_waiting_for_input_are_bounded_per_principal() {
    let proxy = Proxy::start_with(|config| config.session.max_held_per_principal = 2).await;
    let alice = Modern::new(&proxy, Some("alice"));
    let bob = Modern::new(&proxy, Some("bob"));
    let tool = "test_input_required_result_elicitation";
    let (_, first) = alice.call_with(1, tool, json!({})).await;
    let (_, second) = alice.call_with(2, tool, json!({})).await;
    for held in [&first, &second] {
        assert_eq!(held["result"]["resultType"], "input_required", "{held}");
    }
    let (status, third) = alice.call_with(3, tool, json!({})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{third}");
    assert_eq!(third["error"]["code"], -32603);
    // A retry that fails its checks does not make room: the call still waits.
    let state = first["result"]["requestState"].as_str().unwrap();
    let unanswered = json!({ "inputResponses": {}, "requestState": state });
    let (status, refused) = alice.call_with(7, tool, unanswered).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let (status, still) = alice.call_with(8, tool, json!({})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{still}");
    let (_, others) = bob.call_with(4, tool, json!({})).await;
    assert_eq!(
        others["result"]["resultType"], "input_required",
        "another principal's own bound"
    );
    // Answering one makes room.
    let state = first["result"]["requestState"].as_str().unwrap();
    assert_eq!(alice.answer_name(5, state, "A").await, "Hello, A!");
    let (_, again) = alice.call_with(6, tool, json!({})).await;
    assert_eq!(again["result"]["resultType"], "input_required", "{again}");
}

#[tokio::test]
async fn a_principal_is_served_by_one_server_on_every_replica_and_retries_go_anywhere() {
    use crate::harness::cluster::{Redis, Replica};
    let redis = Redis::start().await;
    let a = Replica::start(&redis, "a", &[]).await;
    let b = Replica::start(&redis, "b", &[]).await;
    let on = |replica: &Replica| Modern::through(Client::new(replica.addr), Some("alice"));
    let (via_a, via_b) = (on(&a), on(&b));
    let text = |answer: Value| answer["result"]["content"][0]["text"].clone();
    assert_eq!(text(via_a.call("counter", json!({})).await), "1");
    assert_eq!(
        text(via_b.call("counter", json!({})).await),
        "2",
        "the same server"
    );
    assert_eq!(text(via_a.call("counter", json!({})).await), "3");

    // Asked through a, answered through another replica.
    let (_, asked) = via_a
        .call_with(1, "test_input_required_result_elicitation", json!({}))
        .await;
    let state = asked["result"]["requestState"].as_str().unwrap().to_owned();
    let answer = json!({ "user_name": { "action": "accept", "content": { "name": "B" } } });
    let extra = json!({ "inputResponses": answer, "requestState": state });
    // Answered through c, which never served alice before.
    let c = Replica::start(&redis, "c", &[]).await;
    let (_, done) = on(&c)
        .call_with(2, "test_input_required_result_elicitation", extra)
        .await;
    assert_eq!(done["result"]["content"][0]["text"], "Hello, B!");
    assert_eq!(
        done["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        asked["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "c names the server without having opened a modern session itself: {done}"
    );
    assert!(asked["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"].is_string());

    // A listen on b hears what a call through a causes.
    let mut params = json!({ "notifications": { "resourceSubscriptions": ["demo://counter"] } });
    params["_meta"] = modern_meta(json!({}));
    let listen =
        json!({ "jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": params });
    let mut updates = via_b.send(&listen, &[]).await;
    let ack = updates.next_message().await.unwrap().message;
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["demo://counter"])
    );
    via_a.call("counter", json!({})).await;
    let update = crate::harness::within("the update on b", updates.next_message())
        .await
        .unwrap()
        .message;
    assert_eq!(update["params"]["uri"], "demo://counter", "{update}");
    assert_eq!(
        update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        9
    );
}

#[tokio::test]
async fn a_client_that_closes_its_stream_cancels_the_call_at_the_server() {
    // A session with a call in flight never idles out; once the call is cancelled, it does.
    let proxy = Proxy::start_with(|config| {
        config.session.idle_ttl = std::time::Duration::from_millis(300);
        config.http.json_wait = std::time::Duration::from_millis(10);
    })
    .await;
    let alice = Modern::new(&proxy, Some("alice"));
    let mut params = json!({ "name": "sleep", "arguments": { "ms": 60_000 } });
    params["_meta"] = modern_meta(json!({}));
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params });
    let reply = alice.send(&body, &[]).await;
    assert!(reply.is_sse());
    drop(reply);
    crate::harness::until("the cancelled call's session to idle out", 1, || async {
        proxy.metric("mcp_proxy_sessions_expired_total")
    })
    .await;
}

#[tokio::test]
async fn every_gateway_server_has_its_modern_face() {
    let proxy = Proxy::start_with(|config| {
        config.upstream.stdio = None;
        let mut server = mcp_session_proxy::config::ServerConfig::default();
        server.upstream.stdio = Some(format!(
            "{} demo-server",
            shell_words::quote(crate::harness::DEMO)
        ));
        config.servers.insert("alpha".into(), server);
    })
    .await;
    let mut client = proxy.client();
    client.path = "/servers/alpha/mcp".into();
    let alpha = Modern::through(client, Some("alice"));
    assert_eq!(
        alpha
            .call("echo", json!({ "text": "through the gateway" }))
            .await["result"]["content"][0]["text"],
        "through the gateway"
    );
    let (_, found) = alpha.request(2, "server/discover", json!({})).await;
    assert_eq!(found["result"]["supportedVersions"], json!([MODERN]));
}

#[tokio::test]
async fn the_list_cache_serves_both_eras() {
    let proxy = Proxy::start_with(|config| config.upstream.cache_lists = Some(true)).await;
    let mut legacy = proxy.initialized_client("2025-11-25").await;
    let listed = legacy.request("tools/list", json!({})).await;
    assert!(listed["result"]["tools"].is_array());
    let alice = Modern::new(&proxy, Some("alice"));
    for id in [1, 2] {
        let (_, modern) = alice.request(id, "tools/list", json!({})).await;
        assert_eq!(modern["result"]["tools"], listed["result"]["tools"]);
        assert_eq!(modern["result"]["resultType"], "complete");
        assert!(modern["result"]["ttlMs"].is_number());
    }
    assert!(proxy.metric("mcp_proxy_list_cache_hits_total") >= 1);
}

#[tokio::test]
async fn a_call_held_for_input_does_not_hold_up_a_stop() {
    // The drain waits for answers from servers (half the shutdown timeout: 30 s here), not for
    // clients that may never come back.
    let proxy = Proxy::start_with(|config| {
        config.shutdown_timeout = std::time::Duration::from_secs(60);
    })
    .await;
    let alice = Modern::new(&proxy, Some("alice"));
    let (_, asked) = alice
        .call_with(1, "test_input_required_result_elicitation", json!({}))
        .await;
    assert_eq!(asked["result"]["resultType"], "input_required");
    crate::harness::within("the stop", proxy.stop()).await;
}

#[tokio::test]
async fn marked_tool_parameters_must_travel_in_their_headers() {
    let proxy = Proxy::start().await;
    let alice = Modern::new(&proxy, Some("alice"));
    // Unchecked until the tool's schema is known; listing it teaches the proxy its marks.
    let (_, listed) = alice.request(1, "tools/list", json!({})).await;
    let lookup = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "lookup")
        .cloned()
        .unwrap();
    assert_eq!(
        lookup["inputSchema"]["properties"]["region"]["x-mcp-header"],
        "Region"
    );
    let call = |arguments: Value| {
        let mut params = json!({ "name": "lookup", "arguments": arguments });
        params["_meta"] = modern_meta(json!({}));
        json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params })
    };
    let region = json!({ "region": "Hello, 世界", "limit": 3, "text": "hi" });
    let encoded = "=?base64?SGVsbG8sIOS4lueVjA==?=";
    let ok = alice
        .send(
            &call(region.clone()),
            &[("mcp-param-region", encoded), ("Mcp-Param-Limit", "3.0")],
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    let ok = ok.response().await;
    assert_eq!(
        ok["result"]["content"][0]["text"], "Hello, 世界: hi",
        "{ok}"
    );

    let refusals: [(&[(&str, &str)], &str); 5] = [
        (&[("mcp-param-limit", "3")], "Region header is missing"),
        (
            &[("mcp-param-region", "Hello"), ("mcp-param-limit", "3")],
            "does not match",
        ),
        (
            &[
                ("mcp-param-region", "=?base64?SGVsbG8?="),
                ("mcp-param-limit", "3"),
            ],
            "base64",
        ),
        (&[("mcp-param-region", encoded)], "Limit header is missing"),
        (
            &[("mcp-param-region", encoded), ("mcp-param-limit", "4")],
            "does not match",
        ),
    ];
    for (headers, why) in refusals {
        let refused = alice.send(&call(region.clone()), headers).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{headers:?}");
        let refused = refused.response().await;
        assert_eq!(refused["error"]["code"], -32020, "{refused}");
        assert_eq!(refused["id"], 7);
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{headers:?}: {message}");
    }
    // A parameter absent (or null) from the arguments has no header, and none is expected.
    let without_limit = json!({ "region": "eu", "limit": null, "text": "x" });
    let ok = alice
        .send(&call(without_limit.clone()), &[("mcp-param-region", "eu")])
        .await
        .response()
        .await;
    assert_eq!(ok["result"]["content"][0]["text"], "eu: x", "{ok}");
    let stray = alice
        .send(
            &call(without_limit),
            &[("mcp-param-region", "eu"), ("mcp-param-limit", "1")],
        )
        .await;
    assert_eq!(stray.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn results_marked_reusable_are_answered_from_the_cache_for_whom_their_scope_says() {
    // Private for an hour, as configured for a legacy server that gives no hints itself.
    let proxy = Proxy::start_with(|config| {
        config.upstream.cache_ttl = std::time::Duration::from_secs(3600);
        config.upstream.cache_scope = mcp_session_proxy::front::settings::CacheScope::Private;
    })
    .await;
    let (alice, bob) = (
        Modern::new(&proxy, Some("alice")),
        Modern::new(&proxy, Some("bob")),
    );
    let (_, first) = alice.request(1, "resources/list", json!({})).await;
    let (_, again) = alice.request(2, "resources/list", json!({})).await;
    assert_eq!(again["id"], 2);
    assert_eq!(again["result"]["resources"], first["result"]["resources"]);
    assert_eq!(again["result"]["cacheScope"], "private");
    let ttl = again["result"]["ttlMs"].as_u64().unwrap();
    assert!(
        ttl > 0 && ttl <= 3_600_000,
        "what is left of its freshness: {ttl}"
    );
    assert_eq!(proxy.metric("mcp_proxy_response_cache_hits_total"), 1);
    bob.request(3, "resources/list", json!({})).await;
    assert_eq!(
        proxy.metric("mcp_proxy_response_cache_hits_total"),
        1,
        "private: not bob's"
    );
    assert_eq!(proxy.metric("mcp_proxy_response_cache_misses_total"), 2);
    // The server says its resources changed: the cached list is stale at once.
    alice
        .call("notify_list_changed", json!({ "list": "resources" }))
        .await;
    // (The server sent its notification before the call's answer.)
    alice.request(4, "resources/list", json!({})).await;
    assert_eq!(proxy.metric("mcp_proxy_response_cache_misses_total"), 3);
}

#[tokio::test]
async fn in_front_of_a_2026_07_28_server_its_own_hints_decide_what_is_reused() {
    // The modern demo's lists are public for a minute; its reads are not reusable.
    let proxy = Proxy::start_with(crate::harness::serve_the_modern_demo).await;
    let (alice, bob) = (
        Modern::new(&proxy, Some("alice")),
        Modern::new(&proxy, Some("bob")),
    );
    let (_, listed) = alice.request(1, "tools/list", json!({})).await;
    assert_eq!(listed["result"]["cacheScope"], "public", "{listed}");
    assert_eq!(listed["result"]["ttlMs"], 60_000);
    let (_, for_bob) = bob.request(2, "tools/list", json!({})).await;
    assert_eq!(for_bob["result"]["tools"], listed["result"]["tools"]);
    assert!(for_bob["result"]["ttlMs"].as_u64().unwrap() <= 60_000);
    assert_eq!(
        proxy.metric("mcp_proxy_response_cache_hits_total"),
        1,
        "public: bob reuses alice's"
    );
    let read = json!({ "uri": "demo://counter" });
    for id in [3, 4] {
        let (_, answer) = alice.request(id, "resources/read", read.clone()).await;
        assert_eq!(answer["result"]["ttlMs"], 0, "{answer}");
    }
    assert_eq!(proxy.metric("mcp_proxy_response_cache_hits_total"), 1);
    assert_eq!(proxy.metric("mcp_proxy_response_cache_misses_total"), 3);
}

#[tokio::test]
async fn a_client_that_leaves_while_its_server_initializes_leaves_nothing_behind() {
    use tokio::io::AsyncWriteExt;
    // A server that never answers `initialize`: the session opening for the request waits.
    let proxy = Proxy::start_with(|config| {
        config.upstream.stdio = Some("sleep 3600".into());
        config.upstream.protocol = mcp_session_proxy::wire::era::Era::Legacy; // nothing to probe
                                                                              // Each anonymous request opens its own session in its time (the pool has tests of its
                                                                              // own).
        config.session.anonymous_pool = 0;
        config.upstream.request_timeout = std::time::Duration::from_secs(3600);
    })
    .await;
    for credential in [Some("Bearer alice"), None] {
        let mut params = json!({ "name": "echo", "arguments": { "text": "hi" } });
        params["_meta"] = modern_meta(json!({}));
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params })
            .to_string();
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             accept: application/json, text/event-stream\r\nmcp-protocol-version: {MODERN}\r\n\
             mcp-method: tools/call\r\nmcp-name: echo\r\ncontent-length: {}\r\n",
            proxy.addr(),
            body.len()
        );
        if let Some(credential) = credential {
            request.push_str(&format!("authorization: {credential}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        let mut connection = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
        connection.write_all(request.as_bytes()).await.unwrap();
        crate::harness::until("the session to be opening", 1, || async {
            proxy.metric("mcp_proxy_sessions_open")
        })
        .await;
        drop(connection);
        crate::harness::until("the session of the client that left to end", 0, || async {
            proxy.metric("mcp_proxy_sessions_open")
        })
        .await;
    }
    // The principal that left opens a session again at its next request: nothing stale holds it.
    let alice = Modern::new(&proxy, Some("alice"));
    let mut params = json!({ "name": "echo", "arguments": { "text": "hi" } });
    params["_meta"] = modern_meta(json!({}));
    let body = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params });
    let pending = tokio::spawn(async move { alice.send(&body, &[]).await.status });
    crate::harness::until("alice's next session to be opening", 1, || async {
        proxy.metric("mcp_proxy_sessions_open")
    })
    .await;
    pending.abort();
}

/// A 2026-07-28 `tools/call` declaring `capabilities`.
fn call_body(id: u64, tool: &str, arguments: Value, capabilities: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": tool, "arguments": arguments, "_meta": modern_meta(capabilities) } })
}

/// The counter of the server that serves a stranger's next request.
async fn strangers_count(proxy: &Proxy) -> Value {
    let answer = Modern::new(proxy, None).call("counter", json!({})).await;
    answer["result"]["content"][0]["text"].clone()
}

#[tokio::test]
async fn a_stranger_over_the_rate_takes_nothing_from_the_pool() {
    let proxy = Proxy::start_with(|config| {
        config.session.anonymous_pool = 2;
        config.limits.requests_per_second = 0.01;
    })
    .await;
    let metric = |name: &str| proxy.metric(&format!("mcp_proxy_{name}"));
    assert_eq!(strangers_count(&proxy).await, "1");
    crate::harness::until("the pool to be ready", 2, || async {
        metric("anonymous_pool_ready")
    })
    .await;
    let (spawns, hits, misses) = (
        metric("upstream_spawns_total"),
        metric("anonymous_pool_hits_total"),
        metric("anonymous_pool_misses_total"),
    );
    let stranger = Modern::new(&proxy, None);
    let (status, answer) = stranger
        .request(
            2,
            "tools/call",
            json!({ "name": "counter", "arguments": {} }),
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{answer}");
    // Refused before a pooled server was lent (or a new one started in its place).
    assert_eq!(metric("anonymous_pool_ready"), 2);
    assert_eq!(metric("anonymous_pool_hits_total"), hits);
    assert_eq!(metric("anonymous_pool_misses_total"), misses);
    assert_eq!(metric("upstream_spawns_total"), spawns);
    proxy.stop().await;
}

#[tokio::test]
async fn strangers_get_servers_prepared_ahead_and_never_one_another_s_state() {
    let proxy = Proxy::start_with(|config| config.session.anonymous_pool = 3).await;
    let metric = |name: &str| proxy.metric(&format!("mcp_proxy_{name}"));
    assert_eq!(
        metric("upstream_spawns_total"),
        0,
        "nothing before the first"
    );
    assert_eq!(strangers_count(&proxy).await, "1");
    assert_eq!(metric("anonymous_pool_misses_total"), 1, "the first waited");
    // The pool filled up in the background, and the first one's server was replaced.
    crate::harness::until("the pool to be ready", 3, || async {
        metric("anonymous_pool_ready")
    })
    .await;
    assert_eq!(metric("upstream_spawns_total"), 4);
    assert_eq!(metric("sessions_open"), 3);
    // The next strangers take servers started ahead of them, each a fresh one.
    for n in 1..=2 {
        assert_eq!(strangers_count(&proxy).await, "1", "stranger {n}");
        assert_eq!(metric("anonymous_pool_hits_total"), n);
    }
    crate::harness::until("the pool to be ready again", 3, || async {
        metric("anonymous_pool_ready")
    })
    .await;
    assert_eq!(
        metric("upstream_spawns_total"),
        6,
        "one per request, ahead of it"
    );
    assert_eq!(metric("anonymous_pool_misses_total"), 1);

    // Other declared capabilities: a ready one gives its place up to one initialized for them.
    let stranger = Modern::new(&proxy, None);
    let body = call_body(2, "echo", json!({ "text": "x" }), json!({ "roots": {} }));
    assert_eq!(stranger.send(&body, &[]).await.status, StatusCode::OK);
    assert_eq!(metric("anonymous_pool_misses_total"), 2);
    // Its replacement is for the same capabilities: the next such request finds it ready.
    crate::harness::until("the pool to be ready again", 3, || async {
        metric("anonymous_pool_ready")
    })
    .await;
    let body = call_body(3, "echo", json!({ "text": "y" }), json!({ "roots": {} }));
    assert_eq!(stranger.send(&body, &[]).await.status, StatusCode::OK);
    assert_eq!(metric("anonymous_pool_hits_total"), 3);
    assert!(metric("sessions_open") <= 3);
    proxy.stop().await;
}

#[tokio::test]
async fn with_reuse_strangers_share_a_server_one_request_at_a_time() {
    let proxy = Proxy::start_with(|config| {
        config.session.anonymous_pool = 2;
        config.session.anonymous_pool_reuse = true;
    })
    .await;
    let stranger = Modern::new(&proxy, None);
    let spawns = || proxy.metric("mcp_proxy_upstream_spawns_total");
    for n in 1..=5 {
        let answer = stranger.call("echo", json!({ "text": "hi" })).await;
        assert_eq!(answer["result"]["content"][0]["text"], "hi", "call {n}");
    }
    assert_eq!(spawns(), 1, "one server served them all, one after another");
    assert_eq!(proxy.metric("mcp_proxy_sessions_open"), 1);
    assert_eq!(proxy.metric("mcp_proxy_anonymous_pool_hits_total"), 4);
    // Its server was initialized once, and keeps its state from one stranger to the next.
    assert_eq!(strangers_count(&proxy).await, "1");
    assert_eq!(strangers_count(&proxy).await, "2");

    // Other declared capabilities: a server initialized with them.
    let body = call_body(2, "echo", json!({ "text": "x" }), json!({ "roots": {} }));
    assert_eq!(stranger.send(&body, &[]).await.status, StatusCode::OK);
    assert_eq!(spawns(), 2);
    // The pool is full (two idle): a third set of capabilities takes the oldest idle one's place.
    let body = call_body(3, "echo", json!({ "text": "y" }), json!({ "sampling": {} }));
    assert_eq!(stranger.send(&body, &[]).await.status, StatusCode::OK);
    assert_eq!(spawns(), 3);
    assert_eq!(proxy.metric("mcp_proxy_sessions_open"), 2);
    let body = call_body(4, "echo", json!({ "text": "z" }), json!({ "roots": {} }));
    assert_eq!(stranger.send(&body, &[]).await.status, StatusCode::OK);
    assert_eq!(spawns(), 3, "the roots one was still idle");
    proxy.stop().await;
}

#[tokio::test]
async fn none_ready_is_503_with_retry_after_once_the_wait_is_over() {
    let proxy = Proxy::start_with(|config| {
        config.session.anonymous_pool = 1;
        config.session.anonymous_pool_wait = std::time::Duration::from_secs(1);
        config.http.json_wait = std::time::Duration::from_millis(10);
    })
    .await;
    // A slow call holds the one pooled session: its answer streams once json_wait is over.
    let busy = Modern::new(&proxy, None);
    let body = call_body(1, "sleep", json!({ "ms": 2500 }), json!({}));
    let slow = busy.send(&body, &[]).await;
    assert!(slow.is_sse());
    let stranger = Modern::new(&proxy, None);
    let body = call_body(2, "echo", json!({ "text": "hi" }), json!({}));
    let reply = stranger.send(&body, &[]).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reply.headers.contains_key("retry-after"));
    let answer = reply.json().await;
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("session.anonymous_pool"),
        "{answer}"
    );
    assert_eq!(
        proxy.metric(
            "mcp_proxy_sessions_rejected_total{server=\"default\",reason=\"anonymous_pool\"}"
        ),
        1
    );
    let answer = crate::harness::within("the slow call", slow.response()).await;
    assert!(answer.get("result").is_some(), "{answer}");
    // Its server ended with it; the next request gets the fresh one started in its place, and
    // that one is replaced in turn.
    let answer = stranger.call("echo", json!({ "text": "hi" })).await;
    assert_eq!(answer["result"]["content"][0]["text"], "hi");
    crate::harness::until("a server started for the next request", 3, || async {
        proxy.metric("mcp_proxy_upstream_spawns_total")
    })
    .await;
    proxy.stop().await;
}

#[tokio::test]
async fn with_reuse_a_lent_server_comes_back_only_as_it_was_lent() {
    let proxy = Proxy::start_with(|config| {
        config.session.anonymous_pool = 2;
        config.session.anonymous_pool_reuse = true;
        config.http.json_wait = std::time::Duration::from_millis(10);
    })
    .await;
    let stranger = Modern::new(&proxy, None);
    let spawns = || proxy.metric("mcp_proxy_upstream_spawns_total");
    let answer = stranger.call("echo", json!({ "text": "hi" })).await;
    assert_eq!(answer["result"]["content"][0]["text"], "hi");
    assert_eq!(spawns(), 1);

    // A call its client gave up on: the server may still be at it, so it is not lent again.
    let body = call_body(2, "sleep", json!({ "ms": 60_000 }), json!({}));
    let reply = stranger.send(&body, &[]).await;
    assert!(reply.is_sse());
    drop(reply);
    crate::harness::eventually("the abandoned server to be ended", || {
        proxy.metric("mcp_proxy_sessions_open") == 0
    })
    .await;
    stranger.call("echo", json!({ "text": "hi" })).await;
    assert_eq!(spawns(), 2, "a new server");

    // A server that died is replaced.
    let body = call_body(3, "crash", json!({ "code": 3 }), json!({}));
    let crashed = stranger.send(&body, &[]).await.response().await;
    assert!(crashed.get("error").is_some(), "{crashed}");
    stranger.call("echo", json!({ "text": "hi" })).await;
    assert_eq!(spawns(), 3, "a new server");

    // A call waiting for the client's input keeps its server out of the pool until it is over:
    // no other borrower meets the server's question.
    let (status, first) = stranger
        .call_with(4, "test_input_required_result_elicitation", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let held_spawns = spawns();
    let body = call_body(5, "echo", json!({ "text": "meanwhile" }), ALL());
    assert_eq!(stranger.send(&body, &[]).await.status, StatusCode::OK);
    assert_eq!(spawns(), held_spawns + 1, "the held server was not lent");
    assert_eq!(stranger.answer_name(6, &state, "Ann").await, "Hello, Ann!");
    crate::harness::eventually("the held call's server to end with it", || {
        proxy.metric("mcp_proxy_sessions_open") == 2
    })
    .await;
    proxy.stop().await;
}

#[tokio::test]
async fn idle_2026_07_28_streams_carry_keep_alives_at_the_configured_interval() {
    // Three keep-alives at 50 ms come at once; at a fixed 15 s they would take 45 s.
    let proxy = Proxy::start_with(|config| {
        config.http.sse_keep_alive = std::time::Duration::from_millis(50);
        config.http.json_wait = std::time::Duration::from_millis(10);
    })
    .await;
    let alice = Modern::new(&proxy, Some("alice"));
    let mut params = json!({ "notifications": { "toolsListChanged": true } });
    params["_meta"] = modern_meta(json!({}));
    let listen =
        json!({ "jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": params });
    let mut listening = alice.send(&listen, &[]).await;
    assert!(listening.is_sse());
    crate::harness::keep_alives(&mut listening, 3).await;

    let mut params = json!({ "name": "sleep", "arguments": { "ms": 60_000 } });
    params["_meta"] = modern_meta(json!({}));
    let call = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params });
    let mut calling = alice.send(&call, &[]).await;
    assert!(calling.is_sse());
    crate::harness::keep_alives(&mut calling, 3).await;
}

#[tokio::test]
async fn tools_are_exposed_to_2026_07_28_clients_as_configured() {
    let proxy = Proxy::start_with(|config| {
        config.tools.deny = vec!["sleep".into()];
        config.tools.rename = [("echo".to_owned(), "say".to_owned())].into();
    })
    .await;
    let alice = Modern::new(&proxy, Some("alice"));
    let (_, listed) = alice.request(1, "tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert!(names.contains(&"say"), "{names:?}");
    assert!(
        !names.contains(&"echo") && !names.contains(&"sleep"),
        "{names:?}"
    );
    assert_eq!(
        alice.call("say", json!({ "text": "renamed" })).await["result"]["content"][0]["text"],
        "renamed"
    );
    for hidden in ["echo", "sleep"] {
        let (_, refused) = alice
            .request(2, "tools/call", json!({ "name": hidden, "arguments": {} }))
            .await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert_eq!(
            refused["error"]["message"],
            format!("Unknown tool: {hidden}")
        );
    }
}

#[tokio::test]
async fn resources_are_shown_to_2026_07_28_clients_as_configured() {
    let proxy =
        Proxy::start_with(|config| config.resources.deny = vec!["demo://counter".into()]).await;
    let alice = Modern::new(&proxy, Some("alice"));
    let (_, listed) = alice.request(1, "resources/list", json!({})).await;
    let uris: Vec<&str> = listed["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|resource| resource["uri"].as_str())
        .collect();
    assert!(uris.contains(&"demo://greeting"), "{uris:?}");
    assert!(!uris.contains(&"demo://counter"), "{uris:?}");
    let (_, refused) = alice
        .request(2, "resources/read", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "Resource not found: demo://counter"
    );
    assert_eq!(refused["error"]["data"]["uri"], "demo://counter");

    let listen = |id: u64, uris: Value| {
        let mut params = json!({ "notifications": { "resourceSubscriptions": uris } });
        params["_meta"] = modern_meta(json!({}));
        json!({ "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": params })
    };
    let refused = alice.send(&listen(3, json!(["demo://counter"])), &[]).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    let refused = refused.json().await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(refused["error"]["data"]["uri"], "demo://counter");

    // A listen under every demo:// URI hears of the ones shown only.
    let mut updates = alice.send(&listen(4, json!(["demo://"])), &[]).await;
    assert!(updates.is_sse());
    let ack = updates.next_message().await.unwrap().message;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    alice
        .call(
            "emit_updates",
            json!({ "uris": ["demo://counter", "demo://greeting"], "count": 2 }),
        )
        .await;
    let update = updates.next_message().await.unwrap().message;
    assert_eq!(update["method"], "notifications/resources/updated");
    assert_eq!(update["params"]["uri"], "demo://greeting", "{update}");
    proxy.stop().await;
}

#[tokio::test]
async fn a_rate_counts_the_clients_requests_not_the_ones_the_proxy_makes_for_it() {
    // One request per 100 s: the session's initialize, made by the proxy, must not spend it.
    let proxy = Proxy::start_with(|config| config.limits.requests_per_second = 0.01).await;
    let alice = Modern::new(&proxy, Some("alice"));
    assert_eq!(
        alice.call("echo", json!({ "text": "first" })).await["result"]["content"][0]["text"],
        "first"
    );
    let (status, refused) = alice
        .request(
            2,
            "tools/call",
            json!({ "name": "echo", "arguments": { "text": "x" } }),
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
    assert_eq!(refused["error"]["code"], -32029, "{refused}");
    assert!(refused["error"]["data"]["retryAfterMs"].as_u64().unwrap() > 90_000);
}
