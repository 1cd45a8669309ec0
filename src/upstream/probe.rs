//! `upstream.protocol = "auto"` (the default): which revision a server speaks, asked once at
//! start with `server/discover`. A stdio server is asked in a child of its own, thrown away
//! after: some legacy stdio servers exit on any request before `initialize`; an HTTP server
//! with one POST carrying the 2026-07-28 headers. No answer (within `PROBE_TIMEOUT`), an error,
//! or an exit means a legacy server. A server that speaks 2026-07-28 is then offered a legacy
//! `initialize`: one that takes it speaks both revisions and is spoken to in the legacy one
//! (its sessions kept as they are; the upstream session the probe opened is ended); only a
//! server that refuses it is bridged. A stdio child that exits without answering is offered
//! `initialize` in another: one that answers is a legacy server that exits on requests before
//! it; one that does not cannot start, and the probe says how it ended (`StartFailure`).

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tracing::info;

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full};

use super::http_client::{self, HttpSpec};
use super::lines::{Line, LineReader};
use super::stdio::StdioSpec;
use super::UpstreamSpec;
use crate::base::text::printable;
use crate::wire::era::{Era, CAPABILITIES_KEY, MODERN_VERSION, VERSION_KEY};
use crate::wire::methods;

/// The id of the probe's `server/discover`.
const PROBE_ID: &str = "mcp-session-proxy/probe";
/// The id of the probe's `initialize`.
const PROBE_INITIALIZE_ID: &str = "mcp-session-proxy/probe-initialize";
/// The longest the probe waits for a server at start (at most the request timeout).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most of a failed child's standard error the probe keeps: its last lines.
const LAST_WORDS: usize = 512;

/// A stdio server whose child exited at start without answering the probe.
#[derive(Debug, Clone, thiserror::Error)]
#[error("it exited without answering ({status}){}", last_words(.stderr))]
pub struct StartFailure {
    /// How it ended (`exit status: 3`, `signal: 9 (SIGKILL)`, or why it could not start).
    pub status: String,
    /// The end of what it wrote on its standard error.
    pub stderr: String,
}

fn last_words(stderr: &str) -> String {
    match stderr.is_empty() {
        true => String::new(),
        false => format!(", its standard error ending: {stderr}"),
    }
}

/// `spec`, the server configured at `key`, with its revision settled: probed when it is
/// `auto`; and, for a stdio server whose child could not start, how it failed (its revision is
/// then taken as legacy).
pub async fn settle(
    key: &str,
    mut spec: UpstreamSpec,
    timeout: Duration,
) -> (UpstreamSpec, Option<StartFailure>) {
    let timeout = timeout.min(PROBE_TIMEOUT);
    let command = spec.display();
    let protocol = match &mut spec {
        UpstreamSpec::Stdio(stdio) | UpstreamSpec::SharedStdio(stdio)
            if stdio.protocol == Era::Auto =>
        {
            match stdio_probe(stdio, timeout).await {
                Ok(verdict) => {
                    Arc::make_mut(stdio).protocol = verdict;
                    verdict
                }
                Err(failure) => {
                    Arc::make_mut(stdio).protocol = Era::Legacy;
                    return (spec, Some(failure));
                }
            }
        }
        UpstreamSpec::Http(http) if http.protocol == Era::Auto => {
            let asked = HttpSpec {
                request_timeout: http.request_timeout.min(timeout),
                ..http.clone()
            };
            http.protocol = http_verdict(&asked).await;
            http.protocol
        }
        _ => return (spec, None),
    };
    info!(server = %key, %command, %protocol, "probed the server's protocol");
    (spec, None)
}

