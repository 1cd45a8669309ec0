//! Replicas for tests: a real `redis-server` on a free loopback port and proxy processes (the
//! real binary) sharing it; each is stopped by its own handle, also when a test fails.

use std::net::SocketAddr;
use std::process::Stdio;

use redis::AsyncCommands;
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use http::StatusCode;
use serde_json::json;

use super::{free_port, spawn_proxy_with_env, until, within, Client};

pub const SECRET: &str = "4d1c0ffee5e1ec7ed5ec0de0f7e575ec0ffee5e1ec7ed5ec0de0f7e575ec0ffe";

/// Flags of a replica that finds a silent owner out quickly: a heartbeat every 100 ms, and an
/// owner's sessions taken over after 500 ms without one.
pub const FAST_TAKEOVER: [&str; 4] = ["--heartbeat", "100ms", "--owner-timeout", "500ms"];

pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    /// What `requirepass` it was started with, if any.
    password: Option<String>,
    /// Configuration lines beyond the port and the password (ACL users, TLS files).
    lines: Vec<String>,
    /// Whether it speaks TLS only (`tls-port`, no plain port).
    tls: bool,
    /// Whether [`Redis::url`] holds the password.
    url_password: bool,
}

impl Redis {
    pub async fn start() -> Redis {
        Redis::start_with(None, Vec::new(), false).await
    }

    /// A server that takes only clients that give `password`; its [`Redis::url`] holds it.
    pub async fn start_with_password(password: &str) -> Redis {
        let mut redis = Redis::new(Some(password), Vec::new(), false);
        redis.url_password = true;
        redis.run().await;
        redis
    }

    /// A server with `requirepass` (unless `None`), these configuration `lines` (an ACL
    /// `user`, TLS files), speaking TLS only on its port with `tls`; its [`Redis::url`] holds
    /// no password: the replicas are given theirs apart.
    pub async fn start_with(password: Option<&str>, lines: Vec<String>, tls: bool) -> Redis {
        let mut redis = Redis::new(password, lines, tls);
        redis.run().await;
        redis
    }

    fn new(password: Option<&str>, lines: Vec<String>, tls: bool) -> Redis {
        Redis {
            child: None,
            port: free_port(),
            password: password.map(str::to_owned),
            lines,
            tls,
            url_password: false,
        }
    }

    async fn run(&mut self) {
        use tokio::io::AsyncWriteExt;
        let port = self.port.to_string();
        let ports = match self.tls {
            true => ["--port", "0", "--tls-port", &port],
            false => ["--port", &port, "--tls-port", "0"],
        };
        // The password in the configuration it reads from stdin (`-`), not on its command line.
        let mut child = Command::new("redis-server")
            .arg("-")
            .args(["--bind", "127.0.0.1"])
            .args(ports)
            .args(["--save", "", "--appendonly", "no"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server starts (scripts/test installs it)");
        let mut config = child.stdin.take().unwrap();
        if let Some(password) = &self.password {
            let line = format!("requirepass \"{password}\"\n");
            config.write_all(line.as_bytes()).await.unwrap();
        }
        for line in &self.lines {
            config
                .write_all(format!("{line}\n").as_bytes())
                .await
                .unwrap();
        }
        drop(config);
        self.child = Some(child);
        let port = self.port;
        until("redis-server to listen", true, || async move {
            TcpStream::connect(("127.0.0.1", port)).await.is_ok()
        })
        .await;
    }

    /// A Redis address without a server of its own (a relay listens on `port`).
    pub fn at(port: u16) -> Redis {
        Redis {
            child: None,
            port,
            password: None,
            lines: Vec::new(),
            tls: false,
            url_password: false,
        }
    }

    /// The server's process id (to stop and continue it with signals).
    pub fn pid(&self) -> i32 {
        let child = self.child.as_ref().expect("a server of its own");
        child.id().expect("running") as i32
    }

    pub fn url(&self) -> String {
        let scheme = match self.tls {
            true => "rediss",
            false => "redis",
        };
        match (&self.password, self.url_password) {
            (Some(password), true) => format!("{scheme}://:{password}@127.0.0.1:{}/0", self.port),
            _ => format!("{scheme}://127.0.0.1:{}/0", self.port),
        }
    }

    /// Kills the server (its data is gone: it keeps none on disk).
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            within("redis-server to exit", child.kill()).await.unwrap();
        }
    }

