//! The official clients through real balancers: nginx and HAProxy (Debian packages, installed by
//! scripts/test) running the shipped config/nginx.conf and config/haproxy.cfg, round-robin with
//! no affinity, in front of three replicas sharing a real `redis-server`. Every request may
//! land on any replica: the TypeScript SDK 1.x lists and calls tools, follows progress, gets a
//! subscription's update and resumes streams the replicas close mid-call (Last-Event-ID); the
//! Python SDK initializes, lists, calls and follows progress; Node's WebSocket starts a
//! protocol-level session and resumes it on a new connection. The replicas' figures show that
//! the requests spread over all three and that sessions crossed them. A rolling restart behind
//! nginx (SIGTERM to each replica in turn, started again once it exited) fails no call, also
//! when nginx held idle connections to the replica as it stopped. The TLS forms of both,
//! config/nginx-tls.conf and config/haproxy-tls.cfg, serve the same clients over https:// and
//! wss:// and re-encrypt to replicas whose listeners speak TLS, verified by the name of the
//! certificate they share (which the replicas' hop verifies too).

use std::net::SocketAddr;

use crate::harness::balancer::{Balancer, Kind};
use crate::harness::cluster::{until_key, Redis, Replica};
use crate::harness::tls::Certificates;
use crate::harness::{modern_request, python_script, stdout_of, Client};
use serde_json::{json, Value};

/// Replicas on loopback as config/behind-a-balancer.toml has them behind a balancer: the Host
/// names they accept are the one clients dial (127.0.0.1) and the one HAProxy's health checks
/// send (mcp.example.com); streams close after 500 ms, so clients resume them (most often on
/// another replica), and answers come as streams after 100 ms.
const REPLICA: &[&str] = &[
    "--allowed-host",
    "127.0.0.1",
    "--allowed-host",
    "mcp.example.com",
    "--sse-close-after",
    "500ms",
    "--json-wait",
    "100ms",
];

#[tokio::test]
async fn official_clients_through_nginx_are_served_by_every_replica() {
    clients_through(Kind::Nginx).await;
}

#[tokio::test]
async fn official_clients_through_haproxy_are_served_by_every_replica() {
    clients_through(Kind::Haproxy).await;
}

#[tokio::test]
async fn official_clients_through_nginx_over_tls_are_served_by_every_replica_over_tls() {
    clients_through(Kind::NginxTls).await;
}

#[tokio::test]
async fn official_clients_through_haproxy_over_tls_are_served_by_every_replica_over_tls() {
    clients_through(Kind::HaproxyTls).await;
}

