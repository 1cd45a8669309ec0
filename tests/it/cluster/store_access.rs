//! Reaching Redis as production runs it: an ACL user granted only what the book lists, with its
//! password from a file or a variable (never in a URL, never in a child's environment); a
//! wrong password or user refused at start without showing the password; and TLS (`rediss://`)
//! with a private CA and a client certificate, a replica that cannot verify Redis or shows it
//! no certificate refused at start. Real `redis-server` processes throughout.

use serde_json::json;

use crate::harness::cluster::{call_until_served, through, Redis, Replica, FAST_TAKEOVER};
use crate::harness::tls::Certificates;
use crate::harness::{within, Client, DEMO};

const ADMIN_PASSWORD: &str = "admin-pw-41c3d9a7";
const PROXY_PASSWORD: &str = "proxy-pw-9b27e5f0c1";

/// The ACL line of the book's Redis page, with the proxy's password in it.
fn documented_acl_user() -> String {
    let page = redis_page();
    let line = page
        .lines()
        .find(|line| line.starts_with("user mcp-proxy on "))
        .expect("the book lists the ACL user");
    line.replace(">CHANGE-ME", &format!(">{PROXY_PASSWORD}"))
}

/// The book's page on Redis.
fn redis_page() -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/replicas/redis.md"),
    )
    .unwrap()
}

/// The ACL user the book lists, with what it adds on a Redis Cluster.
fn documented_cluster_acl_user() -> String {
    let page = redis_page();
    let more = page
        .lines()
        .find(|line| line.starts_with("~{mcp-proxy}:*"))
        .expect("the book lists what a cluster adds");
    format!("{} {more}", documented_acl_user())
}

/// A file holding `secret`, as a mounted secret is.
fn secret_file(name: &str, secret: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("mcp-store-{name}-{}", std::process::id()));
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    path
}

/// The proxy run once against `store` with `args`, to its exit: (success, stderr).
async fn start_once(store: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let output = within(
        "the proxy to give up",
        tokio::process::Command::new(DEMO)
            .args(["--listen", "127.0.0.1:0", "--store", store])
            .args(args)
            .env("MCP_PROXY_CLUSTER_SECRET", crate::harness::cluster::SECRET)
            .envs(env.iter().copied())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn an_acl_user_granted_only_what_the_book_lists_shares_sessions_and_takes_them_over() {
    let redis = Redis::start_with(Some(ADMIN_PASSWORD), vec![documented_acl_user()], false).await;
    let password = secret_file("acl", PROXY_PASSWORD);
    let password = password.to_str().unwrap();
    let mut flags = vec![
        "--store-username",
        "mcp-proxy",
        "--store-password-file",
        password,
    ];
    flags.extend(FAST_TAKEOVER);
    let mut a = Replica::start(&redis, "a", &flags).await;
    let b = Replica::start(&redis, "b", &flags).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    on_a.request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(on_a.call_tool("counter", json!({})).await, "1");
    // b serves the session through its owner.
    let mut on_b = through(&on_a, &b);
    assert_eq!(on_b.call_tool("counter", json!({})).await, "2");
    let admin = redis::Client::open(format!(
        "redis://:{ADMIN_PASSWORD}@127.0.0.1:{}/0",
        redis.port
    ))
    .unwrap()
    .get_multiplexed_async_connection()
    .await
    .unwrap();
    let log_key = format!("mcp-proxy:default:log:{}", on_a.session.clone().unwrap());
    let logged = |admin: &redis::aio::MultiplexedConnection| {
        let (mut admin, key) = (admin.clone(), log_key.clone());
        async move {
            redis::AsyncCommands::xlen::<_, usize>(&mut admin, &key)
                .await
                .unwrap()
        }
    };
    let before = logged(&admin).await;
    // A call whose progress is logged (the script that writes the log runs as the user)…
    let call = json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": { "name": "progress", "arguments": { "steps": 5, "delay_ms": 2 },
                    "_meta": { "progressToken": "p" } } });
    let seen = within(
        "the call's stream",
        on_a.post(&call).await.remaining_messages(),
    )
    .await;
    assert_eq!(seen.len(), 6, "five steps and the answer: {seen:?}");
    crate::harness::until("the steps and the answer to be logged", true, || {
        let logged = logged(&admin);
        async move { logged.await >= before + 6 }
    })
    .await;
    // …and, once its owner is dead, resumed on b from what Redis holds.
    a.kill().await;
    let resumed = within(
        "the resumed stream to end",
        on_b.get(seen[0].id.as_deref()).await.remaining_messages(),
    )
    .await;
    let resumed: Vec<_> = resumed.iter().map(|m| m.message.clone()).collect();
    let expected: Vec<_> = seen[1..].iter().map(|m| m.message.clone()).collect();
    assert_eq!(resumed, expected);
    // A fresh server for the session: its count starts again.
    let answer = call_until_served("the session taken over", &on_b, "counter", json!({})).await;
    assert_eq!(answer["result"]["content"][0]["text"], "1", "{answer}");
    // The subscription was carried over: counter updates reach a GET stream.
    let mut listener = on_b.get(None).await;
    on_b.call_tool("counter", json!({})).await;
    let update = listener
        .next_with_method("notifications/resources/updated")
        .await;
    assert_eq!(update["params"]["uri"], "demo://counter");
    // No command was refused on the way, on either replica.
    for replica in [&a, &b] {
        let failed = replica.warned("Redis");
        assert!(failed.is_empty(), "{}: {failed:#?}", replica.name);
    }
}

