//! `upstream.protocol = "auto"` (the default): which revision a server speaks, asked once at
//! start with `server/discover`. A stdio server is asked in a child of its own, thrown away
//! after: some legacy stdio servers exit on any request before `initialize`; an HTTP server
//! with one POST carrying the 2026-07-28 headers. No answer (within `PROBE_TIMEOUT`), an error,
//! or an exit means a legacy server. A server that speaks 2026-07-28 is then offered a legacy
//! `initialize`: one that takes it speaks both revisions and is spoken to in the legacy one
//! (its sessions kept as they are; the upstream session the probe opened is ended); only a
//! server that refuses it is bridged.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tracing::info;

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full};

use super::http_client::{self, HttpSpec};
use super::lines::{Line, LineReader};
use super::stdio::StdioSpec;
use super::UpstreamSpec;
use crate::wire::era::{Era, CAPABILITIES_KEY, MODERN_VERSION, VERSION_KEY};
use crate::wire::methods;

/// The id of the probe's `server/discover`.
const PROBE_ID: &str = "mcp-session-proxy/probe";
/// The id of the probe's `initialize`.
const PROBE_INITIALIZE_ID: &str = "mcp-session-proxy/probe-initialize";
/// The longest the probe waits for a server at start (at most the request timeout).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// `spec` with its revision settled: probed when it is `auto`.
pub async fn settle(mut spec: UpstreamSpec, timeout: Duration) -> UpstreamSpec {
    let timeout = timeout.min(PROBE_TIMEOUT);
    let server = spec.display();
    let protocol = match &mut spec {
        UpstreamSpec::Stdio(stdio) | UpstreamSpec::SharedStdio(stdio)
            if stdio.protocol == Era::Auto =>
        {
            let verdict = stdio_verdict(stdio, timeout).await;
            Arc::make_mut(stdio).protocol = verdict;
            verdict
        }
        UpstreamSpec::Http(http) if http.protocol == Era::Auto => {
            let asked = HttpSpec {
                request_timeout: http.request_timeout.min(timeout),
                ..http.clone()
            };
            http.protocol = http_verdict(&asked).await;
            http.protocol
        }
        _ => return spec,
    };
    info!(%server, %protocol, "probed the server's protocol");
    spec
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

/// Asks a throwaway child of `spec` for `server/discover` (confined, it works on a view of its
/// command's package cache, as a session's child does).
pub async fn stdio_verdict(spec: &StdioSpec, timeout: Duration) -> Era {
    let Ok((mut command, holds)) = spec.command() else {
        return Era::Legacy;
    };
    let Ok(mut child) = command.stderr(Stdio::null()).spawn() else {
        return Era::Legacy;
    };
    let verdict = match (child.stdin.take(), child.stdout.take()) {
        (Some(stdin), Some(stdout)) => {
            let asked = ask(stdin, stdout, spec.max_line_bytes);
            tokio::time::timeout(timeout, asked)
                .await
                .unwrap_or(Era::Legacy)
        }
        _ => Era::Legacy,
    };
    let _ = super::stdio::terminate(&mut child, Duration::ZERO).await;
    holds.release(Duration::from_secs(1)).await;
    verdict
}

async fn ask(
    mut stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
    max_line_bytes: usize,
) -> Era {
    if stdin
        .write_all(format!("{}\n", discover()).as_bytes())
        .await
        .is_err()
    {
        return Era::Legacy;
    }
    let mut lines = LineReader::new(BufReader::new(stdout), max_line_bytes);
    let Some(discovered) = answer_to(&mut lines, PROBE_ID).await else {
        return Era::Legacy; // it ended without answering
    };
    if !speaks_modern(&discovered) {
        return Era::Legacy;
    }
    let offered = format!("{}\n", legacy_initialize());
    if stdin.write_all(offered.as_bytes()).await.is_err() {
        return Era::Modern;
    }
    match answer_to(&mut lines, PROBE_INITIALIZE_ID).await {
        Some(answer) if answer.get("result").is_some() => Era::Legacy,
        _ => Era::Modern,
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
