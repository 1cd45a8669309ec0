//! Test harness: a proxy listening on 127.0.0.1:0 in front of the real demo server binary, and
//! a small HTTP client that speaks Streamable HTTP over real sockets. Every helper that waits on
//! the proxy or a peer is bounded ([`within`]): a proxy that never answers fails the test.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use mcp_session_proxy::config::Config;
use mcp_session_proxy::server::{self, Running};
use mcp_session_proxy::wire::sse::{self, Decoder};
use serde_json::{json, Value};
use tokio::net::TcpStream;

pub mod auth_server;
pub mod balancer;
pub mod cluster;
pub mod ws;

pub const DEMO: &str = env!("CARGO_BIN_EXE_mcp-session-proxy");

/// Serves the demo's 2026-07-28-only mode over stdio.
#[allow(dead_code)]
pub fn serve_the_modern_demo(config: &mut Config) {
    config.upstream.stdio = Some(format!(
        "{} demo-server --protocol 2026-07-28",
        shell_words::quote(DEMO)
    ));
    config.upstream.protocol = mcp_session_proxy::wire::era::Era::Modern;
}

/// A proxy in front of the demo server. Dropping the runtime kills its children
/// (`kill_on_drop`), so a failing test leaves nothing behind.
pub struct Proxy {
    pub running: Running,
}

impl Proxy {
    pub async fn start() -> Proxy {
        Proxy::start_with(|_| {}).await
    }

    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> Proxy {
        let mut config = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Config::default()
        };
        config.upstream.stdio = Some(format!("{} demo-server", shell_words::quote(DEMO)));
        config.upstream.shutdown_grace = Duration::from_millis(500);
        // No balancer to wait for; a test that drains says how long.
        config.drain_delay = Duration::ZERO;
        adjust(&mut config);
        let running = within("the proxy to start", server::start(&config))
            .await
            .expect("the proxy starts");
        Proxy { running }
    }

    pub fn addr(&self) -> SocketAddr {
        self.running.addr
    }

    pub fn client(&self) -> Client {
        Client::new(self.addr())
    }

    /// A client with a session, initialized at `version`.
    pub async fn initialized_client(&self, version: &str) -> Client {
        let mut client = self.client();
        client.initialize(version).await;
        client
    }

    pub fn metric(&self, name: &str) -> u64 {
        metric_in(&self.running.metrics.render(), name)
    }

    /// The client opened one session and ended it with DELETE.
    pub fn assert_one_session_ended_by_delete(&self) {
        assert_eq!(self.metric("mcp_proxy_sessions_created_total"), 1);
        assert_eq!(
            self.metric("mcp_proxy_sessions_open"),
            0,
            "terminated by DELETE"
        );
    }

    pub async fn stop(self) {
        within("the proxy to stop", self.running.stop()).await;
    }
}

/// A Streamable HTTP client with just enough state: its session id, credentials, next id.
#[derive(Clone)]
pub struct Client {
    pub addr: SocketAddr,
    pub session: Option<String>,
    pub authorization: Option<String>,
    pub protocol_version: Option<String>,
    /// Extra headers sent with every request (a trusted principal header, say).
    pub extra_headers: Vec<(String, String)>,
    /// The MCP endpoint: `/mcp`, or `/servers/<name>/mcp` in a gateway.
    pub path: String,
    /// The loopback address its connections come from (`127.0.0.2`, say); `None`: the
    /// system's choice (127.0.0.1).
    pub from: Option<std::net::IpAddr>,
    next_id: u64,
}

impl Client {
    pub fn new(addr: SocketAddr) -> Client {
        Client {
            addr,
            session: None,
            authorization: None,
            protocol_version: None,
            extra_headers: Vec::new(),
            path: "/mcp".into(),
            from: None,
            next_id: 1,
        }
    }

    /// Sends one request to the MCP endpoint on a fresh connection.
    pub async fn send(
        &self,
        method: Method,
        headers: &[(&str, &str)],
        body: Option<Bytes>,
    ) -> Reply {
        self.send_to(&self.path, method, headers, body).await
    }