/// POSTs `server/discover` as a 2026-07-28 client does.
pub async fn http_verdict(spec: &HttpSpec) -> Era {
    let request = Request::builder()
        .method(Method::POST)
        .uri(spec.url.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN_VERSION)
        .header("mcp-method", methods::SERVER_DISCOVER)
        .body(Full::new(Bytes::from(discover().to_string())));
    let Ok(request) = request else {
        return Era::Legacy;
    };
    let client = http_client::client_or_none(&spec.tls);
    let Ok(response) = http_client::send(&client, spec, request).await else {
        return Era::Legacy;
    };
    let sse = http_client::is_event_stream(&response);
    // An answer past the longest event is not one the probe waits for to its end.
    let body = http_body_util::Limited::new(response.into_body(), spec.max_event_bytes);
    let Ok(Ok(body)) = tokio::time::timeout(spec.request_timeout, body.collect()).await else {
        return Era::Legacy;
    };
    let body = body.to_bytes();
    let text = String::from_utf8_lossy(&body);
    // JSON, or the data lines of an SSE answer.
    let messages: Vec<Value> = match sse {
        false => serde_json::from_str(&text).into_iter().collect(),
        true => text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect(),
    };
    if !messages.iter().any(speaks_modern) {
        return Era::Legacy;
    }
    match http_takes_initialize(&client, spec).await {
        true => Era::Legacy,
        false => Era::Modern,
    }
}

/// Whether an HTTP server that speaks 2026-07-28 takes a legacy `initialize` too (the upstream
/// session it opens, if any, is ended at once).
async fn http_takes_initialize(client: &http_client::HttpClient, spec: &HttpSpec) -> bool {
    let request = Request::builder()
        .method(Method::POST)
        .uri(spec.url.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(Full::new(Bytes::from(legacy_initialize().to_string())));
    let Ok(request) = request else {
        return false;
    };
    let Ok(response) = http_client::send(client, spec, request).await else {
        return false;
    };
    let session = response.headers().get("mcp-session-id").cloned();
    let took = response.status().is_success();
    drop(response);
    if let Some(session) = session {
        let end = Request::builder()
            .method(Method::DELETE)
            .uri(spec.url.clone())
            .header("mcp-session-id", session)
            .body(Full::new(Bytes::new()));
        if let Ok(end) = end {
            let _ = http_client::send(client, spec, end).await;
        }
    }
    took
}

/// The legacy `initialize` the probe offers a server that speaks 2026-07-28.
fn legacy_initialize() -> Value {
    json!({ "jsonrpc": "2.0", "id": PROBE_INITIALIZE_ID, "method": methods::INITIALIZE,
        "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": { "name": "mcp-session-proxy", "version": env!("CARGO_PKG_VERSION") } } })
}

fn discover() -> Value {
    json!({ "jsonrpc": "2.0", "id": PROBE_ID, "method": methods::SERVER_DISCOVER,
        "params": { "_meta": { VERSION_KEY: MODERN_VERSION, CAPABILITIES_KEY: {} } } })
}

/// A `server/discover` answer that lists 2026-07-28.
fn speaks_modern(message: &Value) -> bool {
    message["id"] == PROBE_ID
        && message["result"]["supportedVersions"]
            .as_array()
            .is_some_and(|versions| versions.iter().any(|v| v == MODERN_VERSION))
}

/// [`stdio_probe`]'s revision, a child that cannot start taken as a legacy server.
pub async fn stdio_verdict(spec: &StdioSpec, timeout: Duration) -> Era {
    stdio_probe(spec, timeout).await.unwrap_or(Era::Legacy)
}

/// Asks a throwaway child of `spec` for `server/discover` (confined, it works on a view of its
/// command's package cache, as a session's child does). No answer in time is a legacy server;
/// a child that exits without one is offered `initialize` in another.
pub async fn stdio_probe(spec: &StdioSpec, timeout: Duration) -> Result<Era, StartFailure> {
    let cannot_start = |error: std::io::Error| StartFailure {
        status: format!("it could not be started: {error}"),
        stderr: String::new(),
    };
    let (mut command, holds) = spec.command().map_err(cannot_start)?;
    let mut child = command
        .stderr(Stdio::piped())
        .spawn()
        .map_err(cannot_start)?;
    let verdict = match (child.stdin.take(), child.stdout.take()) {
        (Some(stdin), Some(stdout)) => {
            let asked = ask(stdin, stdout, spec.max_line_bytes);
            tokio::time::timeout(timeout, asked)
                .await
                .unwrap_or(Some(Era::Legacy))
        }
        _ => Some(Era::Legacy),
    };
    let ended = match verdict {
        Some(_) => None,
        None => Some(how_it_ended(&mut child).await),
    };
    let _ = super::stdio::terminate(&mut child, Duration::ZERO).await;
    holds.release(Duration::from_secs(1)).await;
    match (verdict, ended) {
        (Some(verdict), _) => Ok(verdict),
        // Some legacy servers exit on any request before `initialize`.
        (None, _) if takes_initialize(spec, timeout).await => Ok(Era::Legacy),
        (None, failure) => Err(failure.unwrap_or(StartFailure {
            status: "unknown".into(),
            stderr: String::new(),
        })),
    }
}

