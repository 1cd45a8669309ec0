//! A real 2026-07-28 server nobody here wrote (tests/node/modern_server.mjs, on the official
//! TypeScript server package `@modelcontextprotocol/server` 2.x with legacy requests rejected)
//! behind the proxy over Streamable HTTP, and two real legacy-era clients through it: the
//! TypeScript SDK 1.32.2 client and the Python `mcp` client in legacy mode. Tools, progress, an
//! elicitation through input_required, a subscription receiving an update, and (with
//! `http.sse_close_after`) a call whose stream the proxy cuts, resumed with nothing lost.

use std::time::Duration;

use crate::harness::Proxy;
use hyper::StatusCode;
use mcp_session_proxy::wire::era::Era;
use serde_json::{json, Value};
use tokio::process::{Child, Command};

const NOTE: &str = "note://current";

/// tests/node/modern_server.mjs on the pinned Node 22, once it printed its URL: the child
/// (killed when dropped; its stdin, held open by the handle, is all that keeps it running
/// otherwise) and that URL.
async fn typescript_server() -> (Child, String) {
    let dir = crate::harness::node_dir();
    assert!(
        dir.join("node_modules/@modelcontextprotocol/server")
            .is_dir(),
        "@modelcontextprotocol/server is not installed: run scripts/test (`npm ci` in tests/node)"
    );
    let (child, url, _) = crate::harness::spawn_announcing(
        "the TypeScript server's URL",
        Command::new(dir.join("node_modules/.bin/node"))
            .arg(dir.join("modern_server.mjs"))
            .current_dir(&dir)
            .stdin(std::process::Stdio::piped()),
    )
    .await;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (child, url)
}

/// A proxy in front of the server at `url`, which speaks 2026-07-28; with `cut`, every SSE stream
/// it serves is closed after 400 ms (the client must resume it with Last-Event-ID).
async fn proxy_in_front_of(url: &str, cut: bool) -> Proxy {
    Proxy::start_with(|config| {
        config.upstream.stdio = None;
        config.upstream.http = Some(url.to_owned());
        config.upstream.protocol = Era::Modern;
        if cut {
            config.http.sse_close_after = Duration::from_millis(400);
            config.http.json_wait = Duration::from_millis(100);
        }
    })
    .await
}

/// What both clients must have seen, whatever the proxy's streams did.
fn assert_the_common_report(report: &Value, name: &str) {
    assert_eq!(
        report["tools"],
        json!(["echo", "greet", "progress", "slow", "touch"]),
        "{report}"
    );
    let progress: Vec<f64> = serde_json::from_value(report["progress"].clone()).unwrap();
    assert_eq!(
        progress,
        [1.0, 2.0, 3.0],
        "each progress, in order: {report}"
    );
    assert_eq!(report["progressed"], "done after 3 steps", "{report}");
    assert_eq!(
        report["asked"],
        json!(["What is your name?"]),
        "the elicitation reached the client once: {report}"
    );
    assert_eq!(report["elicited"], format!("Hello, {name}!"), "{report}");
    assert_eq!(
        report["updated"], NOTE,
        "the update reached the client: {report}"
    );
    assert_eq!(report["duplicates"], 0, "no answer came twice: {report}");
    assert_eq!(
        report["errors"],
        json!([]),
        "the client reported no error: {report}"
    );
}

async fn typescript_client(proxy: &Proxy, args: &[&str]) -> Value {
    let url = format!("http://{}/mcp", proxy.addr());
    crate::harness::pinned_node_client("legacy_client_modern_server.mjs", &url, args).await
}

async fn python_client(proxy: &Proxy, args: &[&str]) -> Value {
    let mut command = crate::harness::python_script("legacy_client_modern_server.py");
    command
        .arg(format!("http://{}/mcp", proxy.addr()))
        .args(args);
    let stdout = crate::harness::stdout_of("the Python client", &mut command).await;
    serde_json::from_slice(&stdout)
        .unwrap_or_else(|e| panic!("a JSON report ({e}): {}", String::from_utf8_lossy(&stdout)))
}

#[tokio::test]
async fn the_typescript_server_refuses_a_legacy_client_of_its_own() {
    let (_server, url) = typescript_server().await;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let client = crate::harness::Client::new(addr);
    let refused = client
        .post(
            &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": { "name": "legacy", "version": "1" } } }),
        )
        .await;
    let status = refused.status;
    let body = refused.bytes().await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let refused: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        refused["error"]["data"]["supported"],
        json!(["2026-07-28"]),
        "{refused}"
    );
}

