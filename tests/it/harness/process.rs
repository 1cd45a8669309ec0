//! Children the tests start: the proxy's own binary (once its log says where it listens),
//! commands that announce themselves on stdout, the pinned Python interpreter, and what
//! /proc says of their memory.

use std::net::SocketAddr;

use serde_json::Value;

use super::{within, DEMO};

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

/// A figure of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
pub fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// A port on 127.0.0.1 that nothing listens on (as of this call).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The binary run with `args` and these variables added to its environment, to its exit,
/// which must be a failure (the start refused): its stderr.
pub async fn refused_start<S: AsRef<std::ffi::OsStr>>(args: &[S], env: &[(&str, &str)]) -> String {
    refused_start_command(tokio::process::Command::new(DEMO), args, env).await
}

/// [`refused_start`], started by `command` (the binary under a wrapper).
pub async fn refused_start_command<S: AsRef<std::ffi::OsStr>>(
    mut command: tokio::process::Command,
    args: &[S],
    env: &[(&str, &str)],
) -> String {
    let output = within(
        "the proxy to refuse to start",
        command
            .args(args)
            .envs(env.iter().copied())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{stderr}");
    stderr
}

/// The repository's root, where Cargo.toml is.
pub fn repo_root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
