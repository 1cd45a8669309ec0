//! OpenTelemetry traces through the proxy: spans exported over OTLP/HTTP to a receiver that
//! decodes them with the official protobuf definitions (tests/python/otlp_receiver.py), one
//! trace from the client's `traceparent` through two replicas to a stdio server.

use std::sync::{Arc, Mutex};

use crate::harness::cluster::{metric, through, Redis, Replica};
use crate::harness::{
    free_port, modern_request, python_script, spawn_announcing, spawn_proxy, until, within, Client,
    Proxy,
};
use serde_json::{json, Value};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The OTLP/HTTP receiver, and every span it decoded so far.
struct Receiver {
    _child: tokio::process::Child,
    port: u16,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let (child, first, mut lines) = spawn_announcing(
            "the OTLP receiver's port",
            python_script("otlp_receiver.py").stdin(std::process::Stdio::piped()),
        )
        .await;
        let port = first
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("not a port: {first}"));
        let spans = Arc::new(Mutex::new(Vec::new()));
        let seen = spans.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                seen.lock()
                    .unwrap()
                    .push(serde_json::from_str(&line).unwrap());
            }
        });
        Receiver {
            _child: child,
            port,
            spans,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The spans of `trace`, once there are `count` of them.
    async fn trace(&self, trace: &str, count: usize) -> Vec<Value> {
        let of_trace = || -> Vec<Value> {
            let spans = self.spans.lock().unwrap();
            spans
                .iter()
                .filter(|s| s["trace_id"] == trace)
                .cloned()
                .collect()
        };
        let wanted = format!("{count} spans of trace {trace}");
        let waited = tokio::time::timeout(std::time::Duration::from_secs(20), async {
            while of_trace().len() < count {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        });
        if waited.await.is_err() {
            panic!(
                "timed out waiting for {wanted}: {:#?}",
                self.spans.lock().unwrap()
            );
        }
        of_trace()
    }
}

fn traceparent(trace: &str, flags: &str) -> String {
    format!("00-{trace}-{CLIENT_SPAN}-{flags}")
}

/// The one span of `spans` named `name`.
fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found: Vec<&Value> = spans.iter().filter(|s| s["name"] == name).collect();
    assert_eq!(found.len(), 1, "one {name} span in {spans:#?}");
    found[0]
}

async fn traced_replicas(redis: &Redis, receiver: &Receiver) -> (Replica, Replica) {
    let endpoint = receiver.endpoint();
    let a = Replica::start(redis, "a", &["--otlp-endpoint", &endpoint]).await;
    let b = Replica::start(redis, "b", &["--otlp-endpoint", &endpoint]).await;
    (a, b)
}