    /// Starts it again on the same port.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.run().await;
    }

    /// A connection of the test's own (bounded: a server that never answers fails the test).
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(self.url()).unwrap();
        within(
            "a connection to redis-server",
            client.get_multiplexed_async_connection(),
        )
        .await
        .unwrap()
    }
}

/// A proxy process in front of the demo server, sharing `redis`.
pub struct Replica {
    child: Child,
    pub addr: SocketAddr,
    pub name: String,
    args: Vec<String>,
    /// Its WARN and ERROR log lines, as they come.
    pub warnings: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// Its lines about a session's life (`session ended`, `… handed over`, `… taken over`).
    pub session_lines: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    /// When it logged that it followed a new master of the store, as each line was read.
    pub masters_followed: std::sync::Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
    /// Its store's log lines, as they come.
    pub store_lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Replica {
    /// A replica named `name`, listening on a free port.
    pub async fn start(redis: &Redis, name: &str, extra: &[&str]) -> Replica {
        let mut args: Vec<String> = ["--node-id", name].map(String::from).to_vec();
        args.extend(extra.iter().map(|a| a.to_string()));
        Replica::launch(redis, "127.0.0.1:0", args).await
    }

    /// A replica with a random name (as with no `--node-id`) on a port of its own, which a
    /// restart keeps.
    pub async fn start_unnamed(redis: &Redis, extra: &[&str]) -> Replica {
        let listen = format!("127.0.0.1:{}", free_port());
        let args = extra.iter().map(|a| a.to_string()).collect();
        Replica::launch(redis, &listen, args).await
    }

    /// A replica named `name` whose store is `store` (a Sentinel URL, say).
    pub async fn start_on(store: &str, name: &str, extra: &[&str]) -> Replica {
        let mut args: Vec<String> = ["--node-id", name].map(String::from).to_vec();
        args.extend(extra.iter().map(|a| a.to_string()));
        Replica::launch_on(store.to_owned(), "127.0.0.1:0", args).await
    }

    async fn launch(redis: &Redis, listen: &str, args: Vec<String>) -> Replica {
        Replica::launch_on(redis.url(), listen, args).await
    }

    async fn launch_on(url: String, listen: &str, args: Vec<String>) -> Replica {
        let mut all = vec!["--listen", listen];
        all.extend(args.iter().map(String::as_str));
        // Secrets by environment: a command line is readable by every local user.
        let env = [
            ("MCP_PROXY_STORE", url.as_str()),
            ("MCP_PROXY_CLUSTER_SECRET", SECRET),
        ];
        let (child, addr, mut lines, _) = spawn_proxy_with_env(&all, &env).await;
        let warnings = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = warnings.clone();
        let session_lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let of_sessions = session_lines.clone();
        let masters_followed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let followed = masters_followed.clone();
        let store_lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let of_store = store_lines.clone();
        // Keep reading its logs, so a full pipe never stalls it (and show them all with
        // PROXY_TEST_LOGS=1, at the level PROXY_TEST_LOG_LEVEL names).
        let echo = std::env::var_os("PROXY_TEST_LOGS").is_some();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if echo {
                    eprintln!("{line}");
                }
                if line.contains("\"message\":\"session ") {
                    if let Ok(entry) = serde_json::from_str(&line) {
                        of_sessions.lock().unwrap().push(entry);
                    }
                }
                if line.contains("\"target\":\"mcp_session_proxy::store") {
                    of_store.lock().unwrap().push(line.clone());
                }
                if line.contains("the store's master changed: following it") {
                    followed.lock().unwrap().push(std::time::Instant::now());
                }
                if line.contains("\"WARN\"") || line.contains("\"ERROR\"") {
                    seen.lock().unwrap().push(line);
                }
            }
        });
        let name = args
            .iter()
            .position(|a| a == "--node-id")
            .and_then(|at| args.get(at + 1))
            .cloned()
            .unwrap_or_default();
        Replica {
            child,
            addr,
            name,
            args,
            warnings,
            session_lines,
            masters_followed,
            store_lines,
        }
    }

    /// The messages of its lines about sessions so far, with the field that says most of each
    /// (`reason`, `to`, `from`): `["session handed over to=b", "session ended reason=…"]`.
    pub fn session_story(&self) -> Vec<String> {
        let lines = self.session_lines.lock().unwrap();
        let told = |entry: &serde_json::Value| {
            let fields = &entry["fields"];
            let message = fields["message"].as_str().unwrap_or_default();
            let detail = ["reason", "to", "from"]
                .into_iter()
                .find_map(|key| Some(format!(" {key}={}", fields[key].as_str()?)));
            format!("{message}{}", detail.unwrap_or_default())
        };
        lines.iter().map(told).collect()
    }

    /// `kill -9`: no goodbye to Redis, no cleanup.
    pub async fn kill(&mut self) {
        within("the replica to die", self.child.kill())
            .await
            .unwrap();
    }

    /// Starts it again with the same options on the same address (after `kill`).
    pub async fn restart(&mut self, redis: &Redis) {
        let again = Replica::launch(redis, &self.addr.to_string(), self.args.clone()).await;
        *self = again;
    }

    /// Waits until the process has exited (after SIGTERM), within the usual bound.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        within("the replica to exit", self.child.wait())
            .await
            .unwrap()
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// Its warnings that contain `text`.
    /// Whether its store logged a line holding `text`.
    pub fn store_said(&self, text: &str) -> bool {
        self.store_lines
            .lock()
            .unwrap()
            .iter()
            .any(|line| line.contains(text))
    }

    pub fn warned(&self, text: &str) -> Vec<String> {
        self.warnings
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line.contains(text))
            .cloned()
            .collect()
    }
}

