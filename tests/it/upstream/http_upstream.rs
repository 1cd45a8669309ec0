//! The Streamable HTTP upstream over real sockets: the proxy as the client of an HTTP MCP
//! server (the demo over HTTP, and npm server-everything), its session kept private,
//! notifications from the upstream GET stream, resume, transparent re-initialization, failures.

use std::time::Duration;

use crate::harness::{eventually, recording_upstream, within, Proxy};
use http::StatusCode;
use mcp_session_proxy::base::ids::Principal;
use serde_json::json;

fn url_of(proxy: &Proxy) -> String {
    format!("http://{}/mcp", proxy.addr())
}

#[tokio::test]
async fn sessions_calls_and_notifications_go_through_an_http_upstream() {
    let upstream = Proxy::start().await; // the demo over Streamable HTTP
    let front = Proxy::in_front_of(url_of(&upstream), |_| {}).await;
    let mut a = front.initialized_client("2025-11-25").await;
    let mut b = front.initialized_client("2025-11-25").await;
    assert_eq!(
        upstream.metric("mcp_proxy_sessions_open"),
        2,
        "one upstream session each"
    );
    for id in [&a.session, &b.session] {
        let id = id.as_deref().unwrap();
        assert!(
            upstream
                .running
                .registry()
                .get(id, &Principal::anonymous())
                .is_none(),
            "the client's session id is the front's own, not the upstream's"
        );
    }
    assert_eq!(a.call_tool("counter", json!({})).await, "1");
    assert_eq!(a.call_tool("counter", json!({})).await, "2");
    assert_eq!(
        b.call_tool("counter", json!({})).await,
        "1",
        "separate upstream sessions"
    );

    // Notifications from the upstream's GET stream reach the client's GET stream.
    a.request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    let mut events = a.get(None).await;
    a.call_tool("counter", json!({})).await;
    let update = events
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], "demo://counter");

    assert_eq!(a.delete().await, StatusCode::OK);
    eventually("the upstream session to be deleted", || {
        upstream.metric("mcp_proxy_sessions_open") == 1
    })
    .await;
    front.stop().await;
    upstream.stop().await;
}

#[tokio::test]
async fn a_cut_stream_through_an_http_upstream_resumes_with_nothing_lost() {
    let upstream = Proxy::start().await;
    let front = Proxy::in_front_of(url_of(&upstream), |_| {}).await;
    let client = front.initialized_client("2025-11-25").await;
    let mut call = client
        .post(&json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": { "name": "progress", "arguments": { "steps": 4 }, "_meta": { "progressToken": "t" } } }))
        .await;
    let first = within("first progress", call.next_message()).await.unwrap();
    drop(call);
    let mut resumed = client.get(first.id.as_deref()).await;
    let rest = within("the rest", resumed.remaining_messages()).await;
    let progress: Vec<i64> = rest
        .iter()
        .filter_map(|r| r.message["params"]["progress"].as_i64())
        .collect();
    assert_eq!(progress, [2, 3, 4]);
    assert_eq!(rest.last().unwrap().message["id"], 3);
    front.stop().await;
    upstream.stop().await;
}

#[tokio::test]
async fn a_restarted_upstream_is_re_initialized_and_re_subscribed_transparently() {
    let upstream = Proxy::start().await;
    let addr = upstream.addr();
    let front = Proxy::in_front_of(url_of(&upstream), |_| {}).await;
    let mut client = front.initialized_client("2025-06-18").await;
    client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(
        client.call_tool("echo", json!({ "text": "before" })).await,
        "before"
    );

    upstream.stop().await; // every upstream session is gone
    let upstream = Proxy::start_with(|c| c.listen = addr).await;

    assert_eq!(
        client.call_tool("echo", json!({ "text": "after" })).await,
        "after",
        "the same client session goes on"
    );
    assert_eq!(
        upstream.metric("mcp_proxy_sessions_created_total"),
        1,
        "re-initialized: one new upstream session"
    );
    let mut events = client.get(None).await;
    client.call_tool("counter", json!({})).await;
    let update = events
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], "demo://counter", "re-subscribed");
    front.stop().await;
    upstream.stop().await;
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_clear_error_and_no_session() {
    let vacant = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", vacant.local_addr().unwrap());
    drop(vacant);
    let front = Proxy::in_front_of(url, |_| {}).await;
    let reply = front
        .client()
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "x", "version": "1" } } }))
        .await;
    assert!(reply.headers.get("mcp-session-id").is_none());
    let body = within("the answer", reply.response()).await;
    assert_eq!(body["error"]["code"], -32603);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unreachable"),
        "{body}"
    );
    assert_eq!(front.metric("mcp_proxy_sessions_open"), 0);
    front.stop().await;
}