#[tokio::test]
async fn one_trace_runs_from_the_client_through_two_replicas_to_a_stdio_server() {
    let receiver = Receiver::start().await;
    let redis = Redis::start().await;
    let (a, b) = traced_replicas(&redis, &receiver).await;
    let mut on_a = Client::new(a.addr);
    on_a.authorization = Some("Bearer secret-token".into());
    on_a.initialize("2025-11-25").await;
    let session = on_a.session.clone().unwrap();
    // The session lives on a; b serves its client through the hop.
    let mut on_b = through(&on_a, &b);
    on_b.extra_headers = vec![
        ("traceparent".into(), traceparent(TRACE, "01")),
        ("tracestate".into(), "vendor=opaque".into()),
    ];
    let answer = on_b
        .request("tools/call", json!({ "name": "trace_context" }))
        .await;
    let seen = &answer["result"]["structuredContent"];

    let spans = receiver.trace(TRACE, 3).await;
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let request = named(&spans, "tools/call trace_context");
    let hop = named(&spans, "replica hop");
    let exchange = named(&spans, "upstream exchange");
    // The client's span → b's request span → b's hop → a's exchange with the server.
    assert_eq!(request["parent_span_id"], CLIENT_SPAN);
    assert_eq!(hop["parent_span_id"], request["span_id"]);
    assert_eq!(exchange["parent_span_id"], hop["span_id"]);
    assert_eq!(request["kind"], 2, "SERVER");
    assert_eq!(hop["kind"], 3, "CLIENT");
    assert_eq!(exchange["kind"], 3, "CLIENT");
    assert_eq!(request["resource"]["service.instance.id"], "b");
    assert_eq!(hop["resource"]["service.instance.id"], "b");
    assert_eq!(exchange["resource"]["service.instance.id"], "a");
    assert_eq!(request["resource"]["service.name"], "mcp-session-proxy");
    // The server got the trace, its parent the exchange's span, and the client's tracestate.
    let exchange_id = exchange["span_id"].as_str().unwrap();
    assert_eq!(
        seen["traceparent"],
        format!("00-{TRACE}-{exchange_id}-01"),
        "{answer}"
    );
    assert_eq!(seen["tracestate"], "vendor=opaque");

    let attributes = &request["attributes"];
    assert_eq!(attributes["mcp.method.name"], "tools/call");
    assert_eq!(attributes["gen_ai.tool.name"], "trace_context");
    let shown = attributes["mcp.session.id"].as_str().unwrap();
    assert!(
        shown.starts_with("s-") && shown.len() == 18 && !shown.contains(session.as_str()),
        "a keyed digest, never the session id, a bearer token: {attributes}"
    );
    assert_eq!(attributes["mcp.protocol.version"], "2025-11-25");
    assert_eq!(attributes["mcp_proxy.server"], "default");
    assert_eq!(attributes["mcp_proxy.era"], "legacy");
    assert_eq!(attributes["http.response.status_code"], 200);
    let principal = attributes["mcp_proxy.principal"].as_str().unwrap();
    assert!(
        principal.starts_with("sha256:") && !principal.contains("secret-token"),
        "a digest, never the credential: {attributes}"
    );
    assert_eq!(
        exchange["attributes"]["mcp.session.id"], shown,
        "one session, one digest"
    );
    for span in &spans {
        assert_eq!(span["status"], json!({}), "unset: nothing failed");
        assert!(span["start"].as_u64() <= span["end"].as_u64(), "{span}");
    }
    // A span starts and ends inside its parent's time (the clocks are one machine's).
    assert!(request["start"].as_u64() <= hop["start"].as_u64());
    assert!(hop["end"].as_u64() <= request["end"].as_u64());

    // An error answer marks the exchange and the request failed, with its code.
    let failing = "5bf92f3577b34da6a3ce929d0e0e4736";
    on_b.extra_headers = vec![("traceparent".into(), traceparent(failing, "01"))];
    let answer = on_b
        .request("tools/call", json!({ "name": "no_such_tool" }))
        .await;
    let code = answer["error"]["code"].as_i64().expect("an error answer");
    let spans = receiver.trace(failing, 3).await;
    for name in ["upstream exchange", "tools/call no_such_tool"] {
        let span = named(&spans, name);
        assert_eq!(span["attributes"]["rpc.jsonrpc.error_code"], code, "{span}");
        assert_eq!(span["status"]["code"], "STATUS_CODE_ERROR", "{span}");
    }
    assert!(metric(&a, "mcp_proxy_spans_exported_total").await >= 2);
    assert!(metric(&b, "mcp_proxy_spans_exported_total").await >= 4);
    assert_eq!(metric(&b, "mcp_proxy_spans_dropped_total").await, 0);
}

