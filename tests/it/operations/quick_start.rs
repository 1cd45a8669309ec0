//! What a new user does first: `cargo run` picks the proxy, and a client written for the
//! reference servers gets sensible answers from the bundled demo.

use crate::harness::{stdout_of, Proxy};
use serde_json::json;

/// `cargo run` (the quick start) picks the binary named by `default-run`; without it, a package
/// with two binaries makes `cargo run` fail. Asked of cargo itself, without building.
#[tokio::test]
async fn cargo_run_starts_the_proxy_without_naming_a_binary() {
    let stdout = stdout_of(
        "cargo metadata",
        tokio::process::Command::new(env!("CARGO"))
            .args([
                "metadata",
                "--no-deps",
                "--offline",
                "--format-version",
                "1",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR")),
    )
    .await;
    let metadata: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    let package = &metadata["packages"][0];
    let binaries = package["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"][0] == "bin")
        .count();
    assert!(binaries > 1, "with one binary there is nothing to choose");
    assert_eq!(package["default_run"], "mcp-session-proxy");
}

#[tokio::test]
async fn the_demo_echo_takes_text_or_message_and_refuses_unknown_arguments() {
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    assert_eq!(
        client.call_tool("echo", json!({ "text": "one" })).await,
        "one"
    );
    assert_eq!(
        client.call_tool("echo", json!({ "message": "two" })).await,
        "two",
        "the reference servers' argument name"
    );
    let wrong = client
        .request(
            "tools/call",
            json!({ "name": "echo", "arguments": { "mesage": "typo" } }),
        )
        .await;
    assert_eq!(wrong["error"]["code"], -32602, "{wrong}");
    let text = wrong["error"]["message"].as_str().unwrap();
    assert!(
        text.contains("mesage") && text.contains("text, message"),
        "{text}"
    );
    let nothing = client
        .request("tools/call", json!({ "name": "echo", "arguments": {} }))
        .await;
    assert_eq!(nothing["error"]["code"], -32602, "{nothing}");
    let extra = client
        .request(
            "tools/call",
            json!({ "name": "add", "arguments": { "a": 1, "b": 2, "c": 3 } }),
        )
        .await;
    assert_eq!(extra["error"]["code"], -32602, "{extra}");
    proxy.stop().await;
}
