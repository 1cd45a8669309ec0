//! mcp-bench: the load generator of the benchmark harness. Speaks Streamable HTTP like a real
//! client (pooled keep-alive connections, real sessions, JSON or SSE answers) and prints one JSON
//! object per run, so `bench/run` can put proxies side by side.

use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, Subcommand};
use http::{header, HeaderValue, Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use mcp_session_proxy::session::log::{EventLog, StreamKey, Window};
use mcp_session_proxy::tls::ClientTls;
use mcp_session_proxy::upstream::http_client::{self, HttpClient};
use mcp_session_proxy::wire::sse;
use serde_json::{json, Value};

#[derive(Parser)]
#[command(
    name = "mcp-bench",
    about = "Load generator and micro-benchmarks for MCP proxies"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Concurrent sessions, each calling a tool in a loop: latency percentiles and throughput.
    Calls {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 1)]
        sessions: usize,
        /// Calls per session (after the warm-up).
        #[arg(long, default_value_t = 1000)]
        calls: usize,
        #[arg(long, default_value_t = 50)]
        warmup: usize,
        /// Tool and JSON arguments.
        #[arg(long, default_value = "echo")]
        tool: String,
        #[arg(long, default_value = r#"{"text":"hello"}"#)]
        arguments: String,
        /// Send the calls here instead of to `--url`, where the sessions are opened (another
        /// replica of the same proxy).
        #[arg(long)]
        call_url: Option<String>,
        /// `legacy`: each session opened with initialize (2025-06-18); `modern`: no session,
        /// 2026-07-28 requests with per-request `_meta`, each "session" a principal of its own;
        /// `data-layer`: as `modern`, each calling within a data-layer session it creates first
        /// (`sessions/create`, then the cookie in `_meta`); `anonymous`: as `modern`, with no
        /// credential (every client the one anonymous principal).
        #[arg(long, default_value = "legacy")]
        era: String,
        /// An `Authorization` every request carries (`Bearer <token>`, for a proxy with
        /// `[auth]`); legacy sessions then all belong to its principal.
        #[arg(long)]
        authorization: Option<String>,
        /// Trust this CA (PEM) alone for an https:// URL: a proxy whose listener speaks TLS.
        #[arg(long)]
        ca_file: Option<std::path::PathBuf>,
        /// Also report `cpu_us_per_call`: the CPU time this process (the proxy) spent from the
        /// last session's opening to the last call's answer, per call (warm-up included), so
        /// that what opening and ending sessions costs stays out of it.
        #[arg(long)]
        cpu_pid: Option<u32>,
    },
    /// Opens sessions and leaves them idle (the caller measures the proxy's memory): how many,
    /// in how long, and how many per second.
    Idle {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 1000)]
        sessions: usize,
        /// Sessions opened at once.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
    },
    /// Event-log micro-benchmarks: append rate, and replay of 1,000 events.
    Log {
        #[arg(long, default_value_t = 200_000)]
        events: usize,
    },
    /// Time to resume a session that missed `missed` events (mcp-session-proxy only).
    Resume {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 1000)]
        missed: usize,
    },
    /// A do-nothing TCP relay (one thread, bytes copied both ways): the floor of any user-space
    /// hop on this machine, to put the proxy's added latency in proportion. Prints the address
    /// it listens on, then runs until killed.
    Relay {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        to: std::net::SocketAddr,
        /// Hold every chunk this long before passing it on, both ways, in order (a slow link).
        #[arg(long, default_value_t = 0)]
        delay_ms: u64,
    },
}

fn main() -> Result<(), String> {
    let cli = Cli::parse();
    if let Command::Relay {
        listen,
        to,
        delay_ms,
    } = cli.command
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        return runtime.block_on(relay(listen, to, Duration::from_millis(delay_ms)));
    }
    tokio::runtime::Runtime::new()
        .map_err(|e| e.to_string())?
        .block_on(run(cli.command))
}