#[tokio::test]
async fn a_trace_the_client_does_not_sample_is_not_recorded_and_goes_on_as_it_came() {
    let receiver = Receiver::start().await;
    let endpoint = receiver.endpoint();
    let (_proxy, addr, mut logs, _) =
        spawn_proxy(&["--listen", "127.0.0.1:0", "--otlp-endpoint", &endpoint]).await;
    let mut client = Client::new(addr);
    client.initialize("2025-11-25").await;
    let unsampled = traceparent(TRACE, "00");
    client.extra_headers = vec![("traceparent".into(), unsampled.clone())];
    let answer = client
        .request("tools/call", json!({ "name": "trace_context" }))
        .await;
    assert_eq!(
        answer["result"]["structuredContent"]["traceparent"], unsampled,
        "{answer}"
    );
    // Without a context of its own, a request starts a trace, which the server joins.
    client.extra_headers.clear();
    let answer = client
        .request("tools/call", json!({ "name": "trace_context" }))
        .await;
    let started = answer["result"]["structuredContent"]["traceparent"]
        .as_str()
        .expect("the proxy's context")
        .to_owned();
    let trace = &started[3..35];
    // Its access line names the trace the proxy started.
    within("the access line naming the trace", async {
        loop {
            let line = logs.next_line().await.unwrap().expect("a log line");
            if line.contains("\"target\":\"access\"") && line.contains(trace) {
                break;
            }
        }
    })
    .await;
    let spans = receiver.trace(trace, 2).await;
    let request = named(&spans, "tools/call trace_context");
    assert_eq!(request["parent_span_id"], "", "a root span");
    assert_eq!(
        named(&spans, "upstream exchange")["span_id"],
        &started[36..52]
    );
    // The unsampled request left no span (spans are exported in order of their ends).
    assert!(receiver
        .spans
        .lock()
        .unwrap()
        .iter()
        .all(|s| s["trace_id"] != TRACE));
}

