//! mcp-bench: the load generator of the benchmark harness. Speaks Streamable HTTP like a real
//! client (pooled keep-alive connections, real sessions, JSON or SSE answers) and prints one JSON
//! object per run, so `bench/run` can put proxies side by side.

use std::time::Duration;

use clap::{Parser, Subcommand};
use http::HeaderValue;
use mcp_session_proxy::tls::ClientTls;
use mcp_session_proxy::upstream::http_client::{self};
use serde_json::{json, Value};

mod measures;
mod session;

use measures::{calls_bench, idle, log_bench, resume};
use session::Shape;

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