/// Calls `tool` through `client` until a replica answers 200: a 503 (the owner is leaving, dead
/// but not yet declared so, or Redis is away) must say when to retry, and is retried; a live
/// session is never answered 404.
pub async fn call_until_served(
    what: &str,
    client: &Client,
    tool: &str,
    arguments: serde_json::Value,
) -> serde_json::Value {
    within(what, async {
        loop {
            let reply = client
                .post(&json!({ "jsonrpc": "2.0", "id": 90, "method": "tools/call",
                               "params": { "name": tool, "arguments": arguments } }))
                .await;
            match reply.status {
                StatusCode::OK => return reply.response().await,
                StatusCode::SERVICE_UNAVAILABLE => {
                    assert!(
                        reply.headers.contains_key("retry-after"),
                        "told when to retry"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                status => panic!("unexpected {status}"),
            }
        }
    })
    .await
}

/// The same client session, spoken to through `replica`.
pub fn through(client: &Client, replica: &Replica) -> Client {
    let mut other = client.clone();
    other.addr = replica.addr;
    other
}

/// Two replicas, `a` and `b`, and a session initialized on `a`: its client, talking to `a`.
pub async fn a_session_on_a(redis: &Redis) -> (Replica, Replica, Client) {
    let a = Replica::start(redis, "a", &[]).await;
    let b = Replica::start(redis, "b", &[]).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    (a, b, on_a)
}

/// A figure from `replica`'s `/metrics`.
pub async fn metric(replica: &Replica, name: &str) -> u64 {
    super::metric_in(&metrics_text(replica).await, name)
}

/// `replica`'s `/metrics`, as text.
pub async fn metrics_text(replica: &Replica) -> String {
    let text = Client::new(replica.addr)
        .send_to("/metrics", http::Method::GET, &[], None)
        .await
        .bytes()
        .await;
    String::from_utf8_lossy(&text).into_owned()
}

/// `pairs` sessions on each of `a` and `b` in turn (`a`'s first), each at a count of 1, and
/// the stream of a call with progress on the second (`b`'s first), as it was received: three
/// steps and the answer.
pub async fn sessions_with_a_logged_stream(
    a: &Replica,
    b: &Replica,
    pairs: usize,
) -> (Vec<Client>, Vec<super::Received>) {
    let mut sessions = Vec::new();
    for n in 0..2 * pairs {
        let owner = if n % 2 == 0 { a } else { b };
        let mut client = Client::new(owner.addr);
        client.initialize("2025-11-25").await;
        assert_eq!(
            client.call_tool("counter", json!({})).await,
            "1",
            "session {n}"
        );
        sessions.push(client);
    }
    let call = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": { "name": "progress", "arguments": { "steps": 3, "delay_ms": 2 },
                    "_meta": { "progressToken": "before" } } });
    let logged = within(
        "a logged stream",
        sessions[1].post(&call).await.remaining_messages(),
    )
    .await;
    assert_eq!(logged.len(), 4, "three steps and the answer");
    (sessions, logged)
}

