//! The warming of a confined stdio server's package cache, once at start, before any session:
//! one child of the proxy's own is started on the cache itself (the only child that ever
//! writes it), sent a legacy `initialize` (by the time the server reads it, `npx` or `uvx` have
//! fetched it), and ended at its answer, its exit, or the request timeout. The cache is then
//! sealed: read-only to every session's child, each of which works on a view of its own, and
//! given back to the proxy where the child ran as another user. A cache that cannot be lent or
//! sealed, or that something of the warming child may still write, is thrown away.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tracing::{info, warn};

use super::spec::Role;
use super::StdioSpec;
use crate::upstream::lines::{Line, LineReader};
use crate::upstream::sandbox::{remove_tree, CacheDir};
use crate::wire::methods;

/// The id of the warming child's `initialize`.
const WARM_UP_ID: &str = "mcp-session-proxy/warm-up";

/// Warms the package cache of `spec`'s command when it is confined and `warm_cache` is on,
/// waiting at most `timeout` for the server; what went wrong is logged, and sessions go on
/// with the cache as it is.
pub async fn warm_cache(spec: &StdioSpec, timeout: Duration) {
    let Some(sandbox) = spec.sandbox.as_ref().filter(|sandbox| sandbox.warm_cache) else {
        return;
    };
    let command = spec.display();
    let started = Instant::now();
    let cache = match CacheDir::of(&sandbox.cache, &command) {
        Ok(cache) => cache,
        Err(error) => return warn!(%command, %error, "cannot warm the package cache"),
    };
    match run_warming_child(spec, &cache, timeout).await {
        Ok(()) => info!(%command, cache = %cache.path().display(),
            took_ms = started.elapsed().as_millis() as u64, "warmed the package cache"),
        Err(error) => warn!(%command, cache = %cache.path().display(), %error,
            "the package cache was not warmed: sessions' children start from it as it is"),
    }
}

/// Why a cache was not warmed.
#[derive(Debug, thiserror::Error)]
enum WarmUpError {
    #[error("cannot start the server: {0}")]
    Start(std::io::Error),
    #[error("processes of the child's user could not be ended")]
    Running,
    #[error("cannot lend the cache to the child's user (thrown away, warmed anew next time): {0}")]
    Lend(nix::Error),
    #[error("cannot seal the cache (thrown away, warmed anew next time): {0}")]
    Seal(nix::Error),
    #[error("the server did not answer within {0:?}{1}")]
    NoAnswer(Duration, String),
    #[error("the server ended without answering{0}")]
    Ended(String),
}

async fn run_warming_child(
    spec: &StdioSpec,
    cache: &CacheDir,
    timeout: Duration,
) -> Result<(), WarmUpError> {
    let (mut command, holds) = spec
        .command_as(Role::CacheWarmer)
        .map_err(WarmUpError::Start)?;
    let grace = spec.shutdown_grace.max(Duration::from_secs(1));
    // A user of the range gets the cache with nothing else running as it.
    if let Some((uid, gid)) = holds.range_user() {
        if !crate::upstream::sandbox::end_every_process_of(uid, gid, grace).await {
            return Err(WarmUpError::Running);
        }
    }
    let owner = holds.owner();
    if let Some(owner) = owner {
        let lent = cache.clone();
        if let Err(error) = blocking(move || lent.lend(owner)).await {
            discard(cache).await;
            return Err(WarmUpError::Lend(error));
        }
    }
    let answered = match command.stderr(Stdio::piped()).spawn() {
        Ok(mut child) => {
            let tail = Arc::new(Mutex::new(VecDeque::new()));
            if let Some(stderr) = child.stderr.take() {
                let dropped = spec.stderr_dropped.clone();
                tokio::spawn(super::stderr::read(stderr, tail.clone(), dropped));
            }
            let asked = match (child.stdin.take(), child.stdout.take()) {
                (Some(stdin), Some(stdout)) => {
                    let answer = ask(stdin, stdout, spec.max_line_bytes);
                    tokio::time::timeout(timeout, answer).await
                }
                _ => Ok(false),
            };
            let _ = super::terminate(&mut child, spec.shutdown_grace).await;
            let told = stderr_tail(&tail);
            match asked {
                Ok(true) => Ok(()),
                Ok(false) => Err(WarmUpError::Ended(told)),
                Err(_) => Err(WarmUpError::NoAnswer(timeout, told)),
            }
        }
        Err(error) => Err(WarmUpError::Start(error)),
    };
    if !holds.release(grace).await {
        // What the warming child left may still write the cache: it is not used.
        discard(cache).await;
        return Err(WarmUpError::Running);
    }
    let sealed = cache.clone();
    if let Err(error) = blocking(move || sealed.seal(owner)).await {
        discard(cache).await;
        return Err(WarmUpError::Seal(error));
    }
    answered
}

/// Throws a cache away (what the next start warms anew).
async fn discard(cache: &CacheDir) {
    let path = cache.path().to_path_buf();
    let removed = tokio::task::spawn_blocking(move || remove_tree(&path)).await;
    if !matches!(removed, Ok(Ok(()))) {
        warn!(cache = %cache.path().display(), "cannot throw the package cache away");
    }
}

/// Sends `initialize` and reads until its answer (whether it came).
async fn ask(
    mut stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
    max_line_bytes: usize,
) -> bool {
    let request = format!("{}\n", initialize());
    if stdin.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut lines = LineReader::new(BufReader::new(stdout), max_line_bytes);
    while let Ok(Some(line)) = lines.next_line().await {
        let Line::Text(line) = line else { continue };
        if serde_json::from_slice::<Value>(&line).is_ok_and(|message| message["id"] == WARM_UP_ID) {
            return true;
        }
    }
    false
}

fn initialize() -> Value {
    json!({ "jsonrpc": "2.0", "id": WARM_UP_ID, "method": methods::INITIALIZE,
        "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": { "name": "mcp-session-proxy", "version": env!("CARGO_PKG_VERSION") } } })
}

/// The last lines the child wrote to stderr, for the log: `: line | line`, or nothing.
fn stderr_tail(tail: &Mutex<VecDeque<String>>) -> String {
    let tail = tail.lock().unwrap_or_else(|e| e.into_inner());
    match tail.is_empty() {
        true => String::new(),
        false => format!(": {}", Vec::from(tail.clone()).join(" | ")),
    }
}

async fn blocking(work: impl FnOnce() -> nix::Result<()> + Send + 'static) -> nix::Result<()> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or(Err(nix::errno::Errno::EINTR))
}