#[tokio::test]
async fn typescript_sdk_client_through_the_proxy_to_a_typescript_2026_07_28_server() {
    let (_server, url) = typescript_server().await;
    let proxy = proxy_in_front_of(&url, false).await;
    let report = typescript_client(&proxy, &[]).await;
    assert_the_common_report(&report, "Ada");
    assert_eq!(report["echoed"], "through the proxy", "{report}");
    assert_eq!(report["read"], "changed", "{report}");
    proxy.assert_one_session_ended_by_delete();
    proxy.stop().await;
}

#[tokio::test]
async fn typescript_sdk_client_resumes_a_cut_stream_from_a_typescript_2026_07_28_server() {
    let (_server, url) = typescript_server().await;
    let proxy = proxy_in_front_of(&url, true).await;
    let report = typescript_client(&proxy, &["resume"]).await;
    assert_the_common_report(&report, "Ada");
    assert_eq!(report["resumed"], "slept 1500 ms", "{report}");
    assert_eq!(
        report["resumedTimes"], 1,
        "the cut call's answer came once: {report}"
    );
    assert!(
        report["resumedTheCutCall"].as_u64().unwrap() >= 1,
        "the client resumed the cut call's stream with Last-Event-ID: {report}"
    );
    assert!(proxy.metric("mcp_proxy_replays_total") >= 1);
    proxy.stop().await;
}

#[tokio::test]
async fn python_client_in_legacy_mode_through_the_proxy_to_a_typescript_2026_07_28_server() {
    let (_server, url) = typescript_server().await;
    let proxy = proxy_in_front_of(&url, false).await;
    let report = python_client(&proxy, &[]).await;
    assert_eq!(
        report["version"], "2025-11-25",
        "a legacy session: {report}"
    );
    assert_eq!(report["server"], "typescript-modern-server", "{report}");
    assert_the_common_report(&report, "Grace");
    assert_eq!(report["echoed"], "from python", "{report}");
    assert_eq!(report["read"], "changed by python", "{report}");
    assert_eq!(
        proxy.metric("mcp_proxy_sessions_open"),
        0,
        "closed by DELETE"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn python_client_in_legacy_mode_resumes_a_cut_stream_from_a_typescript_2026_07_28_server() {
    let (_server, url) = typescript_server().await;
    let proxy = proxy_in_front_of(&url, true).await;
    let report = python_client(&proxy, &["resume"]).await;
    assert_the_common_report(&report, "Grace");
    assert_eq!(report["resumed"], "slept 1500 ms", "{report}");
    assert!(
        report["resumptions"].as_u64().unwrap() >= 1,
        "the client resumed with Last-Event-ID: {report}"
    );
    assert!(proxy.metric("mcp_proxy_replays_total") >= 1);
    proxy.stop().await;
}

/// A TCP relay to `upstream` that holds every chunk carrying a `subscriptions/listen` back by
/// `delay` (a server farther away, or slower to take a listen, than to take a call); returns
/// the relay's own URL.
async fn relay_holding_back_listens(upstream: &str, delay: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let target = upstream
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                continue;
            };
            let (mut from_client, mut to_client) = inbound.into_split();
            let (mut from_server, mut to_server) = outbound.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
            });
            tokio::spawn(async move {
                let mut buffer = vec![0; 64 * 1024];
                while let Ok(read @ 1..) = from_client.read(&mut buffer).await {
                    let chunk = &buffer[..read];
                    if chunk
                        .windows(b"subscriptions/listen".len())
                        .any(|w| w == b"subscriptions/listen")
                    {
                        tokio::time::sleep(delay).await;
                    }
                    if to_server.write_all(chunk).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    url
}

/// A subscribe is answered once the server acknowledged the listen it needs: over HTTP the
/// listen and the client's next call travel on different connections, so a change the client
/// causes right after its subscribe must not reach the server before the listen does. The relay
/// delays every listen by 300 ms to make that race certain.
#[tokio::test]
async fn an_update_right_after_a_subscribe_is_not_lost_when_the_listen_is_slow() {
    let (_server, url) = typescript_server().await;
    let relay = relay_holding_back_listens(&url, Duration::from_millis(300)).await;
    let proxy = proxy_in_front_of(&relay, false).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let mut stream = client.get(None).await;
    assert_eq!(stream.status, StatusCode::OK);
    let subscribed = client
        .request("resources/subscribe", json!({ "uri": NOTE }))
        .await;
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    assert_eq!(
        client
            .call_tool("touch", json!({ "text": "right after" }))
            .await,
        "version 1"
    );
    let updated = stream
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(updated["params"]["uri"], NOTE, "{updated}");
    proxy.stop().await;
}
