//! The real binary, as an operator runs it: JSON logs with a span per session, and SIGTERM
//! (streams told when to reconnect and closed, the server released, a clean exit in time), on
//! the multi-threaded runtime and on a single thread.

mod common;

use std::process::Stdio;

use common::{listening_address, within, Client, DEMO};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Children of `parent`, from /proc.
fn children_of(parent: u32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after_name = stat.rsplit_once(')')?.1.to_owned();
                    after_name.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

#[tokio::test]
async fn sigterm_closes_streams_with_retry_releases_servers_and_exits_cleanly() {
    serve_then_sigterm("0").await;
}

#[tokio::test]
async fn a_single_threaded_proxy_serves_and_stops_the_same_way() {
    serve_then_sigterm("1").await;
}

async fn serve_then_sigterm(workers: &str) {
    let mut proxy = Command::new(DEMO)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--shutdown-timeout",
            "5s",
            "--workers",
            workers,
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the proxy starts");
    let pid = proxy.id().unwrap();
    let mut logs = BufReader::new(proxy.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let addr = listening_address(&mut logs, &mut seen).await;

    let mut client = Client::new(addr);
    client.initialize("2025-11-25").await;
    let session = client.session.clone().unwrap();
    let mut stream = client.get(None).await;
    assert_eq!(
        within("priming", stream.next_event()).await.unwrap().data,
        ""
    );
    let servers = children_of(pid);
    assert_eq!(servers.len(), 1, "one demo server for the one session");

    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
    let mut rest = Vec::new();
    while let Some(chunk) = within("the stream to close", stream.next_chunk()).await {
        rest.extend_from_slice(&chunk);
    }
    assert!(
        String::from_utf8_lossy(&rest).contains("retry: 1000\n\n"),
        "told when to reconnect: {:?}",
        String::from_utf8_lossy(&rest)
    );
    let status = within("the proxy to exit", proxy.wait()).await.unwrap();
    assert!(status.success(), "{status}");
    assert!(
        kill(Pid::from_raw(servers[0]), None).is_err(),
        "the demo server is gone"
    );

    while let Ok(Some(line)) = logs.next_line().await {
        seen.push(serde_json::from_str(&line).expect("JSON logs"));
    }
    assert!(
        seen.iter()
            .any(|entry| entry["span"]["name"] == "session" && entry["span"]["id"] == session),
        "a log line inside the session's span names its id"
    );
}

#[tokio::test]
async fn a_bad_configuration_stops_start_up_with_the_key_and_line() {
    let dir = std::env::temp_dir().join(format!("mcp-proxy-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:0\"\n\n[session]\nwindow_evnts = 5\n",
    )
    .unwrap();
    let output = Command::new(DEMO)
        .arg("--config")
        .arg(&file)
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!output.status.success());
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(
        message.contains("window_evnts") && message.contains("line 4"),
        "{message}"
    );
}