#[tokio::test]
async fn a_wrong_password_or_user_stops_the_start_without_showing_the_password() {
    let redis = Redis::start_with(Some(ADMIN_PASSWORD), vec![documented_acl_user()], false).await;
    let store = redis.url();
    let wrong = "wrong-pw-5aa1c7e3";
    let (started, stderr) = start_once(
        &store,
        &[
            "--store-username",
            "mcp-proxy",
            "--store-password-env",
            "REDIS_PW",
        ],
        &[("REDIS_PW", wrong)],
    )
    .await;
    assert!(!started);
    assert!(stderr.contains(&store), "names the store: {stderr}");
    assert!(!stderr.contains(wrong), "{stderr}");
    let (started, stderr) = start_once(
        &store,
        &[
            "--store-username",
            "nobody",
            "--store-password-env",
            "REDIS_PW",
        ],
        &[("REDIS_PW", PROXY_PASSWORD)],
    )
    .await;
    assert!(!started, "{stderr}");
    assert!(!stderr.contains(PROXY_PASSWORD), "{stderr}");
    // A variable that is not set names the key, not a connection error.
    let (started, stderr) = start_once(
        &store,
        &["--store-password-env", "MCP_STORE_TEST_NOT_SET"],
        &[],
    )
    .await;
    assert!(!started);
    assert!(
        stderr.contains("cluster.store_password") && stderr.contains("MCP_STORE_TEST_NOT_SET"),
        "{stderr}"
    );
    // A password in the URL and another given apart: refused, the URL's shown redacted.
    let with_password = store.replace("redis://", &format!("redis://:{ADMIN_PASSWORD}@"));
    let (started, stderr) = start_once(
        &with_password,
        &["--store-password-env", "REDIS_PW"],
        &[("REDIS_PW", PROXY_PASSWORD)],
    )
    .await;
    assert!(!started);
    assert!(stderr.contains("give it one way"), "{stderr}");
    assert!(!stderr.contains(ADMIN_PASSWORD), "{stderr}");
}

/// `tls-auth-clients yes`: Redis asks every client for a certificate of the CA.
fn tls_lines(certificates: &Certificates) -> Vec<String> {
    vec![
        format!("tls-cert-file {}", certificates.arg("server.pem")),
        format!("tls-key-file {}", certificates.arg("server-key.pem")),
        format!("tls-ca-cert-file {}", certificates.arg("ca.pem")),
        "tls-auth-clients yes".into(),
    ]
}