async fn clients_through(kind: Kind) {
    let redis = Redis::start().await;
    let certificates = kind.tls().then(Certificates::make);
    // Over TLS: the certificate the replicas share, naming their Service (mcp-proxy), by which
    // the balancer and the replicas' hop verify it.
    let tls = certificates
        .as_ref()
        .map(Certificates::replica_flags)
        .unwrap_or_default();
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let options = [REPLICA, &tls].concat();
    let ca = certificates.as_ref().map(|made| made.path("ca.pem"));
    let (a, b, c) = tokio::join!(
        Replica::start(&redis, "a", &options),
        Replica::start(&redis, "b", &options),
        Replica::start(&redis, "c", &options),
    );
    let replicas = [a, b, c];
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    let balancer = match &certificates {
        Some(made) => Balancer::start_tls(kind, &addrs, &made.dir).await,
        None => Balancer::start(kind, &addrs).await,
    };
    let url = balancer.url();
    let ws_url = url.replacen("http", "ws", 1);
    // The clients trust the balancer's CA: Node through NODE_EXTRA_CA_CERTS, Python through
    // SSL_CERT_FILE.
    let trusting = |variable| {
        ca.iter()
            .map(|ca| (variable, ca.as_path()))
            .collect::<Vec<_>>()
    };
    let (node_env, python_env) = (trusting("NODE_EXTRA_CA_CERTS"), trusting("SSL_CERT_FILE"));

    let (typescript, python, websocket) = tokio::join!(
        crate::harness::sdk_client_with_env(&url, &["demo", "resume,progress"], &node_env),
        python_client(&url, &python_env),
        websocket_client(&ws_url, &node_env),
    );

    // TypeScript SDK: tools, a subscription's update, progress on a stream it had to resume,
    // and a call whose stream it resumed.
    assert_eq!(typescript["ok"], true, "{typescript}");
    assert_eq!(typescript["echoed"], "hi");
    assert_eq!(typescript["updated"], "demo://counter");
    assert_eq!(typescript["progressText"], "done after 4 steps");
    assert_eq!(typescript["progress"], 4, "every progress notification");
    assert_eq!(typescript["resumed"], "Reconnection test completed");
    let resumptions = typescript["resumptions"].as_array().unwrap();
    assert!(
        resumptions.len() >= 2 && resumptions.iter().all(|status| status == 200),
        "the progress call's stream and test_reconnection's resumed: {typescript}"
    );

    // Python SDK: initialize, tools, a call, progress.
    assert_eq!(python.get("failed"), None, "{python}");
    assert_eq!(python["version"], "2025-11-25");
    let tools = python["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("echo")) && tools.contains(&json!("progress")));
    assert_eq!(python["echoed"], "python legacy");
    assert_eq!(python["progressText"], "done after 3 steps");
    assert_eq!(python["progress"], json!([1.0, 2.0, 3.0]));

    // WebSocket upgrades pass: a session started on one connection, resumed on another.
    assert_eq!(websocket["protocol"], "mcp", "{websocket}");
    assert_eq!(websocket["echo"], "over ws");
    assert_eq!(
        websocket["resumed"],
        json!({ "resumed": true, "catchup": true })
    );
    assert_eq!(websocket["again"], "resumed");

    // Every replica served requests, sessions crossed them (client messages forwarded to their
    // owners, streams resumed from the shared log), nothing was taken over, and no request was
    // answered 404 or 5xx.
    let mut forwarded = 0;
    let mut replays = 0;
    for replica in &replicas {
        let text = metrics(replica, kind.tls()).await;
        let requests = sum(&text, "mcp_proxy_requests_total", |_| true);
        assert!(
            requests > 0,
            "{kind:?} sent replica {} nothing:\n{}",
            replica.name,
            balancer.logs()
        );
        let failed = sum(&text, "mcp_proxy_requests_total", |labels| {
            labels.contains("status=\"404\"") || labels.contains("status=\"5")
        });
        assert_eq!(failed, 0, "replica {} answered:\n{text}", replica.name);
        assert_eq!(
            sum(&text, "mcp_proxy_sessions_taken_over_total", |_| true),
            0
        );
        forwarded += sum(&text, "mcp_proxy_sessions_forwarded_total", |_| true);
        replays += sum(&text, "mcp_proxy_replays_total", |_| true);
    }
    assert!(forwarded > 0, "no message crossed to a session's owner");
    // HAProxy's checks of /readyz (with the Host it sends) found every replica ready all along;
    // nginx met no failed upstream.
    assert_eq!(balancer.complaints(), Vec::<String>::new());
    assert!(
        replays >= 2,
        "the SDK's resumptions were replayed: {replays}"
    );
}

/// A replica showing a certificate of a CA the balancers do not trust (a stolen address, a
/// misissued certificate) is sent nothing: nginx answers 502, HAProxy's checks mark it down
/// and it answers 503; neither forwards the client's request to it.
#[tokio::test]
async fn the_tls_balancers_send_nothing_to_a_replica_they_cannot_verify() {
    let certificates = Certificates::make();
    let redis = Redis::start().await;
    let (cert, key) = (
        certificates.arg("rotated.pem"),
        certificates.arg("rotated-key.pem"),
    );
    let options = [REPLICA, &["--tls-cert", &cert, "--tls-key", &key]].concat();
    let impostor = Replica::start(&redis, "a", &options).await;
    for (kind, status) in [(Kind::NginxTls, "502"), (Kind::HaproxyTls, "503")] {
        let balancer = Balancer::start_tls(kind, &[impostor.addr], &certificates.dir).await;
        let answer = crate::harness::tls::curl_initialize(
            &balancer.url(),
            &["--cacert", &certificates.arg("ca.pem")],
        )
        .await;
        let answer = String::from_utf8_lossy(&answer.stdout);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{kind:?}: {answer}\n{}",
            balancer.logs()
        );
        assert!(!balancer.complaints().is_empty(), "{kind:?} says why");
    }
    let served = metrics(&impostor, true).await;
    assert_eq!(
        sum(&served, "mcp_proxy_requests_total", |_| true),
        0,
        "{served}"
    );
}

