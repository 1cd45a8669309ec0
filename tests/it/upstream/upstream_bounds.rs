//! What a server can make the proxy hold or wait for is bounded, over real sockets and real
//! children: an HTTP or legacy SSE server's answer over `upstream.max_line_bytes` (100 MB, or
//! one that never ends) fails its request, with the proxy's memory untouched and its other
//! sessions served; a released session's pending POST is let go; a stdio child that stops
//! reading its stdin is stopped within `upstream.request_timeout`, and its sessions go on with
//! a new one.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::{eventually, spawn_proxy, within, Client, Proxy};
use bytes::Bytes;
use futures_util::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

/// The proxy's default bound on one message from a server.
const MAX_MESSAGE: usize = 4 << 20;
/// What the greedy servers send as one answer.
const HUNDRED_MB: usize = 100 << 20;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Counts the answers a server could not finish: their connection was closed under them.
#[derive(Clone, Default)]
struct CutShort(Arc<AtomicUsize>);

impl CutShort {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Notes, when dropped before `done`, an answer cut short.
struct Unfinished {
    cut: CutShort,
    done: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.done {
            self.cut.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A body of `head`, then `filler` bytes of `x` a chunk at a time (`None`: for ever), then
/// `tail`, one chunk each `every`; `Content-Length` is announced when the length is known.
fn paced(
    head: String,
    filler: Option<usize>,
    tail: &'static str,
    chunk: usize,
    every: Duration,
    cut: &CutShort,
) -> (Body, Option<usize>) {
    let length = filler.map(|n| head.len() + n + tail.len());
    let xs = Bytes::from(vec![b'x'; chunk]);
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let state = (
        Unfinished {
            cut: cut.clone(),
            done: false,
        },
        Some(Bytes::from(head)),
        filler,
        ticks,
    );
    let frames = futures_util::stream::unfold(state, move |(mut guard, head, left, mut ticks)| {
        let xs = xs.clone();
        async move {
            if let Some(head) = head {
                return Some((Ok(Frame::data(head)), (guard, None, left, ticks)));
            }
            let chunk = match left {
                Some(0) if guard.done => return None,
                Some(0) => {
                    guard.done = true;
                    Bytes::from_static(tail.as_bytes())
                }
                Some(n) => xs.slice(..n.min(xs.len())),
                None => xs,
            };
            ticks.tick().await;
            let left = left.map(|n| n.saturating_sub(chunk.len().min(n)));
            Some((Ok(Frame::data(chunk)), (guard, None, left, ticks)))
        }
    });
    (StreamBody::new(frames.boxed()).boxed_unsync(), length)
}

fn response(
    status: StatusCode,
    content_type: &str,
    body: Body,
    length: Option<usize>,
) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert("content-type", content_type.parse().unwrap());
    if let Some(length) = length {
        headers.insert("content-length", length.into());
    }
    response
}

fn json_answer(status: StatusCode, body: Value) -> Response<Body> {
    let body = Bytes::from(body.to_string());
    let length = body.len();
    response(
        status,
        "application/json",
        Full::new(body).boxed_unsync(),
        Some(length),
    )
}

/// The start of a tool's text result, to be followed by its text and `TEXT_END`.
fn text_result_head(id: &Value) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#)
}

const TEXT_END: &str = r#""}]}}"#;

/// Serves `handle` on 127.0.0.1:0; returns the address.
async fn serve<F, Fut>(handle: F) -> std::net::SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Body>> + Send,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let handle = handle.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let handle = handle.clone();
                    async move { Ok::<_, Infallible>(handle(request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    });
    addr
}

async fn message_of(request: Request<Incoming>) -> Value {
    let body = request.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

/// A Streamable HTTP server (2025-06-18, or 2026-07-28 with `server/discover`) whose tools
/// answer too much: `huge` 100 MB of JSON (announced),
/// `endless` JSON that never ends, `endless_event` an SSE event that never ends, `trickle` JSON
/// a byte at a time for ever (counted in `posted` when it starts); anything else (`ping`) at
/// once.
async fn greedy_http_server(cut: &CutShort, posted: &CutShort) -> String {
    let (cut, posted) = (cut.clone(), posted.clone());
    let addr = serve(move |request: Request<Incoming>| {
        let (cut, posted) = (cut.clone(), posted.clone());
        async move {
            if request.method() != Method::POST {
                let status = match *request.method() {
                    Method::DELETE => StatusCode::OK,
                    _ => StatusCode::METHOD_NOT_ALLOWED,
                };
                return json_answer(status, json!(null));
            }
            let message = message_of(request).await;
            let Some(id) = message.get("id").cloned() else {
                return json_answer(StatusCode::ACCEPTED, json!(null));
            };
            let every = Duration::from_millis(1);
            match (
                message["method"].as_str(),
                message["params"]["name"].as_str(),
            ) {
                (Some("initialize"), _) => {
                    let mut answer = json_answer(
                        StatusCode::OK,
                        json!({ "jsonrpc": "2.0", "id": id, "result": {
                            "protocolVersion": "2025-06-18", "capabilities": { "tools": {} },
                            "serverInfo": { "name": "greedy", "version": "1" } } }),
                    );
                    answer
                        .headers_mut()
                        .insert("mcp-session-id", "greedy-1".parse().unwrap());
                    answer
                }
                (Some("server/discover"), _) => json_answer(
                    StatusCode::OK,
                    json!({ "jsonrpc": "2.0", "id": id, "result": {
                        "capabilities": { "tools": {} },
                        "_meta": { "io.modelcontextprotocol/serverInfo":
                            { "name": "greedy", "version": "1" } } } }),
                ),
                (Some("tools/call"), Some("huge")) => {
                    let filler = HUNDRED_MB - text_result_head(&id).len() - TEXT_END.len();
                    let (body, length) = paced(
                        text_result_head(&id),
                        Some(filler),
                        TEXT_END,
                        64 << 10,
                        every,
                        &cut,
                    );
                    response(StatusCode::OK, "application/json", body, length)
                }
                (Some("tools/call"), Some("endless")) => {
                    let (body, _) =
                        paced(text_result_head(&id), None, TEXT_END, 64 << 10, every, &cut);
                    response(StatusCode::OK, "application/json", body, None)
                }
                (Some("tools/call"), Some("trickle")) => {
                    posted.0.fetch_add(1, Ordering::SeqCst);
                    let every = Duration::from_millis(20);
                    let (body, _) = paced(text_result_head(&id), None, TEXT_END, 1, every, &cut);
                    response(StatusCode::OK, "application/json", body, None)
                }
                (Some("tools/call"), Some("endless_event")) => {
                    let head = format!("data: {}", text_result_head(&id));
                    let (body, _) = paced(head, None, TEXT_END, 64 << 10, every, &cut);
                    response(StatusCode::OK, "text/event-stream", body, None)
                }
                _ => json_answer(
                    StatusCode::OK,
                    json!({ "jsonrpc": "2.0", "id": id, "result": {} }),
                ),
            }
        }
    })
    .await;
    format!("http://{addr}/mcp")
}

/// A legacy HTTP+SSE server answering on each session's stream, whose POSTs answer too much:
/// `tools/call` `huge` with a 100 MB body, `trickle` with a body that never ends (a byte at a
/// time; counted in `posted` when it starts).
async fn greedy_sse_server(cut: &CutShort, posted: &CutShort) -> String {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use tokio::sync::mpsc;

    type Streams = Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Bytes>>>>;
    let streams: Streams = Arc::default();
    let (cut, posted) = (cut.clone(), posted.clone());
    let addr = serve(move |request: Request<Incoming>| {
        let (streams, cut, posted) = (streams.clone(), cut.clone(), posted.clone());
        async move {
            if request.method() == Method::GET {
                let (events, receiver) = mpsc::unbounded_channel::<Bytes>();
                let session = {
                    let mut streams = streams.lock().unwrap();
                    let session = format!("s{}", streams.len() + 1);
                    streams.insert(session.clone(), events.clone());
                    session
                };
                let endpoint = format!("event: endpoint\ndata: /message?session={session}\n\n");
                events.send(Bytes::from(endpoint)).unwrap();
                let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
                    let chunk = receiver.recv().await?;
                    Some((Ok::<_, Infallible>(Frame::data(chunk)), receiver))
                });
                let body = StreamBody::new(frames.boxed()).boxed_unsync();
                return response(StatusCode::OK, "text/event-stream", body, None);
            }
            let session = request
                .uri()
                .query()
                .and_then(|q| q.strip_prefix("session="))
                .unwrap_or_default()
                .to_owned();
            let message = message_of(request).await;
            let accepted = || {
                let body = Full::new(Bytes::from_static(b"Accepted")).boxed_unsync();
                response(StatusCode::ACCEPTED, "text/plain", body, Some(8))
            };
            let Some(id) = message.get("id").cloned() else {
                return accepted();
            };
            let result = match (
                message["method"].as_str(),
                message["params"]["name"].as_str(),
            ) {
                (Some("initialize"), _) => json!({
                    "protocolVersion": "2024-11-05", "capabilities": { "tools": {} },
                    "serverInfo": { "name": "greedy-sse", "version": "1" } }),
                (Some("tools/call"), Some("huge")) => {
                    let (body, _) = paced(
                        String::new(),
                        Some(HUNDRED_MB),
                        "",
                        64 << 10,
                        Duration::from_millis(1),
                        &cut,
                    );
                    return response(StatusCode::OK, "text/plain", body, None);
                }
                (Some("tools/call"), Some("trickle")) => {
                    posted.0.fetch_add(1, Ordering::SeqCst);
                    let every = Duration::from_millis(20);
                    let (body, _) = paced(String::new(), None, "", 1, every, &cut);
                    return response(StatusCode::OK, "text/plain", body, None);
                }
                _ => json!({}),
            };
            let answer = json!({ "jsonrpc": "2.0", "id": id, "result": result });
            if let Some(stream) = streams.lock().unwrap().get(&session) {
                let _ = stream.send(Bytes::from(format!("data: {answer}\n\n")));
            }
            accepted()
        }
    })
    .await;
    format!("http://{addr}/sse")
}

