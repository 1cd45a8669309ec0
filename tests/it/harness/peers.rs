//! Peers of the proxy: the npm packages and clients in tests/node, the demo's 2026-07-28
//! mode over HTTP, and a listener that records what it was sent.

use std::net::SocketAddr;

use tokio::net::TcpStream;

use super::{free_port, spawn_announcing, until, within, DEMO};

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
    let port = free_port();
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
    node_client("node", "sdk_client.mjs", url, args, &[]).await
}

/// [`sdk_client`] with variables of its own in its environment (`NODE_EXTRA_CA_CERTS`).
pub async fn sdk_client_with_env(
    url: &str,
    args: &[&str],
    env: &[(&str, &std::path::Path)],
) -> serde_json::Value {
    node_client("node", "sdk_client.mjs", url, args, env).await
}

/// Runs `script` (in tests/node) with the pinned Node 22 against `url`, returning its report.
pub async fn pinned_node_client(script: &str, url: &str, args: &[&str]) -> serde_json::Value {
    let node = node_dir().join("node_modules/.bin/node");
    node_client(&node.to_string_lossy(), script, url, args, &[]).await
}

async fn node_client(
    node_binary: &str,
    script: &str,
    url: &str,
    args: &[&str],
    env: &[(&str, &std::path::Path)],
) -> serde_json::Value {
    let node = node_dir();
    let run = tokio::process::Command::new(node_binary)
        .arg(node.join(script))
        .arg(url)
        .args(args)
        .envs(env.iter().copied())
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