    /// Sends one request to `path` on a fresh connection.
    pub async fn send_to(
        &self,
        path: &str,
        method: Method,
        headers: &[(&str, &str)],
        body: Option<Bytes>,
    ) -> Reply {
        let stream = within("the connection", self.connect()).await;
        let handshake = hyper::client::conn::http1::handshake(TokioIo::new(stream));
        let (mut sender, connection) = within("the HTTP handshake", handshake)
            .await
            .expect("handshake");
        tokio::spawn(connection);
        let mut request = Request::builder().method(method).uri(path);
        if !headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("host"))
        {
            request = request.header("host", self.addr.to_string());
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(body.unwrap_or_default())).unwrap();
        let response = within("the response head", sender.send_request(request))
            .await
            .expect("response");
        let (parts, body) = response.into_parts();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
            decoder: Decoder::new(1 << 24),
            ended: false,
        }
    }

    /// A connection to the proxy, from `from` when set.
    async fn connect(&self) -> TcpStream {
        let Some(from) = self.from else {
            return TcpStream::connect(self.addr).await.expect("connect");
        };
        let socket = match from {
            std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .expect("a socket");
        socket
            .bind(SocketAddr::new(from, 0))
            .unwrap_or_else(|e| panic!("cannot connect from {from}: {e}"));
        socket.connect(self.addr).await.expect("connect")
    }

    /// Opens a 2024-11-05 SSE stream at `path` (`/sse`): the stream, and the endpoint its first
    /// event names for the client's POSTs.
    pub async fn open_legacy_sse(&self, path: &str) -> (Reply, String) {
        let mut stream = self
            .send_to(path, Method::GET, &[("accept", "text/event-stream")], None)
            .await;
        assert_eq!(stream.status, StatusCode::OK, "the SSE stream opens");
        let endpoint = within("the endpoint event", stream.next_event())
            .await
            .expect("an endpoint event");
        assert_eq!(endpoint.event.as_deref(), Some("endpoint"));
        (stream, endpoint.data)
    }

    fn session_headers(&self) -> Vec<(&str, &str)> {
        let mut headers = Vec::new();
        if let Some(session) = &self.session {
            headers.push(("mcp-session-id", session.as_str()));
        }
        if let Some(authorization) = &self.authorization {
            headers.push(("authorization", authorization.as_str()));
        }
        if let Some(version) = &self.protocol_version {
            headers.push(("mcp-protocol-version", version.as_str()));
        }
        for (name, value) in &self.extra_headers {
            headers.push((name.as_str(), value.as_str()));
        }
        headers
    }

    /// POSTs a message with the headers a well-behaved client sends.
    pub async fn post(&self, message: &Value) -> Reply {
        let mut headers = self.session_headers();
        headers.push(("content-type", "application/json"));
        headers.push(("accept", "application/json, text/event-stream"));
        self.send(
            Method::POST,
            &headers,
            Some(Bytes::from(message.to_string())),
        )
        .await
    }

    /// POSTs `text` as it is (JSON a `Value` cannot hold, such as a duplicated member name)
    /// with the headers a well-behaved client sends.
    pub async fn post_text(&self, text: &str) -> Reply {
        let mut headers = self.session_headers();
        headers.push(("content-type", "application/json"));
        headers.push(("accept", "application/json, text/event-stream"));
        self.send(Method::POST, &headers, Some(Bytes::from(text.to_owned())))
            .await
    }

    /// Opens the GET stream, or resumes the stream named by `last_event_id`.
    pub async fn get(&self, last_event_id: Option<&str>) -> Reply {
        let mut headers = self.session_headers();
        headers.push(("accept", "text/event-stream"));
        if let Some(id) = last_event_id {
            headers.push(("last-event-id", id));
        }
        self.send(Method::GET, &headers, None).await
    }

    pub async fn delete(&self) -> StatusCode {
        self.send(Method::DELETE, &self.session_headers(), None)
            .await
            .status
    }

    pub fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// initialize + notifications/initialized; keeps the session id.
    pub async fn initialize(&mut self, version: &str) -> Value {
        let id = self.next_id();
        let reply = self
            .post(&json!({
                "jsonrpc": "2.0", "id": id, "method": "initialize",
                "params": {
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": { "name": "harness", "version": "1" }
                }
            }))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "initialize");
        let session = reply
            .headers
            .get("mcp-session-id")
            .expect("initialize answers with Mcp-Session-Id")
            .to_str()
            .unwrap()
            .to_owned();
        let response = reply.response().await;
        self.session = Some(session);
        self.protocol_version = Some(version.to_owned());
        let ack = self
            .post(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await;
        assert_eq!(ack.status, StatusCode::ACCEPTED);
        response
    }

    /// Sends a request and returns its response message (from JSON or from the SSE stream).
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id();
        let reply = self
            .post(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{method}");
        let response = reply.response().await;
        assert_eq!(
            response["id"], id,
            "{method}: the response carries the client's id"
        );
        response
    }

    /// Calls a tool and returns the text of its first content item.
    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> String {
        let response = self
            .request(
                "tools/call",
                json!({ "name": name, "arguments": arguments }),
            )
            .await;
        response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} answered {response}"))
            .to_owned()
    }
}