#[tokio::test]
async fn a_slow_upstream_is_an_error_within_the_request_timeout() {
    let upstream = Proxy::start_with(|c| {
        c.http.post_response = mcp_session_proxy::front::settings::PostResponse::Json
    })
    .await;
    let front = Proxy::in_front_of(url_of(&upstream), |c| {
        c.upstream.request_timeout = Duration::from_millis(300)
    })
    .await;
    let mut client = front.initialized_client("2025-06-18").await;
    let reply = within(
        "the timeout",
        client.request(
            "tools/call",
            json!({ "name": "sleep", "arguments": { "ms": 5000 } }),
        ),
    )
    .await;
    assert_eq!(reply["error"]["code"], -32603);
    // The HTTP answer's own wait or the request's: whichever fires first names the bound.
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("did not answer") && message.contains("within 300ms"),
        "{reply}"
    );
    assert_eq!(
        client.call_tool("echo", json!({ "text": "ok" })).await,
        "ok",
        "the session goes on"
    );
    front.stop().await;
    upstream.stop().await;
}

#[tokio::test]
async fn typescript_sdk_client_through_the_proxy_to_server_everything_over_http() {
    let (mut server, port) = crate::harness::server_everything("streamableHttp").await;
    let front = Proxy::in_front_of(format!("http://127.0.0.1:{port}/mcp"), |_| {}).await;
    let report = crate::harness::sdk_client(&url_of(&front), &["everything"]).await;
    assert_eq!(report["echoed"], "Echo: hi");
    front.stop().await;
    server.kill().await.unwrap();
}

#[tokio::test]
async fn client_credentials_reach_an_http_upstream_only_when_configured() {
    for forward in [false, true] {
        let (url, recorded) = recording_upstream().await;
        let front = Proxy::in_front_of(url, |c| c.upstream.forward_authorization = forward).await;
        let mut client = front.client();
        client.authorization = Some("Bearer secret-token".into());
        let reply = client
            .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "x", "version": "1" } } }))
            .await;
        let answer = within("the answer", reply.response()).await;
        assert_eq!(answer["error"]["code"], -32603, "the upstream refused");
        let head = within("the recorded request", recorded).await.unwrap();
        assert_eq!(
            head.contains("authorization: bearer secret-token"),
            forward,
            "forward_authorization = {forward}: {head}"
        );
        front.stop().await;
    }
}

/// The head of the request an HTTP server gets for a client's `initialize` sent with `headers`,
/// through a proxy configured by `adjust`.
async fn upstream_head_of_initialize(
    headers: &[(&str, &str)],
    adjust: impl FnOnce(&mut mcp_session_proxy::config::Config),
) -> String {
    let (url, recorded) = recording_upstream().await;
    let front = Proxy::in_front_of(url, adjust).await;
    let mut client = front.client();
    client.extra_headers = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    let reply = client
        .post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "x", "version": "1" } } }))
        .await;
    within("the answer", reply.response()).await;
    let head = within("the recorded request", recorded).await.unwrap();
    front.stop().await;
    head
}

/// A client's W3C trace context reaches an HTTP server as headers too (and in `_meta`).
#[tokio::test]
async fn a_clients_trace_context_reaches_an_http_upstream_as_headers() {
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let context = [
        ("traceparent", traceparent),
        ("tracestate", "vendor=opaque"),
    ];
    let head = upstream_head_of_initialize(&context, |_| {}).await;
    assert!(
        head.contains(&format!("traceparent: {traceparent}")),
        "{head}"
    );
    assert!(head.contains("tracestate: vendor=opaque"), "{head}");

    // upstream.trace_headers = false: the context stays in `_meta` only.
    let head = upstream_head_of_initialize(&context, |c| c.upstream.trace_headers = false).await;
    assert!(!head.contains("traceparent: "), "{head}");
}

/// An HTTP MCP server that, like many, sends what a tool call causes on its GET stream and drops
/// it when no GET stream is open at that moment; its GET stream takes a while to open.
mod dropping_server {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use bytes::Bytes;
    use futures_util::StreamExt;
    use http::{Method, Request, Response, StatusCode};
    use http_body_util::combinators::UnsyncBoxBody;
    use http_body_util::{BodyExt, Full, StreamBody};
    use hyper::body::{Frame, Incoming};
    use hyper_util::rt::TokioIo;
    use serde_json::{json, Value};
    use tokio::sync::mpsc;

    type Body = UnsyncBoxBody<Bytes, Infallible>;

    #[derive(Default)]
    struct State {
        stream: Option<mpsc::UnboundedSender<Bytes>>,
        dropped: usize,
    }

