//! Stdio children confined by the sandbox (`--sandbox`): a real child that tries what a
//! confined server must not do (`tests/servers/escape.py`) and reports what the system said:
//! ptrace of its parent, a new namespace, a TCP connection with `--sandbox-network none` (and
//! the same connection without it), memory and open files past their limits. The proxy and the
//! session go on after each refusal. And the demo server runs confined as it is.

use serde_json::json;

use crate::harness::{spawn_proxy, Client};

/// The probing server's command line.
fn escape() -> String {
    format!(
        "python3 {}",
        shell_words::quote(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/servers/escape.py"
        ))
    )
}

/// A session with the probing server, behind a proxy started with `flags`.
async fn confined(flags: &[&str]) -> (tokio::process::Child, Client) {
    let server = escape();
    let mut args = vec!["--listen", "127.0.0.1:0", "--stdio", &server];
    args.extend(flags);
    let (proxy, addr, _logs, _) = spawn_proxy(&args).await;
    let mut client = Client::new(addr);
    client.initialize("2025-11-25").await;
    (proxy, client)
}

#[tokio::test]
async fn a_confined_child_may_not_trace_its_parent_nor_make_a_namespace() {
    let (_proxy, mut client) = confined(&["--sandbox"]).await;
    assert_eq!(client.call_tool("ptrace", json!({})).await, "EPERM");
    assert_eq!(client.call_tool("unshare", json!({})).await, "EPERM");
    // The session goes on.
    assert_eq!(
        client.call_tool("open_files", json!({ "count": 3 })).await,
        "done"
    );
}

#[tokio::test]
async fn with_no_network_not_even_loopback_is_reached() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_proxy, mut client) = confined(&["--sandbox", "--sandbox-network", "none"]).await;
    assert_eq!(
        client.call_tool("connect", json!({ "port": port })).await,
        "EPERM"
    );
    // Allowed, the same connection is made.
    let (_proxy, mut allowed) = confined(&["--sandbox"]).await;
    assert_eq!(
        allowed.call_tool("connect", json!({ "port": port })).await,
        "done"
    );
}

#[tokio::test]
async fn a_child_past_its_limits_fails_and_its_session_goes_on() {
    let (_proxy, mut client) = confined(&[
        "--sandbox",
        "--sandbox-memory",
        "256MiB",
        "--sandbox-open-files",
        "64",
    ])
    .await;
    assert_eq!(
        client.call_tool("allocate", json!({ "mib": 512 })).await,
        "ENOMEM"
    );
    assert_eq!(
        client
            .call_tool("open_files", json!({ "count": 100 }))
            .await,
        "EMFILE"
    );
    assert_eq!(
        client.call_tool("allocate", json!({ "mib": 16 })).await,
        "done"
    );
}

#[tokio::test]
async fn the_demo_server_runs_confined() {
    let (_proxy, addr, _logs, _) = spawn_proxy(&[
        "--listen",
        "127.0.0.1:0",
        "--sandbox",
        "--sandbox-network",
        "none",
        "--sandbox-memory",
        "1GiB",
    ])
    .await;
    let mut client = Client::new(addr);
    client.initialize("2025-11-25").await;
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    assert_eq!(
        client
            .call_tool("echo", json!({ "text": "confined" }))
            .await,
        "confined"
    );
}