/// A response, read as a whole or as an SSE stream.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Incoming,
    decoder: Decoder,
    ended: bool,
}

/// One SSE message: its event id and its JSON-RPC payload.
#[derive(Debug, Clone)]
pub struct Received {
    pub id: Option<String>,
    pub message: Value,
}

impl Reply {
    pub fn is_sse(&self) -> bool {
        self.headers
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"))
    }

    /// The whole body (bounded).
    pub async fn bytes(self) -> Bytes {
        within("the whole body", self.body.collect())
            .await
            .expect("body")
            .to_bytes()
    }

    pub async fn json(self) -> Value {
        let bytes = self.bytes().await;
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))
    }

    /// The raw next chunk of the body (`None` at its end); fails the test if none comes within
    /// the usual bound. To see a stream stay silent for a while, bound it more tightly outside
    /// (`tokio::time::timeout(short, reply.next_chunk())`): the tighter bound ends first.
    pub async fn next_chunk(&mut self) -> Option<Bytes> {
        within("the next chunk of the body", async {
            loop {
                let frame = self.body.frame().await?.ok()?;
                if let Ok(data) = frame.into_data() {
                    return Some(data);
                }
            }
        })
        .await
    }

    /// The next SSE event, priming events included; `None` when the stream ends. Each read is
    /// bounded ([`Reply::next_chunk`]).
    pub async fn next_event(&mut self) -> Option<sse::Event> {
        loop {
            if let Some(event) = self.decoder.next_event().expect("valid SSE") {
                return Some(event);
            }
            if self.ended {
                return None;
            }
            match self.next_chunk().await {
                Some(chunk) => self.decoder.feed(&chunk),
                None => self.ended = true,
            }
        }
    }

    /// The next SSE event that carries a message (priming events skipped); each read is bounded
    /// ([`Reply::next_chunk`]).
    pub async fn next_message(&mut self) -> Option<Received> {
        loop {
            let event = self.next_event().await?;
            if event.data.is_empty() {
                continue;
            }
            let message = serde_json::from_str(&event.data).expect("SSE data is JSON");
            return Some(Received {
                id: event.id,
                message,
            });
        }
    }

    /// The next message with `method`, skipping others; fails the test if the stream ends first
    /// or none comes within the usual bound.
    pub async fn next_with_method(&mut self, method: &str) -> Value {
        within(method, async {
            loop {
                let received = self.next_message().await.expect("the stream stays open");
                if received.message["method"] == method {
                    return received.message;
                }
            }
        })
        .await
    }

    /// Every remaining message until the stream ends (within the usual bound).
    pub async fn remaining_messages(&mut self) -> Vec<Received> {
        within("the stream to end", async {
            let mut all = Vec::new();
            while let Some(received) = self.next_message().await {
                all.push(received);
            }
            all
        })
        .await
    }

    /// The response message: the JSON body, or the response on the SSE stream (within the usual
    /// bound, however many other messages come first).
    pub async fn response(mut self) -> Value {
        if !self.is_sse() {
            return self.json().await;
        }
        within("the response on the SSE stream", async {
            while let Some(received) = self.next_message().await {
                if received.message.get("method").is_none() {
                    return received.message;
                }
            }
            panic!("the SSE stream ended without a response");
        })
        .await
    }
}