/// The header config/behind-a-balancer.toml trusts to name the principal.
const PRINCIPAL: &str = "x-authenticated-user";

/// Replicas run with the shipped config/behind-a-balancer.toml, on loopback: the demo server
/// in place of the example's, the Host clients dial (127.0.0.1) allowed beside the example's,
/// and the balancer (and the authenticating layer) at 127.0.0.1 the trusted proxy.
fn behind_a_balancer() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = root.join("config/behind-a-balancer.toml");
    let demo = format!("{} demo-server", shell_words::quote(crate::harness::DEMO));
    [
        "--config",
        config.to_str().unwrap(),
        "--stdio",
        &demo,
        "--allowed-host",
        "127.0.0.1",
        "--allowed-host",
        "mcp.example.com",
        "--trusted-proxy",
        "127.0.0.1/32",
        // The balancer is trusted on loopback, which the demo's children then must not reach.
        "--sandbox",
        "--sandbox-network",
        "none",
    ]
    .map(String::from)
    .to_vec()
}

#[tokio::test]
async fn a_client_that_names_itself_through_nginx_is_nobody() {
    a_client_that_names_itself_is_nobody(Kind::Nginx).await;
}

#[tokio::test]
async fn a_client_that_names_itself_through_haproxy_is_nobody() {
    a_client_that_names_itself_is_nobody(Kind::Haproxy).await;
}

/// Alice, named by the authenticating layer (here: sent from the replica's own host), has a
/// session and a 2026-07-28 server of her own. Someone who sends the principal header through
/// the shipped balancer, with alice's name and her session id, reaches neither.
async fn a_client_that_names_itself_is_nobody(kind: Kind) {
    let redis = Redis::start().await;
    let args = behind_a_balancer();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (a, b) = tokio::join!(
        Replica::start(&redis, "a", &args),
        Replica::start(&redis, "b", &args),
    );
    let balancer = Balancer::start(kind, &[a.addr, b.addr]).await;

    let mut alice = Client::new(a.addr);
    alice.extra_headers = vec![(PRINCIPAL.into(), "alice".into())];
    alice.initialize("2025-11-25").await;
    assert_eq!(alice.call_tool("counter", json!({})).await, "1");
    assert_eq!(modern_counter(&alice).await, "1");

    let mut mallory = alice.clone();
    mallory.addr = balancer.addr();
    // Round-robin: both replicas get her requests.
    for id in 0..2 {
        let reply = mallory
            .post(&json!({ "jsonrpc": "2.0", "id": id, "method": "ping" }))
            .await;
        assert_eq!(
            reply.status,
            http::StatusCode::NOT_FOUND,
            "{kind:?} let a client name itself:\n{}",
            balancer.logs()
        );
        assert_eq!(mallory.delete().await, http::StatusCode::NOT_FOUND);
        // Her 2026-07-28 requests are a stranger's: a fresh server each, never alice's.
        assert_eq!(modern_counter(&mallory).await, "1");
    }

    assert_eq!(alice.call_tool("counter", json!({})).await, "2");
    assert_eq!(modern_counter(&alice).await, "2");
}

/// A 2026-07-28 `tools/call` of the demo's counter, with `client`'s headers but no session:
/// its principal's server answers.
async fn modern_counter(client: &Client) -> String {
    let params = json!({ "name": "counter", "arguments": {} });
    let reply = client
        .post_modern(&modern_request(1, "tools/call", params, json!({})), &[])
        .await;
    assert_eq!(reply.status, http::StatusCode::OK);
    let answer = reply.response().await;
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned()
}

/// The official Python client (tests/python/bearer_client.py, legacy mode, no token).
async fn python_client(url: &str, env: &[(&str, &std::path::Path)]) -> Value {
    let mut command = python_script("bearer_client.py");
    command.arg(url).arg("legacy").envs(env.iter().copied());
    let stdout = stdout_of("the Python SDK client", &mut command).await;
    serde_json::from_slice(&stdout).expect("a JSON report")
}

/// Node 22's built-in WebSocket (tests/node/ws_client.mjs).
async fn websocket_client(url: &str, env: &[(&str, &std::path::Path)]) -> Value {
    let node = crate::harness::node_dir();
    let mut command = tokio::process::Command::new(node.join("node_modules/.bin/node"));
    command
        .arg(node.join("ws_client.mjs"))
        .arg(url)
        .envs(env.iter().copied());
    let stdout = stdout_of("the Node WebSocket client", &mut command).await;
    serde_json::from_slice(&stdout).expect("a JSON report")
}

