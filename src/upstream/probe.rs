//! `upstream.protocol = "auto"`: which revision a server speaks, asked once at start with
//! `server/discover`. A stdio server is asked in a child of its own, thrown away after: some
//! legacy stdio servers exit on any request before `initialize`. No answer, an error, or an
//! exit means a legacy server.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tracing::info;

use super::stdio::StdioSpec;
use super::UpstreamSpec;
use crate::era::{Era, CAPABILITIES_KEY, MODERN_VERSION, VERSION_KEY};

/// The id of the probe's `server/discover`.
const PROBE_ID: &str = "mcp-session-proxy/probe";

/// `spec` with its revision settled: probed when it is `auto`. Only stdio servers are probed
/// so far; other kinds are taken as legacy.
pub async fn settle(mut spec: UpstreamSpec, timeout: Duration) -> UpstreamSpec {
    if let UpstreamSpec::Stdio(stdio) | UpstreamSpec::SharedStdio(stdio) = &mut spec {
        if stdio.protocol == Era::Auto {
            stdio.protocol = stdio_verdict(stdio, timeout).await;
            info!(server = %stdio.display(), protocol = ?stdio.protocol, "probed the server's protocol");
        }
    }
    spec
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
    let discover = json!({ "jsonrpc": "2.0", "id": PROBE_ID, "method": "server/discover",
        "params": { "_meta": { VERSION_KEY: MODERN_VERSION, CAPABILITIES_KEY: {} } } });
    if stdin
        .write_all(format!("{discover}\n").as_bytes())
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
        let speaks_modern = message["result"]["supportedVersions"]
            .as_array()
            .is_some_and(|versions| versions.iter().any(|v| v == MODERN_VERSION));
        return match speaks_modern {
            true => Era::Modern,
            false => Era::Legacy,
        };
    }
    // It ended without answering.
    Era::Legacy
}