async fn run(command: Command) -> Result<(), String> {
    let report = match command {
        Command::Calls {
            url,
            sessions,
            calls,
            warmup,
            tool,
            arguments,
            call_url,
            era,
            authorization,
            ca_file,
            cpu_pid,
        } => {
            let arguments: Value = serde_json::from_str(&arguments).map_err(|e| e.to_string())?;
            let call_url = call_url.as_deref().unwrap_or(&url);
            let call_url: http::Uri = call_url.parse().map_err(|e| format!("{e}"))?;
            let (modern, data_layer, anonymous) = match era.as_str() {
                "legacy" => (false, false, false),
                "modern" => (true, false, false),
                "data-layer" => (true, true, false),
                "anonymous" => (true, false, true),
                other => {
                    return Err(format!(
                        "--era {other}: legacy, modern, data-layer or anonymous"
                    ))
                }
            };
            let shape = Shape {
                sessions,
                calls,
                warmup,
                modern,
                data_layer,
                anonymous,
                authorization: authorization
                    .map(|value| HeaderValue::from_str(&value).map_err(|e| e.to_string()))
                    .transpose()?,
                client: match ca_file {
                    None => http_client::plain_client(),
                    Some(ca_file) => http_client::client(&ClientTls {
                        ca_file: Some(ca_file),
                        platform_roots: false,
                        ..ClientTls::default()
                    })
                    .map_err(|e| e.to_string())?,
                },
                cpu_pid,
            };
            calls_bench(&url, &call_url, shape, &tool, arguments).await?
        }
        Command::Idle {
            url,
            sessions,
            concurrency,
        } => idle(&url, sessions, concurrency).await?,
        Command::Log { events } => log_bench(events),
        Command::Resume { url, missed } => resume(&url, missed).await?,
        Command::Relay { .. } => unreachable!("handled in main"),
    };
    println!("{report}");
    Ok(())
}