/// A replica's /metrics text (over TLS where its listener speaks it: what is read is the
/// figures, not the certificate, checked elsewhere).
pub(super) async fn metrics(replica: &Replica, tls: bool) -> String {
    if tls {
        let url = format!("https://{}/metrics", replica.addr);
        let mut command = tokio::process::Command::new("curl");
        command.args(["-s", "-S", "--insecure", "--max-time", "10", &url]);
        let stdout = stdout_of("curl of /metrics", &mut command).await;
        return String::from_utf8_lossy(&stdout).into_owned();
    }
    let reply = Client::new(replica.addr)
        .send_to("/metrics", http::Method::GET, &[], None)
        .await;
    String::from_utf8_lossy(&reply.bytes().await).into_owned()
}

/// The sum of the series of `name` whose labels pass `labels` (0 when there are none).
pub(super) fn sum(text: &str, name: &str, labels: impl Fn(&str) -> bool) -> u64 {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (set, value) = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            labels(set).then(|| value.trim().parse::<f64>().ok())?
        })
        .map(|value| value as u64)
        .sum()
}

/// Clients calling through nginx while each of three replicas in turn gets SIGTERM, drains,
/// exits and starts again: every call is answered. The drain outlasts nginx's `fail_timeout`
/// (2 s), as config/nginx.conf asks of a rolling restart: the replica restarted before is
/// tried again by then. Right before each SIGTERM the clients call at once, so nginx keeps
/// idle connections to every replica (`keepalive`), and they are quiet until the stopping
/// replica has handed its sessions over and left: the calls that follow are sent on those
/// connections if the replica left them open.
#[tokio::test]
async fn a_rolling_restart_through_nginx_holding_idle_connections_fails_no_call() {
    const CLIENTS: usize = 8;
    const CALLS: usize = 6;
    let redis = Redis::start().await;
    let options: Vec<&str> = [REPLICA, &["--drain-delay", "2500ms"]].concat();
    let (a, b, c) = tokio::join!(
        Replica::start(&redis, "a", &options),
        Replica::start(&redis, "b", &options),
        Replica::start(&redis, "c", &options),
    );
    let mut replicas = [a, b, c];
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    let balancer = Balancer::nginx(&addrs).await;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut client = Client::new(balancer.addr());
        client.initialize("2025-11-25").await;
        clients.push(client);
    }
    let connection = redis.connection().await;
    let mut failed = Vec::new();
    let mut calls = 0;
    for replica in replicas.iter_mut() {
        calls += burst(&clients, CALLS, &mut failed).await;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(replica.pid() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let key = format!("mcp-proxy:node:{}", replica.name);
        until_key(
            "the stopping replica to have left (its sessions handed over)",
            &connection,
            &key,
            false,
        )
        .await;
        calls += burst(&clients, CALLS, &mut failed).await;
        assert!(
            replica.exited().await.success(),
            "{} stops cleanly",
            replica.name
        );
        replica.restart(&redis).await;
        calls += burst(&clients, CALLS, &mut failed).await;
    }
    assert!(
        failed.is_empty(),
        "{} of {calls} calls failed: {failed:#?}\n{}",
        failed.len(),
        balancer.logs()
    );
}

/// `calls` echo calls by each client, all clients at once; how many were made. Each failure
/// is added to `failed`.
async fn burst(clients: &[Client], calls: usize, failed: &mut Vec<String>) -> usize {
    let each = clients.iter().enumerate().map(|(n, client)| async move {
        let mut failures = Vec::new();
        for call in 0..calls {
            let text = format!("client {n} call {call}");
            let reply = client
                .post(
                    &json!({ "jsonrpc": "2.0", "id": call + 1, "method": "tools/call",
                               "params": { "name": "echo", "arguments": { "text": text } } }),
                )
                .await;
            let status = reply.status;
            if status != http::StatusCode::OK {
                let body = String::from_utf8_lossy(&reply.bytes().await).into_owned();
                failures.push(format!("{status}: {body}"));
                continue;
            }
            let answer = reply.response().await;
            if answer["result"]["content"][0]["text"] != text.as_str() {
                failures.push(format!("{answer}"));
            }
        }
        failures
    });
    for failures in futures_util::future::join_all(each).await {
        failed.extend(failures);
    }
    clients.len() * calls
}