/// The proxy's binary in front of `args`' server, its log drained: the child and its address.
async fn proxy_binary(args: &[&str]) -> (tokio::process::Child, std::net::SocketAddr) {
    let mut all = vec!["--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let (child, addr, mut logs, _) = spawn_proxy(&all).await;
    tokio::spawn(async move { while let Ok(Some(_)) = logs.next_line().await {} });
    (child, addr)
}

/// The answer to a request, whatever the HTTP status it came with.
async fn answer_to(client: &Client, id: u64, method: &str, params: Value) -> Value {
    let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    let reply = client.post(&request).await;
    match reply.status {
        StatusCode::OK => reply.response().await,
        _ => reply.json().await,
    }
}

fn error_message(answer: &Value) -> &str {
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    answer["error"]["message"].as_str().unwrap()
}

/// A tool call whose answer is over the bound fails with the cause while the proxy's peak
/// A client of the proxy at `addr` with a session of its own.
async fn initialized(addr: std::net::SocketAddr) -> Client {
    let mut client = Client::new(addr);
    client.initialize("2025-06-18").await;
    client
}

/// A 100 MB answer, an endless one and an endless SSE event each fail their request only, and
/// each has its connection closed.
async fn every_oversized_answer_fails_alone(client: &Client, proxy: u32, cut: &CutShort) {
    fails_over_the_bound(client, 100, "huge", proxy).await;
    eventually("the 100 MB answer's connection closed", || cut.count() == 1).await;
    fails_over_the_bound(client, 101, "endless", proxy).await;
    eventually("the endless answer's connection closed", || {
        cut.count() == 2
    })
    .await;
    fails_over_the_bound(client, 102, "endless_event", proxy).await;
    eventually("the endless event's connection closed", || cut.count() == 3).await;
}

/// memory stays far below the answer's size; `what` names it.
async fn fails_over_the_bound(client: &Client, id: u64, tool: &str, proxy: u32) -> u64 {
    let before = crate::harness::memory_kib(proxy, "VmRSS");
    let started = Instant::now();
    let params = json!({ "name": tool, "arguments": {} });
    let answer = within(tool, answer_to(client, id, "tools/call", params)).await;
    let peak = crate::harness::memory_kib(proxy, "VmHWM");
    eprintln!(
        "{tool}: answered in {:?}; proxy VmRSS before {before} KiB, VmHWM after {peak} KiB",
        started.elapsed()
    );
    let message = error_message(&answer);
    assert!(
        message.contains(&format!("exceeded {MAX_MESSAGE} bytes")),
        "{tool}: {answer}"
    );
    assert!(
        peak < before + (40 << 10),
        "{tool}: the proxy's peak memory grew from {before} KiB to {peak} KiB"
    );
    peak
}

#[tokio::test]
async fn an_http_servers_answer_over_the_bound_fails_its_request_and_nothing_else() {
    let cut = CutShort::default();
    let url = greedy_http_server(&cut, &CutShort::default()).await;
    let (proxy, addr) = proxy_binary(&["--http", &url, "--request-timeout", "5s"]).await;
    let pid = proxy.id().unwrap();
    let (mut a, mut b) = (initialized(addr).await, initialized(addr).await);

    every_oversized_answer_fails_alone(&a, pid, &cut).await;

    assert_eq!(
        b.request("ping", json!({})).await["result"],
        json!({}),
        "another session"
    );
    assert_eq!(
        a.request("ping", json!({})).await["result"],
        json!({}),
        "the session goes on"
    );
}

#[tokio::test]
async fn a_2026_07_28_servers_answer_over_the_bound_fails_its_request_and_nothing_else() {
    let cut = CutShort::default();
    let url = greedy_http_server(&cut, &CutShort::default()).await;
    let args = [
        "--http",
        &url,
        "--upstream-protocol",
        "2026-07-28",
        "--request-timeout",
        "5s",
    ];
    let (proxy, addr) = proxy_binary(&args).await;
    let pid = proxy.id().unwrap();
    let (mut a, mut b) = (initialized(addr).await, initialized(addr).await);

    every_oversized_answer_fails_alone(&a, pid, &cut).await;

    let echo = json!({ "name": "echo", "arguments": {} });
    assert_eq!(
        b.request("tools/call", echo.clone()).await["result"],
        json!({}),
        "another session"
    );
    assert_eq!(
        a.request("tools/call", echo).await["result"],
        json!({}),
        "the session goes on"
    );
}

#[tokio::test]
async fn a_legacy_servers_post_answer_over_the_bound_fails_its_request_and_nothing_else() {
    let (cut, posted) = (CutShort::default(), CutShort::default());
    let url = greedy_sse_server(&cut, &posted).await;
    let (proxy, addr) = proxy_binary(&["--sse", &url, "--request-timeout", "5s"]).await;
    let pid = proxy.id().unwrap();
    let (mut a, mut b) = (initialized(addr).await, initialized(addr).await);

    fails_over_the_bound(&a, 100, "huge", pid).await;
    eventually("the 100 MB answer's connection closed", || cut.count() == 1).await;

    assert_eq!(
        b.request("ping", json!({})).await["result"],
        json!({}),
        "another session"
    );
    assert_eq!(
        a.request("ping", json!({})).await["result"],
        json!({}),
        "the session goes on"
    );
}

#[tokio::test]
async fn a_released_session_lets_its_pending_post_go() {
    let (cut, posted) = (CutShort::default(), CutShort::default());
    let url = greedy_http_server(&cut, &posted).await;
    lets_its_pending_post_go_when_released("--http", &url, &cut, &posted).await;
}

#[tokio::test]
async fn a_released_session_lets_its_pending_legacy_post_go() {
    let (cut, posted) = (CutShort::default(), CutShort::default());
    let url = greedy_sse_server(&cut, &posted).await;
    lets_its_pending_post_go_when_released("--sse", &url, &cut, &posted).await;
}

/// A session released while the answer to its `trickle` call arrives closes that connection.
async fn lets_its_pending_post_go_when_released(
    kind: &str,
    url: &str,
    cut: &CutShort,
    posted: &CutShort,
) {
    // The request timeout is far longer than the wait below: only the release can end the POST.
    let (_proxy, addr) = proxy_binary(&[kind, url, "--request-timeout", "10m"]).await;
    let mut client = Client::new(addr);
    client.initialize("2025-06-18").await;

    let call = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": { "name": "trickle", "arguments": {} } });
    let pending = tokio::spawn({
        let client = client.clone();
        async move { client.post(&call).await.status }
    });
    eventually("the POST reaches the server", || posted.count() == 1).await;
    assert_eq!(client.delete().await, StatusCode::OK);
    eventually("the server sees the POST's connection closed", || {
        cut.count() == 1
    })
    .await;
    pending.abort();
}

/// The process ids `tests/servers/stops_reading.py` children wrote; those still running are
/// killed when dropped, so a failing test leaves none behind.
struct Children(PathBuf);

impl Children {
    fn new(test: &str) -> Children {
        let path =
            std::env::temp_dir().join(format!("stops-reading-{}-{test}.pids", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Children(path)
    }

    fn command(&self) -> String {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/servers/stops_reading.py"
        );
        let pids = self.0.to_str().unwrap();
        format!(
            "python3 {} {}",
            shell_words::quote(script),
            shell_words::quote(pids)
        )
    }

    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(&self.0)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect()
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for pid in self.pids() {
            if running(pid) {
                let pid = nix::unistd::Pid::from_raw(pid);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether a process runs (a zombie does not).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
        !status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

/// A proxy in front of children that stop reading their stdin at their first tool call.
async fn in_front_of_stuck_children(children: &Children, shared: bool) -> Proxy {
    Proxy::start_with(|config| {
        config.upstream.stdio = Some(children.command());
        // A legacy server: not probed (it would stop reading at the probe's request).
        config.upstream.protocol = mcp_session_proxy::wire::era::Era::Legacy;
        config.upstream.request_timeout = Duration::from_secs(1);
        if shared {
            config.upstream.isolation = mcp_session_proxy::config::Isolation::Shared;
        }
    })
    .await
}

/// Tool calls carrying `pad` bytes each, sent at once under ids from `first`: their answers.
async fn flood(client: &Client, first: u64, calls: u64, pad: usize) -> Vec<Value> {
    let padding = "x".repeat(pad);
    let calls = (first..first + calls).map(|id| {
        let params = json!({ "name": "stall", "arguments": { "pad": padding } });
        async move { answer_to(client, id, "tools/call", params).await }
    });
    within("every call's answer", futures_util::future::join_all(calls)).await
}

#[tokio::test]
async fn a_child_that_stops_reading_its_stdin_is_stopped_within_the_request_timeout() {
    let children = Children::new("per-session");
    let proxy = in_front_of_stuck_children(&children, false).await;
    let a = proxy.initialized_client("2025-06-18").await;
    let mut b = proxy.initialized_client("2025-06-18").await;
    eventually("two children", || children.pids().len() == 2).await;
    let stuck = children.pids()[0];

    // More than the child's queue holds, each more than its pipe buffer.
    let started = Instant::now();
    for answer in flood(&a, 100, 70, 100_000).await {
        error_message(&answer);
    }
    eprintln!(
        "70 calls to a stuck child answered in {:?}",
        started.elapsed()
    );
    eventually("the stuck child killed", || !running(stuck)).await;

    // The session goes on with a new child of its own.
    let answer = answer_to(&a, 200, "ping", json!({})).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    assert_eq!(children.pids().len(), 3, "a new child for the session");
    assert_eq!(
        b.request("ping", json!({})).await["result"],
        json!({}),
        "another session"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_shared_child_that_stops_reading_its_stdin_is_replaced() {
    let children = Children::new("shared");
    let proxy = in_front_of_stuck_children(&children, true).await;
    let a = proxy.initialized_client("2025-06-18").await;
    let mut b = proxy.initialized_client("2025-06-18").await;
    assert_eq!(b.request("ping", json!({})).await["result"], json!({}));
    assert_eq!(children.pids().len(), 1, "one child for both");
    let stuck = children.pids()[0];

    let started = Instant::now();
    let (calls, ping) = tokio::join!(
        flood(&a, 100, 4, 200_000),
        within("b's ping", answer_to(&b, 300, "ping", json!({})))
    );
    let waited = started.elapsed();
    for answer in calls {
        error_message(&answer);
    }
    assert!(
        ping["result"] == json!({}) || ping["error"]["code"] == -32603,
        "{ping}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "waited {waited:?} on a stuck child"
    );
    eventually("the stuck child killed", || !running(stuck)).await;

    // The sessions go on with one new child, which a new session shares too.
    let answer = answer_to(&b, 301, "ping", json!({})).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    let mut c = proxy.initialized_client("2025-06-18").await;
    assert_eq!(
        c.request("ping", json!({})).await["result"],
        json!({}),
        "a fresh child"
    );
    assert_eq!(children.pids().len(), 2);
    proxy.stop().await;
}

/// Bytes a process has read (`rchar` of `/proc/<pid>/io`).
fn bytes_read_by(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|line| line.strip_prefix("rchar:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn a_session_released_while_a_write_to_its_child_is_stuck_stops_the_child() {
    let children = Children::new("released");
    let proxy = Proxy::start_with(|config| {
        config.upstream.stdio = Some(children.command());
        config.upstream.protocol = mcp_session_proxy::wire::era::Era::Legacy;
        // Far longer than the wait below: only the release can stop the child.
        config.upstream.request_timeout = Duration::from_secs(600);
        // A POST's head comes once its request is queued for the child.
        config.http.post_response = mcp_session_proxy::front::settings::PostResponse::Sse;
    })
    .await;
    let client = proxy.initialized_client("2025-06-18").await;
    eventually("a child", || children.pids().len() == 1).await;
    let child = children.pids()[0];
    let padding = "x".repeat(200_000);
    let call = |id: u64| {
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "stall", "arguments": { "pad": padding } } })
    };

    // The child reads the first call whole and stops reading; the next ones fill its pipe.
    let mut pending = vec![client.post(&call(100)).await];
    eventually("the child read the first call", || {
        bytes_read_by(child) > 200_000
    })
    .await;
    for id in 101..103 {
        pending.push(client.post(&call(id)).await);
    }
    assert_eq!(client.delete().await, StatusCode::OK);
    eventually("the child stopped", || !running(child)).await;
    drop(pending);
    proxy.stop().await;
}