#[tokio::test]
async fn with_tracing_off_no_exporter_runs() {
    let (_proxy, addr, _logs, seen) = spawn_proxy(&["--listen", "127.0.0.1:0"]).await;
    assert!(
        seen.iter().all(|entry| !entry["fields"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("exporting spans")),
        "{seen:#?}"
    );
    let mut client = Client::new(addr);
    client.initialize("2025-11-25").await;
    client.extra_headers = vec![("traceparent".into(), traceparent(TRACE, "01"))];
    let answer = client
        .request("tools/call", json!({ "name": "trace_context" }))
        .await;
    // The client's own context reaches the server, untouched.
    assert_eq!(
        answer["result"]["structuredContent"]["traceparent"],
        traceparent(TRACE, "01")
    );
}

#[tokio::test]
async fn a_collector_that_is_down_costs_spans_never_calls() {
    // A port nothing listens on.
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let (_proxy, addr, _logs, seen) =
        spawn_proxy(&["--listen", "127.0.0.1:0", "--otlp-endpoint", &endpoint]).await;
    assert!(seen.iter().any(|entry| entry["fields"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("exporting spans")));
    let mut client = Client::new(addr);
    client.initialize("2025-11-25").await;
    for _ in 0..3 {
        let answer = client
            .request(
                "tools/call",
                json!({ "name": "echo", "arguments": { "text": "hi" } }),
            )
            .await;
        assert!(answer.get("result").is_some(), "{answer}");
    }
    let metrics_of = |name: &'static str| {
        let client = client.clone();
        async move {
            let text = client
                .send_to("/metrics", http::Method::GET, &[], None)
                .await
                .bytes()
                .await;
            crate::harness::metric_in(&String::from_utf8_lossy(&text), name)
        }
    };
    until("a failed export", true, || async {
        metrics_of("mcp_proxy_span_exports_failed_total").await >= 1
    })
    .await;
    assert!(metrics_of("mcp_proxy_spans_dropped_total").await >= 1);
    assert_eq!(metrics_of("mcp_proxy_spans_exported_total").await, 0);
}

#[tokio::test]
async fn an_https_collector_is_reached_trusting_the_ca_the_standard_variable_names() {
    let receiver = Receiver::start().await;
    let certificates = crate::harness::tls::Certificates::make();
    let collector = ([127, 0, 0, 1], receiver.port).into();
    let front = crate::harness::tls::TlsFront::start(&certificates, collector, false).await;
    let endpoint = format!("https://{}", front.addr);
    let ca = certificates.path("ca.pem");
    let (_proxy, addr, _logs, _) = crate::harness::spawn_proxy_with_env(
        &["--listen", "127.0.0.1:0", "--otlp-endpoint", &endpoint],
        &[("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.to_str().unwrap())],
    )
    .await;
    let mut client = Client::new(addr);
    client.extra_headers = vec![("traceparent".into(), traceparent(TRACE, "01"))];
    client.initialize("2025-11-25").await;
    let spans = receiver.trace(TRACE, 1).await;
    assert!(!spans.is_empty(), "exported over TLS");

    // A CA file that is not there stops the start, naming the variable.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-session-proxy"))
        .args(["--listen", "127.0.0.1:0", "--otlp-endpoint", &endpoint])
        .env("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .kill_on_drop(true)
        .output();
    let output = within("the refusal", output).await.unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_CERTIFICATE") && stderr.contains("/nonexistent/ca.pem"),
        "{stderr}"
    );
}

/// A proxy in this process exporting to `receiver`.
async fn traced_proxy(receiver: &Receiver) -> Proxy {
    let endpoint = receiver.endpoint();
    Proxy::start_with(move |c| c.tracing.otlp_endpoint = endpoint).await
}

#[tokio::test]
async fn a_resume_is_a_replay_span_with_the_events_replayed_and_coalesced() {
    let receiver = Receiver::start().await;
    let proxy = traced_proxy(&receiver).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let mut get = client.get(None).await;
    let priming = within("priming", get.next_event()).await.unwrap();
    let away_from = priming.id.expect("a position");
    drop(get);
    let uris: Vec<String> = (0..10).map(|i| format!("demo://doc/{i}")).collect();
    client
        .call_tool("emit_updates", json!({ "uris": uris, "count": 1000 }))
        .await;

    client.extra_headers = vec![("traceparent".into(), traceparent(TRACE, "01"))];
    let mut resumed = client.get(Some(&away_from)).await;
    for _ in 0..10 {
        within("an update", resumed.next_message()).await.unwrap();
    }
    let spans = receiver.trace(TRACE, 1).await;
    let replay = named(&spans, "replay");
    assert_eq!(replay["parent_span_id"], CLIENT_SPAN);
    let attributes = &replay["attributes"];
    assert_eq!(attributes["mcp_proxy.replay.from"], away_from.as_str());
    assert_eq!(attributes["mcp_proxy.replay.events"], 10);
    assert_eq!(attributes["mcp_proxy.replay.coalesced"], 990);
    assert_eq!(attributes["mcp_proxy.replay.gap"], false);
    let shown = attributes["mcp.session.id"].as_str().unwrap();
    assert!(
        shown.starts_with("s-") && !shown.contains(client.session.as_deref().unwrap()),
        "{attributes}"
    );
    proxy.stop().await;
}

/// A 2026-07-28 `tools/call` of the demo's `tool` with `extra` params, under `traceparent`.
async fn modern_call(proxy: &Proxy, tool: &str, extra: Value, traceparent: &str) -> Value {
    let mut params = json!({ "name": tool, "arguments": {} });
    for (key, value) in extra.as_object().cloned().unwrap_or_default() {
        params[key] = value;
    }
    let body = modern_request(1, "tools/call", params, json!({ "elicitation": {} }));
    proxy
        .client()
        .post_modern(&body, &[("traceparent", traceparent)])
        .await
        .response()
        .await
}

#[tokio::test]
async fn a_2026_07_28_call_that_needs_input_has_an_input_required_round() {
    let receiver = Receiver::start().await;
    let proxy = traced_proxy(&receiver).await;
    let tool = "test_input_required_result_elicitation";
    let answer = modern_call(&proxy, tool, json!({}), &traceparent(TRACE, "01")).await;
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
    let spans = receiver.trace(TRACE, 2).await;
    let request = named(&spans, &format!("tools/call {tool}"));
    assert_eq!(request["parent_span_id"], CLIENT_SPAN);
    assert_eq!(request["attributes"]["mcp_proxy.era"], "2026-07-28");
    assert_eq!(request["attributes"]["mcp.protocol.version"], "2026-07-28");
    assert_eq!(proxy.metric("mcp_proxy_input_required_held"), 1);
    let round = named(&spans, "input_required round");
    assert_eq!(round["parent_span_id"], request["span_id"]);
    assert_eq!(round["attributes"]["mcp_proxy.input_required.requests"], 1);
    assert_eq!(
        round["attributes"]["mcp_proxy.input_required.keys"],
        "user_name"
    );
    assert_eq!(round["status"], json!({}));

    // The retry (the client's next span in the same trace) completes the call: the exchange
    // with the server, under the first request's span, ends with it.
    let state = answer["result"]["requestState"].as_str().unwrap();
    let retry_parent = format!("00-{TRACE}-00f067aa0ba902b8-01");
    let answers = json!({ "user_name": { "action": "accept", "content": { "name": "Ada" } } });
    let done = modern_call(
        &proxy,
        tool,
        json!({ "inputResponses": answers, "requestState": state }),
        &retry_parent,
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(proxy.metric("mcp_proxy_input_required_held"), 0);
    let spans = receiver.trace(TRACE, 4).await;
    let exchange = named(&spans, "upstream exchange");
    assert_eq!(exchange["parent_span_id"], request["span_id"]);
    assert!(exchange["end"].as_u64() > round["end"].as_u64());
    let retry = spans
        .iter()
        .find(|s| s["parent_span_id"] == "00f067aa0ba902b8")
        .expect("the retry's span");
    assert_eq!(retry["name"], format!("tools/call {tool}"));
    // The proxy's own requests (the upstream session's initialize) start no trace.
    assert!(receiver
        .spans
        .lock()
        .unwrap()
        .iter()
        .all(|s| s["trace_id"] == TRACE));
    proxy.stop().await;
}

#[tokio::test]
async fn websocket_and_2024_11_05_requests_have_their_spans_too() {
    let receiver = Receiver::start().await;
    let proxy = traced_proxy(&receiver).await;

    // WebSocket: the context rides in the message's `_meta`.
    let mut ws = crate::harness::ws::Ws::connect(proxy.addr()).await;
    ws.request(
        "initialize",
        json!({ "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": { "name": "ws", "version": "1" } }),
    )
    .await;
    let answer = ws
        .request(
            "tools/call",
            json!({ "name": "trace_context", "_meta": { "traceparent": traceparent(TRACE, "01") } }),
        )
        .await;
    let spans = receiver.trace(TRACE, 2).await;
    let request = named(&spans, "tools/call trace_context");
    assert_eq!(request["parent_span_id"], CLIENT_SPAN);
    assert!(
        request["attributes"]["mcp.session.id"].is_string(),
        "{request}"
    );
    let exchange_id = named(&spans, "upstream exchange")["span_id"].clone();
    assert_eq!(
        answer["result"]["structuredContent"]["traceparent"],
        format!("00-{TRACE}-{}-01", exchange_id.as_str().unwrap()),
        "{answer}"
    );

    // 2024-11-05: the POST's header; the answer comes on the SSE stream.
    let legacy_trace = "6bf92f3577b34da6a3ce929d0e0e4736";
    let client = proxy.client();
    let (mut stream, endpoint) = client.open_legacy_sse("/sse").await;
    let parent = traceparent(legacy_trace, "01");
    let post = |body: Value| {
        let client = client.clone();
        let endpoint = endpoint.clone();
        let parent = parent.clone();
        async move {
            let headers = [
                ("content-type", "application/json"),
                ("traceparent", &parent),
            ];
            let reply = client
                .send_to(
                    &endpoint,
                    http::Method::POST,
                    &headers,
                    Some(body.to_string().into()),
                )
                .await;
            assert_eq!(reply.status, http::StatusCode::ACCEPTED);
        }
    };
    post(
        json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": { "name": "old", "version": "1" } } }),
    )
    .await;
    within("the initialize answer", stream.next_message())
        .await
        .unwrap();
    post(json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "echo", "arguments": { "text": "hi" } } }))
    .await;
    within("the call's answer", stream.next_message())
        .await
        .unwrap();
    let spans = receiver.trace(legacy_trace, 4).await;
    let call = named(&spans, "tools/call echo");
    assert_eq!(call["parent_span_id"], CLIENT_SPAN);
    assert_eq!(call["attributes"]["mcp.protocol.version"], "2024-11-05");
    assert_eq!(call["attributes"]["http.response.status_code"], 202);
    assert!(spans
        .iter()
        .any(|s| s["name"] == "upstream exchange" && s["parent_span_id"] == call["span_id"]));
    proxy.stop().await;
}