/// A new session refused over a limit: 503 with `Retry-After`, no session id, and a JSON-RPC
/// error that names the limit.
pub async fn assert_refused_for(reply: Reply, limit: &str) {
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reply.headers.contains_key("retry-after"));
    assert!(reply.headers.get("mcp-session-id").is_none());
    let answer = reply.json().await;
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(limit), "{answer}");
}

/// A message with a duplicated member name refused whole: 400, -32600 naming the member, the
/// request's id, and nothing of what its server would have answered.
pub async fn assert_duplicate_refused(reply: Reply, id: u64, member: &str) {
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let answer = reply.json().await;
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(answer["id"], id, "{answer}");
    assert_eq!(
        answer["error"]["data"]["duplicateMember"], member,
        "{answer}"
    );
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(member), "{answer}");
    assert!(answer.get("result").is_none(), "{answer}");
}

/// Waits until `condition` holds (for effects the test cannot await directly, such as another
/// process reacting), failing the test if it does not within the usual bound.
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    within(what, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// JSON log lines of the real binary, read up to the one that names the address it listens on;
/// every entry read is added to `seen`.
pub async fn listening_address(
    logs: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
    seen: &mut Vec<Value>,
) -> SocketAddr {
    within("the listening line", async {
        loop {
            let line = logs.next_line().await.unwrap().expect("a log line");
            let entry: Value = serde_json::from_str(&line)
                .unwrap_or_else(|error| panic!("JSON logs ({error}): {line}"));
            seen.push(entry.clone());
            if let Some(addr) = entry["fields"]["addr"].as_str() {
                return addr.parse().unwrap();
            }
        }
    })
    .await
}

/// The log lines of a running proxy binary.
pub type LogLines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>;

/// The real binary with `args`, JSON logs at `info`, once its log says where it listens: the
/// child (killed when dropped), that address, the rest of its log, and the entries read so far.
pub async fn spawn_proxy(
    args: &[&str],
) -> (tokio::process::Child, SocketAddr, LogLines, Vec<Value>) {
    spawn_proxy_with_env(args, &[]).await
}

/// [`spawn_proxy`], with these variables added to the proxy's environment.
pub async fn spawn_proxy_with_env(
    args: &[&str],
    env: &[(&str, &str)],
) -> (tokio::process::Child, SocketAddr, LogLines, Vec<Value>) {
    spawn_proxy_command(tokio::process::Command::new(DEMO), args, env).await
}

/// [`spawn_proxy_with_env`], started by `command` (a copy of the binary, another user).
pub async fn spawn_proxy_command(
    mut command: tokio::process::Command,
    args: &[&str],
    env: &[(&str, &str)],
) -> (tokio::process::Child, SocketAddr, LogLines, Vec<Value>) {
    use tokio::io::AsyncBufReadExt;
    // No balancer to wait for, unless the test says how long.
    let drain = match args.iter().any(|a| a.starts_with("--drain-delay")) {
        true => None,
        false => Some("--drain-delay=0s"),
    };
    let mut child = command
        .args(["--log-format", "json"])
        .args(drain)
        .args(args)
        .envs(env.iter().copied())
        .env(
            "RUST_LOG",
            std::env::var("PROXY_TEST_LOG_LEVEL").unwrap_or_else(|_| "info".into()),
        )
        // Tracing only where a test turns it on.
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the proxy starts");
    let mut logs = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let addr = listening_address(&mut logs, &mut seen).await;
    (child, addr, logs, seen)
}

/// Waits until `probe` (something only a round trip can tell: a process's metrics, Redis) gives
/// `wanted`, failing the test if it does not within the usual bound.
pub async fn until<T: PartialEq, F: std::future::Future<Output = T>>(
    what: &str,
    wanted: T,
    mut probe: impl FnMut() -> F,
) {
    within(what, async {
        while probe().await != wanted {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// How long a helper waits for the proxy or a peer before it fails the test.
pub const WAIT: Duration = Duration::from_secs(20);

tokio::task_local! {
    /// The bound of [`within`] in this task, where a test sets one ([`with_bound`]).
    static BOUND: Duration;
}

/// Runs `future` with every [`within`] it awaits (those of the helpers included) bounded by
/// `bound` instead of [`WAIT`]: the harness's own tests show a helper gives up without
/// waiting 20 s for it.
pub async fn with_bound<T>(bound: Duration, future: impl std::future::Future<Output = T>) -> T {
    BOUND.scope(bound, future).await
}

/// Bounds a wait that should finish quickly, so a regression fails instead of hanging: the
/// test panics ("timed out waiting for `what`") if `future` has not finished after [`WAIT`] of
/// real time. Real time, not tokio's: on a paused clock tokio's time leaps to its next timer
/// whenever the runtime waits on a socket or a child, so a bound in tokio's time would run out
/// at once there.
pub async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    let bound = BOUND.try_with(|bound| *bound).unwrap_or(WAIT);
    tokio::select! {
        biased;
        done = future => done,
        () = real_sleep(bound) => panic!("timed out waiting for {what} ({bound:?})"),
    }
}

/// Sleeps `duration` of real time, whatever the caller's clock: on a runtime of its own (one
/// thread for the whole test binary), whose clock nothing pauses.
async fn real_sleep(duration: Duration) {
    static CLOCK: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("test-clock")
            .enable_time()
            .build()
            .expect("the test clock's runtime starts")
    });
    /// Its sleep, cancelled when the wait ends first.
    struct Sleeping(tokio::task::JoinHandle<()>);
    impl Drop for Sleeping {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    // The sleep is made on that runtime: one made here would take this runtime's clock.
    let sleep = async move { tokio::time::sleep(duration).await };
    let mut sleeping = Sleeping(CLOCK.spawn(sleep));
    let _ = (&mut sleeping.0).await;
}

/// The stdout of a child, line by line.
pub type StdoutLines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;

/// Starts `command` (stdout piped, killed when dropped) and waits for the first line it prints
/// (where it listens, say): the child, that line, and the rest of its stdout.
pub async fn spawn_announcing(
    what: &str,
    command: &mut tokio::process::Command,
) -> (tokio::process::Child, String, StdoutLines) {
    use tokio::io::AsyncBufReadExt;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = within(what, lines.next_line())
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{what} printed nothing"));
    (child, first, lines)
}

/// `tests/python/<script>` on the pinned Python client's interpreter (tests/python/.venv).
pub fn python_script(script: &str) -> tokio::process::Command {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python");
    let python = dir.join(".venv/bin/python");
    assert!(
        python.exists(),
        "the Python client is not installed: run scripts/test (it creates tests/python/.venv)"
    );
    let mut command = tokio::process::Command::new(python);
    command.arg(dir.join(script));
    command
}

/// Runs `command` to its end (bounded by `within`), expects success, and returns its stdout.
pub async fn stdout_of(what: &str, command: &mut tokio::process::Command) -> Vec<u8> {
    let output = within(what, command.kill_on_drop(true).output())
        .await
        .unwrap_or_else(|e| panic!("{what} did not start: {e}"));
    assert!(
        output.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// The npm peers' directory (installed by scripts/test).
pub fn node_dir() -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/server-everything")
            .is_dir(),
        "the npm peers are not installed: run scripts/test (it runs `npm ci` in tests/node)"
    );
    dir
}

/// npm server-everything in `mode` (`streamableHttp` or `sse`), bound to 127.0.0.1, once it
/// accepts connections; killed when the handle drops.
pub async fn server_everything(mode: &str) -> (tokio::process::Child, u16) {
    let node = node_dir();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new("node")
        .arg("--require")
        .arg(node.join("loopback.cjs"))
        .arg(node.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
        .arg(mode)
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts server-everything");
    until("server-everything to listen", true, || async move {
        TcpStream::connect(("127.0.0.1", port)).await.is_ok()
    })
    .await;
    (child, port)
}

/// Runs the official TypeScript SDK client script (tests/node/sdk_client.mjs) against `url` and
/// returns the JSON line it printed; fails the test with its output if it fails.
pub async fn sdk_client(url: &str, args: &[&str]) -> serde_json::Value {
    node_client("node", "sdk_client.mjs", url, args).await
}

/// Runs `script` (in tests/node) with the pinned Node 22 against `url`, returning its report.
pub async fn pinned_node_client(script: &str, url: &str, args: &[&str]) -> serde_json::Value {
    let node = node_dir().join("node_modules/.bin/node");
    node_client(&node.to_string_lossy(), script, url, args).await
}

async fn node_client(
    node_binary: &str,
    script: &str,
    url: &str,
    args: &[&str],
) -> serde_json::Value {
    let node = node_dir();
    let run = tokio::process::Command::new(node_binary)
        .arg(node.join(script))
        .arg(url)
        .args(args)
        .current_dir(&node)
        .kill_on_drop(true)
        .output();
    let output = within("the TypeScript SDK client", run).await.unwrap();
    assert!(
        output.status.success(),
        "the SDK client failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("a JSON report")
}

/// The value of the metric `name` in a Prometheus exposition, summed over its label sets (its
/// servers, say); panics if it has no sample. `name` may name one series (`name{labels}`).
pub fn metric_in(text: &str, name: &str) -> u64 {
    let samples: Vec<u64> = text
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?.1,
                None => rest.strip_prefix(' ')?,
            };
            value.trim().parse::<f64>().ok().map(|v| v as u64)
        })
        .collect();
    assert!(!samples.is_empty(), "no metric {name} in {text}");
    samples.iter().sum()
}

/// The modern demo over HTTP on a port of its own choosing (killed when the child drops), and
/// the address it printed.
pub async fn modern_demo_over_http() -> (tokio::process::Child, SocketAddr) {
    let (child, url, _) = spawn_announcing(
        "the demo's URL",
        tokio::process::Command::new(DEMO)
            .args([
                "demo-server",
                "--http",
                "127.0.0.1:0",
                "--protocol",
                "2026-07-28",
            ])
            .stderr(std::process::Stdio::null()),
    )
    .await;
    let addr = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .unwrap_or_else(|| panic!("a URL: {url}"))
        .parse()
        .unwrap();
    (child, addr)
}

/// Waits until `condition` holds, on tokio's paused clock: polls with virtual sleeps, bounded in
/// real time (virtual time leaps forward whenever the runtime idles, so a `within` on it could
/// run out while a real child exits).
pub async fn on_the_paused_clock_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A figure of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
pub fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Reads `reply`'s raw chunks until `count` SSE keep-alive comments came (bounded).
pub async fn keep_alives(reply: &mut Reply, count: usize) {
    let mut seen = 0;
    within("the keep-alive comments", async {
        while seen < count {
            let chunk = reply.next_chunk().await.expect("the stream stays open");
            seen += chunk
                .windows(b": keep-alive".len())
                .filter(|w| w == b": keep-alive")
                .count();
        }
    })
    .await;
}

/// A listener that records the first request head it receives, answers 503, and closes.
pub async fn recording_upstream() -> (String, tokio::task::JoinHandle<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let recorded = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buffer = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buffer).await.unwrap();
            assert!(n > 0, "the request head arrives");
            head.extend_from_slice(&buffer[..n]);
        }
        let _ = socket
            .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
        String::from_utf8_lossy(&head).to_lowercase()
    });
    (url, recorded)
}

/// A secret in a file of its own (the proxy reads secrets from files, never from its command
/// line), removed when dropped.
pub struct SecretFile(std::path::PathBuf);

impl SecretFile {
    pub fn new(name: &str, secret: &str) -> SecretFile {
        let mut unique = [0u8; 4];
        getrandom::fill(&mut unique).unwrap();
        let unique: String = unique.iter().map(|b| format!("{b:02x}")).collect();
        let file = format!("mcp-proxy-{name}-{}-{unique}", std::process::id());
        let path = std::env::temp_dir().join(file);
        std::fs::write(&path, format!("{secret}\n")).unwrap();
        SecretFile(path)
    }

    pub fn source(&self) -> Option<mcp_session_proxy::config::SecretSource> {
        Some(mcp_session_proxy::config::SecretSource::File(
            self.0.clone(),
        ))
    }
}

impl Drop for SecretFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
