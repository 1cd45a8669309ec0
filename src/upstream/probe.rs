//! `upstream.protocol = "auto"`: which revision a server speaks, asked once at start with
//! `server/discover`. A stdio server is asked in a child of its own, thrown away after: some
//! legacy stdio servers exit on any request before `initialize`; an HTTP server with one POST
//! carrying the 2026-07-28 headers. No answer, an error, or an exit means a legacy server.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tracing::info;

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full};

use super::http_client::{self, HttpSpec};
use super::stdio::StdioSpec;
use super::UpstreamSpec;
use crate::era::{Era, CAPABILITIES_KEY, MODERN_VERSION, VERSION_KEY};

/// The id of the probe's `server/discover`.
const PROBE_ID: &str = "mcp-session-proxy/probe";

/// `spec` with its revision settled: probed when it is `auto`.
pub async fn settle(mut spec: UpstreamSpec, timeout: Duration) -> UpstreamSpec {
    let server = spec.display();
    let protocol = match &mut spec {
        UpstreamSpec::Stdio(stdio) | UpstreamSpec::SharedStdio(stdio)
            if stdio.protocol == Era::Auto =>
        {
            stdio.protocol = stdio_verdict(stdio, timeout).await;
            stdio.protocol
        }
        UpstreamSpec::Http(http) if http.protocol == Era::Auto => {
            http.protocol = http_verdict(http).await;
            http.protocol
        }
        _ => return spec,
    };
    info!(%server, ?protocol, "probed the server's protocol");
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
        .header("mcp-method", "server/discover")
        .body(Full::new(Bytes::from(discover().to_string())));
    let Ok(request) = request else {
        return Era::Legacy;
    };
    let client = http_client::client();
    let Ok(response) = http_client::send(&client, spec, request).await else {
        return Era::Legacy;
    };
    let sse = http_client::is_event_stream(&response);
    let Ok(Ok(body)) =
        tokio::time::timeout(spec.request_timeout, response.into_body().collect()).await
    else {
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
    match messages.iter().any(speaks_modern) {
        true => Era::Modern,
        false => Era::Legacy,
    }
}

fn discover() -> Value {
    json!({ "jsonrpc": "2.0", "id": PROBE_ID, "method": "server/discover",
        "params": { "_meta": { VERSION_KEY: MODERN_VERSION, CAPABILITIES_KEY: {} } } })
}

/// A `server/discover` answer that lists 2026-07-28.
fn speaks_modern(message: &Value) -> bool {
    message["id"] == PROBE_ID
        && message["result"]["supportedVersions"]
            .as_array()
            .is_some_and(|versions| versions.iter().any(|v| v == MODERN_VERSION))
}

/// Asks a throwaway child of `spec` for `server/discover`.
pub async fn stdio_verdict(spec: &StdioSpec, timeout: Duration) -> Era {
    let Ok(mut child) = spec.command().stderr(Stdio::null()).spawn() else {
        return Era::Legacy;
    };
    let verdict = match (child.stdin.take(), child.stdout.take()) {
        (Some(stdin), Some(stdout)) => tokio::time::timeout(timeout, ask(stdin, stdout))
            .await
            .unwrap_or(Era::Legacy),
        _ => Era::Legacy,
    };
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    verdict
}

async fn ask(mut stdin: tokio::process::ChildStdin, stdout: tokio::process::ChildStdout) -> Era {
    if stdin
        .write_all(format!("{}\n", discover()).as_bytes())
        .await
        .is_err()
    {
        return Era::Legacy;
    }
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if message["id"] != PROBE_ID {
            continue;
        }
        return match speaks_modern(&message) {
            true => Era::Modern,
            false => Era::Legacy,
        };
    }
    // It ended without answering.
    Era::Legacy
}