#[tokio::test]
async fn replicas_share_sessions_over_rediss_with_a_private_ca_and_a_client_certificate() {
    let certificates = Certificates::make();
    let redis = Redis::start_with(Some(ADMIN_PASSWORD), tls_lines(&certificates), true).await;
    let password = secret_file("tls", ADMIN_PASSWORD);
    let (ca, cert, key) = (
        certificates.arg("ca.pem"),
        certificates.arg("client.pem"),
        certificates.arg("client-key.pem"),
    );
    let flags = [
        "--store-password-file",
        password.to_str().unwrap(),
        "--store-ca-file",
        &ca,
        "--store-client-cert",
        &cert,
        "--store-client-key",
        &key,
    ];
    let a = Replica::start(&redis, "a", &flags).await;
    let b = Replica::start(&redis, "b", &flags).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    assert_eq!(on_a.call_tool("counter", json!({})).await, "1");
    assert_eq!(
        through(&on_a, &b).call_tool("counter", json!({})).await,
        "2"
    );
    // A fresh session opened through b, read back through a: both write and read over TLS.
    let mut on_b = Client::new(b.addr);
    on_b.initialize("2025-11-25").await;
    assert_eq!(
        through(&on_b, &a)
            .call_tool("echo", json!({"text": "tls"}))
            .await,
        "tls"
    );

    let store = redis.url();
    let password_flag = ["--store-password-env", "REDIS_PW"];
    let env = [("REDIS_PW", ADMIN_PASSWORD)];
    // No client certificate: Redis ends the handshake.
    let (started, stderr) = start_once(
        &store,
        &[&password_flag[..], &["--store-ca-file", &ca]].concat(),
        &env,
    )
    .await;
    assert!(!started, "{stderr}");
    assert!(stderr.contains(&store), "{stderr}");
    // The platform's roots only: Redis's certificate comes from a CA they do not hold.
    let (started, stderr) = start_once(
        &store,
        &[
            &password_flag[..],
            &["--store-client-cert", &cert, "--store-client-key", &key],
        ]
        .concat(),
        &env,
    )
    .await;
    assert!(!started, "{stderr}");
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");
    // TLS settings for a plain store are refused, not ignored.
    let plain = store.replace("rediss://", "redis://");
    let (started, stderr) = start_once(&plain, &["--store-ca-file", &ca], &env).await;
    assert!(!started);
    assert!(stderr.contains("rediss://"), "{stderr}");
}

/// On a Redis Cluster, the ACL user the book lists (with what it adds for a cluster) shares
/// sessions between replicas: nothing the proxy sends is refused.
#[tokio::test]
async fn on_a_cluster_the_acl_user_the_book_lists_shares_sessions() {
    let redis =
        crate::harness::redis_cluster::RedisCluster::start_with(
            vec![documented_cluster_acl_user()],
        )
        .await;
    let password = secret_file("cluster-acl", PROXY_PASSWORD);
    let mut flags = vec![
        "--store-username",
        "mcp-proxy",
        "--store-password-file",
        password.to_str().unwrap(),
    ];
    flags.extend(FAST_TAKEOVER);
    let a = Replica::start_on(&redis.url(), "a", &flags).await;
    let b = Replica::start_on(&redis.url(), "b", &flags).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    on_a.request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(on_a.call_tool("counter", json!({})).await, "1");
    let mut on_b = through(&on_a, &b);
    assert_eq!(on_b.call_tool("counter", json!({})).await, "2");
    let call = json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": { "name": "progress", "arguments": { "steps": 3, "delay_ms": 2 },
                    "_meta": { "progressToken": "p" } } });
    let seen = within(
        "the call's stream",
        on_b.post(&call).await.remaining_messages(),
    )
    .await;
    assert_eq!(seen.len(), 4, "three steps and the answer: {seen:?}");
    for replica in [&a, &b] {
        let failed = replica.warned("Redis");
        assert!(failed.is_empty(), "{}: {failed:#?}", replica.name);
    }
}
