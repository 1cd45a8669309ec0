//! `mcp-session-proxy health`, the image's HEALTHCHECK: the real binary asking a real proxy,
//! with the Host the proxy allows, and failing (exit 1, the reason on stderr) within its bound
//! when the answer is not a 2xx or does not come.

use std::process::Output;

use crate::harness::{spawn_proxy, within, DEMO};
use tokio::process::Command;

/// `health` with these arguments (and `MCP_PROXY_ALLOWED_HOSTS` as given), run to its end.
async fn health(args: &[&str], allowed_hosts: Option<&str>) -> Output {
    let mut command = Command::new(DEMO);
    command.arg("health").args(args).kill_on_drop(true);
    match allowed_hosts {
        Some(hosts) => command.env("MCP_PROXY_ALLOWED_HOSTS", hosts),
        None => command.env_remove("MCP_PROXY_ALLOWED_HOSTS"),
    };
    within("the health command", command.output())
        .await
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn a_live_proxy_is_healthy_and_a_refused_host_is_not() {
    let (mut proxy, addr, _logs, _seen) = spawn_proxy(&["--listen", "127.0.0.1:0"]).await;
    let url = format!("http://{addr}/healthz");
    let ok = health(&["--url", &url], None).await;
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    assert_eq!(text(&ok.stdout), "200 OK ok\n");
    let ready = health(&["--url", &format!("http://{addr}/readyz")], None).await;
    assert!(ready.status.success(), "{}", text(&ready.stderr));
    assert_eq!(text(&ready.stdout), "200 OK ready\n");

    // A loopback listener serves loopback names only: a Host it does not know is refused,
    // and the command says so.
    let refused = health(&["--url", &url, "--host", "mcp.example.com"], None).await;
    assert_eq!(refused.status.code(), Some(1));
    let said = text(&refused.stderr);
    assert!(
        said.starts_with("mcp-session-proxy: ") && said.contains(&url) && said.contains("403"),
        "{said}"
    );
    proxy.kill().await.unwrap();
}

#[tokio::test]
async fn the_host_sent_is_the_first_the_proxy_allows() {
    let hosts = "mcp.example.com,localhost";
    let (mut proxy, addr, _logs, _seen) =
        spawn_proxy(&["--listen", "127.0.0.1:0", "--allowed-host", hosts]).await;
    let url = format!("http://{addr}/healthz");
    // Its own address is not among the allowed names.
    let refused = health(&["--url", &url], None).await;
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stdout));
    // In the proxy's environment, the command sends the first allowed name.
    let ok = health(&["--url", &url], Some(hosts)).await;
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let any = health(&["--url", &url], Some("*")).await;
    assert_eq!(any.status.code(), Some(1), "`*` names no host to send");
    proxy.kill().await.unwrap();
}

#[tokio::test]
async fn no_answer_is_a_failure_within_the_timeout() {
    // Accepts the connection and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/healthz", silent.local_addr().unwrap());
    let started = std::time::Instant::now();
    let timed_out = health(&["--url", &url, "--timeout", "300ms"], None).await;
    assert_eq!(timed_out.status.code(), Some(1));
    assert!(
        text(&timed_out.stderr).contains("no answer within 300ms"),
        "{}",
        text(&timed_out.stderr)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    drop(silent);

    // Nothing listening: refused at once.
    let closed = health(&["--url", &url], None).await;
    assert_eq!(closed.status.code(), Some(1));
    assert!(text(&closed.stderr).contains("no answer"));

    let https = health(&["--url", "https://127.0.0.1:1/healthz"], None).await;
    assert_eq!(https.status.code(), Some(1));
    assert!(text(&https.stderr).contains("plain http://"));
}