async fn relay(
    listen: std::net::SocketAddr,
    to: std::net::SocketAddr,
    delay: Duration,
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| e.to_string())?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("{}", json!({ "listening": bound.to_string() }));
    loop {
        let (mut inbound, _) = listener.accept().await.map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await else {
                return;
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            if delay.is_zero() {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                return;
            }
            let (in_read, in_write) = inbound.into_split();
            let (out_read, out_write) = outbound.into_split();
            tokio::join!(
                delayed(in_read, out_write, delay),
                delayed(out_read, in_write, delay)
            );
        });
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read, in order.
async fn delayed(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (chunks, mut due) =
        tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let reader = async move {
        let mut buffer = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = from.read(&mut buffer).await {
            let at = tokio::time::Instant::now() + delay;
            if chunks.send((at, buffer[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

/// The revision of `--era modern`.
const MODERN: &str = "2026-07-28";

/// One client session: a legacy one (`id`), or a 2026-07-28 client (`modern`, with a
/// `principal` unless anonymous).
struct Session {
    client: HttpClient,
    url: http::Uri,
    id: Option<HeaderValue>,
    modern: bool,
    principal: Option<HeaderValue>,
    /// The data-layer session it calls within (its cookie).
    cookie: Option<Value>,
    next: u64,
}

/// How many sessions call how often, and in which era.
struct Shape {
    sessions: usize,
    calls: usize,
    warmup: usize,
    modern: bool,
    data_layer: bool,
    /// 2026-07-28 clients without a credential.
    anonymous: bool,
    /// The credential of every request, instead of one per session.
    authorization: Option<HeaderValue>,
    /// The client the sessions share: plain, or trusting a CA for https://.
    client: HttpClient,
    /// The process whose CPU time per call is reported.
    cpu_pid: Option<u32>,
}

impl Session {
    /// A 2026-07-28 client: nothing to open; its credential (unless `anonymous`) makes it a
    /// principal of its own.
    fn modern(
        client: &HttpClient,
        url: &str,
        n: usize,
        anonymous: bool,
    ) -> Result<Session, String> {
        let principal = match anonymous {
            true => None,
            false => Some(
                HeaderValue::from_str(&format!("Bearer mcp-bench-{n}"))
                    .map_err(|e| e.to_string())?,
            ),
        };
        Ok(Session {
            client: client.clone(),
            url: url.parse().map_err(|e| format!("{url}: {e}"))?,
            id: None,
            modern: true,
            cookie: None,
            principal,
            next: 1,
        })
    }

    async fn open(
        client: &HttpClient,
        url: &str,
        version: &str,
        principal: Option<HeaderValue>,
    ) -> Result<Session, String> {
        let mut session = Session {
            client: client.clone(),
            url: url.parse().map_err(|e| format!("{url}: {e}"))?,
            id: None,
            modern: false,
            principal,
            cookie: None,
            next: 1,
        };
        let response = session
            .post(
                json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": { "name": "mcp-bench", "version": "1" } } }),
            )
            .await?;
        session.id = response.headers().get("mcp-session-id").cloned();
        answer(response).await?;
        let ack = session
            .post(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await?;
        let _ = ack.into_body().collect().await;
        Ok(session)
    }

    /// Creates the data-layer session this 2026-07-28 client calls within.
    async fn create_data_session(&mut self) -> Result<(), String> {
        let created = self
            .post(
                json!({ "jsonrpc": "2.0", "id": 0, "method": "sessions/create",
                          "params": { "_meta": modern_meta() } }),
            )
            .await?;
        let created = answer(created).await?;
        let session = &created["result"]["session"];
        if !session["sessionId"].is_string() {
            return Err(format!("sessions/create answered {created}"));
        }
        self.cookie = Some(json!({ "sessionId": session["sessionId"], "state": session["state"] }));
        Ok(())
    }

    async fn post(&self, message: Value) -> Result<Response<Incoming>, String> {
        let mut request = Request::new(Full::new(Bytes::from(message.to_string())));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.url.clone();
        let headers = request.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if let Some(principal) = &self.principal {
            headers.insert(header::AUTHORIZATION, principal.clone());
        }
        if self.modern {
            headers.insert("mcp-protocol-version", HeaderValue::from_static(MODERN));
            for (name, field) in [("mcp-method", "method"), ("mcp-name", "name")] {
                let value = message[field]
                    .as_str()
                    .or(message["params"][field].as_str())
                    .and_then(|v| HeaderValue::from_str(v).ok());
                if let Some(value) = value {
                    headers.insert(name, value);
                }
            }
        } else {
            headers.insert(
                "mcp-protocol-version",
                HeaderValue::from_static("2025-06-18"),
            );
        }
        if let Some(id) = &self.id {
            headers.insert("mcp-session-id", id.clone());
        }
        self.client
            .request(request)
            .await
            .map_err(|e| e.to_string())
    }

    /// Ends the session (DELETE), as a client done with it does; best effort, after the run.
    async fn end(&self) {
        let Some(id) = &self.id else {
            return;
        };
        let mut request = Request::new(Full::new(Bytes::new()));
        *request.method_mut() = Method::DELETE;
        *request.uri_mut() = self.url.clone();
        request.headers_mut().insert("mcp-session-id", id.clone());
        request.headers_mut().insert(
            "mcp-protocol-version",
            HeaderValue::from_static("2025-06-18"),
        );
        if let Ok(response) = self.client.request(request).await {
            let _ = response.into_body().collect().await;
        }
    }

    /// Calls a tool; returns the response message.
    async fn call(&mut self, tool: &str, arguments: &Value) -> Result<Value, String> {
        self.next += 1;
        let mut params = json!({ "name": tool, "arguments": arguments });
        if self.modern {
            params["_meta"] = modern_meta();
        }
        if let Some(cookie) = &self.cookie {
            params["_meta"]["io.modelcontextprotocol/session"] = cookie.clone();
        }
        let response = self
            .post(
                json!({ "jsonrpc": "2.0", "id": self.next, "method": "tools/call",
                          "params": params }),
            )
            .await?;
        answer(response).await
    }
}

/// The per-request `_meta` of a 2026-07-28 request.
fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "mcp-bench", "version": "1" },
    })
}

/// The response message of a POST, from a JSON body or an SSE stream.
async fn answer(response: Response<Incoming>) -> Result<Value, String> {
    let status = response.status();
    let streamed = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut body = response.into_body();
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    if !streamed {
        let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        return serde_json::from_slice(&bytes).map_err(|e| e.to_string());
    }
    let mut decoder = sse::Decoder::new(16 << 20);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() else {
            continue;
        };
        decoder.feed(&data);
        while let Some(event) = decoder.next_event().map_err(|e| e.to_string())? {
            let Ok(message) = serde_json::from_str::<Value>(&event.data) else {
                continue;
            };
            if message.get("id").is_some() && message.get("method").is_none() {
                return Ok(message);
            }
        }
    }
    Err("the stream ended without a response".into())
}

async fn calls_bench(
    url: &str,
    call_url: &http::Uri,
    shape: Shape,
    tool: &str,
    arguments: Value,
) -> Result<Value, String> {
    let Shape {
        sessions,
        calls,
        warmup,
        modern,
        data_layer,
        anonymous,
        authorization,
        client,
        cpu_pid,
    } = shape;
    let mut opened = Vec::with_capacity(sessions);
    for n in 0..sessions {
        let mut session = match modern {
            true => Session::modern(&client, url, n, anonymous)?,
            false => Session::open(&client, url, "2025-06-18", authorization.clone()).await?,
        };
        if let (true, Some(authorization)) = (modern, &authorization) {
            session.principal = Some(authorization.clone());
        }
        if data_layer {
            session.create_data_session().await?;
        }
        session.url = call_url.clone();
        // Ids unique across the sessions: a server shared by every client without sessions of
        // its own (ContextForge's bridge) matches answers to requests by id alone.
        session.next = (n as u64) << 32;
        opened.push(session);
    }
    let cpu_before = cpu_pid.map(cpu_time).transpose()?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for mut session in opened {
        let tool = tool.to_owned();
        let arguments = arguments.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..warmup {
                session.call(&tool, &arguments).await?;
            }
            let mut latencies = Vec::with_capacity(calls);
            let mut errors = 0usize;
            for _ in 0..calls {
                let sent = Instant::now();
                let reply = session.call(&tool, &arguments).await?;
                latencies.push(sent.elapsed());
                errors += usize::from(reply.get("error").is_some());
            }
            Ok::<_, String>((latencies, errors, session))
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut done = Vec::new();
    for task in tasks {
        let (mut measured, failed, session) = task.await.map_err(|e| e.to_string())??;
        latencies.append(&mut measured);
        errors += failed;
        done.push(session);
    }
    let elapsed = started.elapsed();
    let cpu_spent = match (cpu_pid, cpu_before) {
        (Some(pid), Some(before)) => Some(cpu_time(pid)?.saturating_sub(before)),
        _ => None,
    };
    for session in &done {
        session.end().await;
    }
    latencies.sort();
    let percentile = |p: f64| {
        let index = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[index].as_secs_f64() * 1e6
    };
    let mean = latencies.iter().sum::<Duration>().as_secs_f64() * 1e6 / latencies.len() as f64;
    let cpu_us_per_call = cpu_spent
        .map(|spent| spent.as_secs_f64() * 1e6 / (latencies.len() + warmup * sessions) as f64);
    Ok(json!({
        "cpu_us_per_call": cpu_us_per_call,
        "era": match (modern, data_layer) {
            (_, true) => "data-layer",
            (true, false) if anonymous => "anonymous",
            (true, false) => "modern",
            (false, false) => "legacy",
        },
        "sessions": sessions,
        "calls": latencies.len(),
        "errors": errors,
        "p50_us": percentile(0.50),
        "p99_us": percentile(0.99),
        "mean_us": mean,
        "throughput_rps": latencies.len() as f64 / elapsed.as_secs_f64(),
    }))
}

/// The CPU time a process has spent so far, all its threads together (the scheduler's own
/// nanoseconds, finer than the clock ticks of `/proc/<pid>/stat`).
fn cpu_time(pid: u32) -> Result<Duration, String> {
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|e| format!("process {pid}: {e}"))?;
    let mut nanos = 0u64;
    for thread in threads.flatten() {
        // A thread that ended since the listing has nothing left to count.
        let Ok(stat) = std::fs::read_to_string(thread.path().join("schedstat")) else {
            continue;
        };
        nanos += stat
            .split_whitespace()
            .next()
            .and_then(|field| field.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(Duration::from_nanos(nanos))
}

async fn idle(url: &str, sessions: usize, concurrency: usize) -> Result<Value, String> {
    let client = http_client::plain_client();
    let started = Instant::now();
    let concurrency = concurrency.clamp(1, sessions.max(1));
    let openers = (0..concurrency).map(|n| {
        let (client, url) = (client.clone(), url.to_owned());
        // The sessions are left open on the proxy; nothing of them is kept here.
        let share = sessions / concurrency + usize::from(n < sessions % concurrency);
        tokio::spawn(async move {
            for _ in 0..share {
                Session::open(&client, &url, "2025-06-18", None).await?;
            }
            Ok::<_, String>(())
        })
    });
    for opener in openers.collect::<Vec<_>>() {
        opener.await.map_err(|e| e.to_string())??;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(json!({ "sessions": sessions, "seconds": seconds, "per_second": sessions as f64 / seconds }))
}

fn log_bench(events: usize) -> Value {
    let payload = Bytes::from_static(
        br#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"demo://doc/1"}}"#,
    );
    let window = Window {
        max_events: 1024,
        max_bytes: 1 << 30,
        max_age: Duration::from_secs(3600),
    };
    let now = tokio::time::Instant::now();
    let mut log = EventLog::new(window);
    let started = Instant::now();
    for _ in 0..events {
        log.append(
            StreamKey::Standalone,
            payload.clone(),
            false,
            None,
            true,
            now,
        );
    }
    let append = started.elapsed();

    let mut coalescing = EventLog::new(window);
    let keys: Vec<String> = (0..10).map(|i| format!("demo://doc/{i}")).collect();
    let started = Instant::now();
    for i in 0..events {
        coalescing.append(
            StreamKey::Standalone,
            payload.clone(),
            false,
            Some(keys[i % 10].clone()),
            false,
            now,
        );
    }
    let coalesce = started.elapsed();

    let mut full = EventLog::new(Window {
        max_events: 1000,
        ..window
    });
    for _ in 0..1000 {
        full.append(
            StreamKey::Standalone,
            payload.clone(),
            false,
            None,
            false,
            now,
        );
    }
    let rounds = 1000;
    let started = Instant::now();
    let mut replayed = 0;
    for _ in 0..rounds {
        // A resume: everything is caught up on (and would be coalesced, had it keys).
        replayed += full
            .read(StreamKey::Standalone, 0, u64::MAX, now)
            .events
            .len();
    }
    let replay = started.elapsed() / rounds;
    json!({
        "append_per_second": events as f64 / append.as_secs_f64(),
        "append_coalescing_per_second": events as f64 / coalesce.as_secs_f64(),
        "replay_1000_us": replay.as_secs_f64() * 1e6,
        "replayed_per_round": replayed / rounds as usize,
    })
}

async fn resume(url: &str, missed: usize) -> Result<Value, String> {
    let client = http_client::plain_client();
    let mut session = Session::open(&client, url, "2025-11-25", None).await?;
    // Note the GET stream's position, then let `missed` distinct updates pile up.
    let position = {
        let response = get(&session, None).await?;
        let mut body = response.into_body();
        let mut decoder = sse::Decoder::new(1 << 20);
        loop {
            let frame = body
                .frame()
                .await
                .ok_or("no priming event (negotiate 2025-11-25?)")?;
            if let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() {
                decoder.feed(&data);
            }
            if let Some(event) = decoder.next_event().map_err(|e| e.to_string())? {
                break event.id.ok_or("the first event has no id")?;
            }
        }
    };
    let uris: Vec<String> = (0..missed).map(|i| format!("demo://bench/{i}")).collect();
    session
        .call("emit_updates", &json!({ "uris": uris, "count": missed }))
        .await?;
    let started = Instant::now();
    let response = get(&session, Some(&position)).await?;
    let mut body = response.into_body();
    let mut decoder = sse::Decoder::new(1 << 20);
    let mut received = 0;
    while received < missed {
        let frame = body.frame().await.ok_or("the stream ended early")?;
        if let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() {
            decoder.feed(&data);
        }
        while let Some(event) = decoder.next_event().map_err(|e| e.to_string())? {
            received += usize::from(!event.data.is_empty());
        }
    }
    Ok(
        json!({ "missed": missed, "received": received, "resume_ms": started.elapsed().as_secs_f64() * 1e3 }),
    )
}

async fn get(session: &Session, last_event_id: Option<&str>) -> Result<Response<Incoming>, String> {
    let mut request = Request::new(Full::new(Bytes::new()));
    *request.uri_mut() = session.url.clone();
    let headers = request.headers_mut();
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("text/event-stream"),
    );
    if let Some(id) = &session.id {
        headers.insert("mcp-session-id", id.clone());
    }
    if let Some(position) = last_event_id.and_then(|p| HeaderValue::from_str(p).ok()) {
        headers.insert("last-event-id", position);
    }
    session
        .client
        .request(request)
        .await
        .map_err(|e| e.to_string())
}