/// How a child that stopped answering ended: its status and the end of its standard error
/// (each read within a second: a grandchild may hold the pipe open).
async fn how_it_ended(child: &mut tokio::process::Child) -> StartFailure {
    let bound = Duration::from_secs(1);
    let status = match tokio::time::timeout(bound, child.wait()).await {
        Ok(Ok(status)) => status.to_string(),
        Ok(Err(error)) => error.to_string(),
        Err(_) => "its output closed, the process still running".into(),
    };
    let mut written = Vec::new();
    if let Some(stderr) = child.stderr.as_mut() {
        let mut limited = stderr.take(64 << 10);
        let _ = tokio::time::timeout(bound, limited.read_to_end(&mut written)).await;
    }
    let text = String::from_utf8_lossy(&written);
    let text = text.trim();
    let from = text.len().saturating_sub(LAST_WORDS);
    let from = (from..text.len())
        .find(|at| text.is_char_boundary(*at))
        .unwrap_or(0);
    // One line of printable text: what a child writes cannot forge log lines or drive a terminal.
    let words = text[from..]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    StartFailure {
        status,
        stderr: printable(&words),
    }
}

/// Whether a fresh child of `spec` answers a legacy `initialize` within `timeout`.
async fn takes_initialize(spec: &StdioSpec, timeout: Duration) -> bool {
    let Ok((mut command, holds)) = spec.command() else {
        return false;
    };
    let Ok(mut child) = command.stderr(Stdio::null()).spawn() else {
        return false;
    };
    let answered = match (child.stdin.take(), child.stdout.take()) {
        (Some(mut stdin), Some(stdout)) => {
            let asked = async {
                let offered = format!("{}\n", legacy_initialize());
                stdin.write_all(offered.as_bytes()).await.ok()?;
                let mut lines = LineReader::new(BufReader::new(stdout), spec.max_line_bytes);
                answer_to(&mut lines, PROBE_INITIALIZE_ID).await
            };
            let answer = tokio::time::timeout(timeout, asked).await.ok().flatten();
            answer.is_some_and(|answer| answer.get("result").is_some())
        }
        _ => false,
    };
    let _ = super::stdio::terminate(&mut child, Duration::ZERO).await;
    holds.release(Duration::from_secs(1)).await;
    answered
}

/// The child's revision; `None` when it ended (or closed its output) without answering
/// `server/discover`.
async fn ask(
    mut stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
    max_line_bytes: usize,
) -> Option<Era> {
    let mut lines = LineReader::new(BufReader::new(stdout), max_line_bytes);
    let asked = stdin
        .write_all(format!("{}\n", discover()).as_bytes())
        .await;
    let discovered = answer_to(&mut lines, PROBE_ID).await;
    let discovered = match (asked, discovered) {
        (_, Some(discovered)) => discovered,
        _ => return None,
    };
    if !speaks_modern(&discovered) {
        return Some(Era::Legacy);
    }
    let offered = format!("{}\n", legacy_initialize());
    if stdin.write_all(offered.as_bytes()).await.is_err() {
        return Some(Era::Modern);
    }
    match answer_to(&mut lines, PROBE_INITIALIZE_ID).await {
        Some(answer) if answer.get("result").is_some() => Some(Era::Legacy),
        _ => Some(Era::Modern),
    }
}

/// The server's answer to the probe's request `id`, skipping anything else it writes.
async fn answer_to(
    lines: &mut LineReader<BufReader<tokio::process::ChildStdout>>,
    id: &str,
) -> Option<Value> {
    while let Ok(Some(line)) = lines.next_line().await {
        let Line::Text(line) = line else { continue };
        match serde_json::from_slice::<Value>(&line) {
            Ok(message) if message["id"] == id => return Some(message),
            _ => continue,
        }
    }
    None
}