/// `client`'s session, its owner dead, taken over through `replica`: its server is a fresh one
/// (a stdio server's count starts again).
pub async fn taken_over_afresh(client: &Client, replica: &Replica) {
    let answer = call_until_served(
        "a session of the dead replica taken over",
        &through(client, replica),
        "counter",
        json!({}),
    )
    .await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "1",
        "a fresh server: {answer}"
    );
}

/// After a failover of the store: each of `sessions` (the even ones owned by `a`, the odd
/// ones by `b`, each at a count of `before`) goes on, through its owner and then the other
/// replica, its server's count continuing.
pub async fn each_session_counts_on(sessions: &[Client], a: &Replica, b: &Replica, before: u64) {
    for (n, client) in sessions.iter().enumerate() {
        let other = if n % 2 == 0 { b } else { a };
        for (via, client, count) in [
            ("its owner", client.clone(), before + 1),
            ("the other replica", through(client, other), before + 2),
        ] {
            let answer = call_until_served(
                "a call after the failover",
                &client,
                "counter",
                serde_json::json!({}),
            )
            .await;
            assert_eq!(
                answer["result"]["content"][0]["text"],
                count.to_string(),
                "session {n} via {via}: {answer}"
            );
        }
    }
}

/// Resumes, through `replica`, the stream `client` received as `logged` (its first message's
/// id the last one seen): the rest of it comes back whole.
pub async fn resumes_whole(client: &Client, replica: &Replica, logged: &[super::Received]) {
    let resumed = within(
        "the stream resumed",
        through(client, replica)
            .get(logged[0].id.as_deref())
            .await
            .remaining_messages(),
    )
    .await;
    let resumed: Vec<_> = resumed.iter().map(|m| m.message.clone()).collect();
    let expected: Vec<_> = logged[1..].iter().map(|m| m.message.clone()).collect();
    assert_eq!(resumed, expected);
}

/// A TCP relay on `listener` to `target` (set once known) that records what its clients send.
pub fn recording_relay(
    listener: tokio::net::TcpListener,
    target: std::sync::Arc<std::sync::Mutex<Option<std::net::SocketAddr>>>,
) -> std::sync::Arc<std::sync::Mutex<Vec<u8>>> {
    let recorded = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = recorded.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let Some(to) = *target.lock().unwrap() else {
                continue;
            };
            let record = record.clone();
            tokio::spawn(async move {
                let Ok(outbound) = tokio::net::TcpStream::connect(to).await else {
                    return;
                };
                let (mut from_server, mut to_server) = outbound.into_split();
                let (mut from_client, mut to_client) = inbound.split();
                let upward = async {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut buffer = [0u8; 8192];
                    while let Ok(n @ 1..) = from_client.read(&mut buffer).await {
                        record.lock().unwrap().extend_from_slice(&buffer[..n]);
                        if to_server.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = to_server.shutdown().await;
                };
                let downward = tokio::io::copy(&mut from_server, &mut to_client);
                let _ = tokio::join!(upward, downward);
            });
        }
    });
    recorded
}

/// Waits until `key` is in Redis (`present`) or gone from it (`!present`), bounded like every
/// wait.
pub async fn until_key(
    what: &str,
    connection: &redis::aio::MultiplexedConnection,
    key: &str,
    present: bool,
) {
    until(what, present, || {
        let (mut connection, key) = (connection.clone(), key.to_owned());
        async move { connection.exists::<_, bool>(&key).await.unwrap() }
    })
    .await
}