    fn full(status: StatusCode, body: Value) -> Response<Body> {
        let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed_unsync());
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        response
    }

    async fn serve(state: Arc<Mutex<State>>, request: Request<Incoming>) -> Response<Body> {
        match *request.method() {
            Method::GET => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let (events, receiver) = mpsc::unbounded_channel::<Bytes>();
                state.lock().unwrap().stream = Some(events);
                let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
                    let chunk = receiver.recv().await?;
                    Some((Ok::<_, Infallible>(Frame::data(chunk)), receiver))
                });
                let mut response =
                    Response::new(BodyExt::boxed_unsync(StreamBody::new(frames.boxed())));
                response
                    .headers_mut()
                    .insert("content-type", "text/event-stream".parse().unwrap());
                response
            }
            Method::POST => {
                let body = request.into_body().collect().await.unwrap().to_bytes();
                let message: Value = serde_json::from_slice(&body).unwrap();
                let Some(id) = message.get("id") else {
                    return full(StatusCode::ACCEPTED, json!(null));
                };
                let result = match message["method"].as_str() {
                    Some("initialize") => {
                        let mut response = full(
                            StatusCode::OK,
                            json!({ "jsonrpc": "2.0", "id": id, "result": {
                                "protocolVersion": "2025-06-18",
                                "capabilities": { "resources": { "subscribe": true } },
                                "serverInfo": { "name": "dropping", "version": "1" } } }),
                        );
                        response
                            .headers_mut()
                            .insert("mcp-session-id", "up-1".parse().unwrap());
                        return response;
                    }
                    Some("tools/call") => {
                        let update = json!({ "jsonrpc": "2.0",
                            "method": "notifications/resources/updated",
                            "params": { "uri": "drop://changed" } });
                        let event = Bytes::from(format!("data: {update}\n\n"));
                        let mut state = state.lock().unwrap();
                        match &state.stream {
                            Some(stream) if stream.send(event).is_ok() => {}
                            _ => state.dropped += 1,
                        }
                        json!({ "content": [{ "type": "text", "text": "changed" }] })
                    }
                    _ => json!({}),
                };
                full(
                    StatusCode::OK,
                    json!({ "jsonrpc": "2.0", "id": id, "result": result }),
                )
            }
            _ => full(StatusCode::OK, json!(null)),
        }
    }

    /// Starts the server on 127.0.0.1; returns its URL.
    pub async fn start() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let state = state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(serve(state, request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(socket), service)
                        .await;
                });
            }
        });
        format!("http://{addr}/mcp")
    }
}

#[tokio::test]
async fn what_a_call_causes_on_the_upstream_get_stream_is_not_lost_while_it_opens() {
    let upstream = dropping_server::start().await;
    let front = Proxy::in_front_of(upstream, |_| {}).await;
    let mut client = front.initialized_client("2025-06-18").await;
    let mut events = client.get(None).await;
    // Sent right after initialization, while the proxy's upstream GET stream is still opening.
    assert_eq!(client.call_tool("anything", json!({})).await, "changed");
    let update = events
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], "drop://changed");
    front.stop().await;
}

/// An HTTP MCP server that forgets its session after `initialize` (404 to everything else with
/// the session) and then refuses a second `initialize` with a JSON-RPC error. One request per
/// connection; GET has no stream (405).
async fn forgetful_upstream() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut initializes = 0;
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut request = Vec::new();
            let mut buffer = [0u8; 4096];
            let (head_end, length) = loop {
                let n = socket.read(&mut buffer).await.unwrap_or(0);
                if n == 0 {
                    break (None, 0);
                }
                request.extend_from_slice(&buffer[..n]);
                if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&request[..end]).to_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    break (Some(end + 4), length);
                }
            };
            let Some(head_end) = head_end else { continue };
            while request.len() < head_end + length {
                let n = socket.read(&mut buffer).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buffer[..n]);
            }
            let head = String::from_utf8_lossy(&request[..head_end]).to_string();
            let body: serde_json::Value =
                serde_json::from_slice(&request[head_end..]).unwrap_or_default();
            let (status, extra, answer) = if head.starts_with("GET") {
                ("405 Method Not Allowed", "", String::new())
            } else if body["method"] == "initialize" {
                initializes += 1;
                let answer = match initializes {
                    1 => json!({ "jsonrpc": "2.0", "id": body["id"], "result": {
                        "protocolVersion": "2025-06-18", "capabilities": { "tools": {} },
                        "serverInfo": { "name": "forgetful", "version": "1" } } }),
                    _ => json!({ "jsonrpc": "2.0", "id": body["id"],
                        "error": { "code": -32000, "message": "no more sessions" } }),
                };
                ("200 OK", "mcp-session-id: s1\r\n", answer.to_string())
            } else if body["method"] == "notifications/initialized" || head.starts_with("DELETE") {
                ("202 Accepted", "", String::new())
            } else {
                ("404 Not Found", "", String::new())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        }
    });
    url
}

#[tokio::test]
async fn a_lost_upstream_session_that_cannot_be_re_established_is_a_clear_error() {
    let front = Proxy::in_front_of(forgetful_upstream().await, |_| {}).await;
    let mut client = front.initialized_client("2025-06-18").await;
    let reply = within(
        "the answer",
        client.request(
            "tools/call",
            json!({ "name": "echo", "arguments": { "text": "x" } }),
        ),
    )
    .await;
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("could not be re-established")
            && message.contains("refused initialize")
            && message.contains("no more sessions"),
        "{reply}"
    );
    front.stop().await;
}
