//! Redis with Sentinel for tests: a master, a replica of it and three Sentinels
//! (`redis-server --sentinel`, quorum 2, a master down after 500 ms), all on free loopback
//! ports, each stopped by its own handle, also when a test fails; optionally behind passwords
//! and speaking TLS only.

use std::process::Stdio;
use std::time::Instant;

use futures_util::StreamExt;
use tokio::process::{Child, Command};

use super::balancer::fresh_dir;
use super::cluster::Redis;
use super::tls::Certificates;
use super::{free_port, until, within};

pub const SERVICE: &str = "mcp-store";

pub struct Sentinels {
    pub master: Redis,
    pub replica: Redis,
    sentinels: Vec<(Child, u16)>,
    dir: std::path::PathBuf,
    /// What the servers' clients must give (`requirepass`), if anything.
    password: Option<String>,
    /// What the Sentinels' clients must give, if anything.
    sentinel_password: Option<String>,
    /// The CA of every server's certificate, when they speak TLS only.
    ca: Option<Vec<u8>>,
}

impl Sentinels {
    /// Starts them and waits until every Sentinel knows the replica and the other Sentinels,
    /// so that a failover can happen.
    pub async fn start() -> Sentinels {
        Sentinels::start_with(None, None, None).await
    }

    /// With `password`, the master and its replica take only clients that give it (and give
    /// it to each other); with `sentinel_password`, so do the Sentinels (theirs); with `tls`,
    /// every server speaks TLS only (`server.pem`), replication and the Sentinels' own
    /// connections included.
    pub async fn start_with(
        password: Option<&str>,
        sentinel_password: Option<&str>,
        tls: Option<&Certificates>,
    ) -> Sentinels {
        // Whatever a server writes to disk (a replica's copy of the master) goes in a folder
        // of the test's own.
        let dir = fresh_dir("sentinel");
        let tls_lines: Vec<String> = match tls {
            Some(certificates) => vec![
                format!("tls-cert-file {}", certificates.arg("server.pem")),
                format!("tls-key-file {}", certificates.arg("server-key.pem")),
                format!("tls-ca-cert-file {}", certificates.arg("ca.pem")),
                "tls-auth-clients no".into(),
                "tls-replication yes".into(),
            ],
            None => Vec::new(),
        };
        let ca = tls.map(|certificates| std::fs::read(certificates.path("ca.pem")).unwrap());
        let mut lines = vec![format!("dir {}", dir.display())];
        lines.extend(tls_lines.iter().cloned());
        if let Some(password) = password {
            lines.push(format!("masterauth \"{password}\""));
        }
        // The replica's first copy at once (not after diskless sync's 5 s default delay).
        let mut master_lines = lines.clone();
        master_lines.push("repl-diskless-sync-delay 0".into());
        let master = Redis::start_with(password, master_lines, tls.is_some()).await;
        lines.push(format!("replicaof 127.0.0.1 {}", master.port));
        let replica = Redis::start_with(password, lines, tls.is_some()).await;
        let client = client_of(replica.port, password, ca.as_deref());
        until("the replica to copy the master", true, || {
            let client = client.clone();
            async move { replication(&client).await.contains("master_link_status:up") }
        })
        .await;
        let mut sentinels = Vec::new();
        for n in 0..3 {
            let port = free_port();
            let mut config = match tls {
                Some(_) => format!("port 0\ntls-port {port}\n"),
                None => format!("port {port}\n"),
            };
            config += &format!(
                "bind 127.0.0.1\nsentinel monitor {SERVICE} 127.0.0.1 {} 2\n\
                 sentinel down-after-milliseconds {SERVICE} 500\n\
                 sentinel failover-timeout {SERVICE} 5000\n",
                master.port
            );
            if let Some(password) = password {
                config += &format!("sentinel auth-pass {SERVICE} \"{password}\"\n");
            }
            if let Some(password) = sentinel_password {
                config +=
                    &format!("requirepass \"{password}\"\nsentinel sentinel-pass \"{password}\"\n");
            }
            for line in &tls_lines {
                config += &format!("{line}\n");
            }
            // A Sentinel rewrites its configuration file: one of its own, in the folder.
            let file = dir.join(format!("sentinel-{n}.conf"));
            std::fs::write(&file, config).unwrap();
            let child = Command::new("redis-server")
                .arg(&file)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("redis-server runs as a Sentinel (scripts/test installs it)");
            sentinels.push((child, port));
        }
        let set = Sentinels {
            master,
            replica,
            sentinels,
            dir,
            password: password.map(str::to_owned),
            sentinel_password: sentinel_password.map(str::to_owned),
            ca,
        };
        for (_, port) in &set.sentinels {
            let client = set.sentinel(*port);
            until(
                "a Sentinel to know the replica and the others",
                true,
                || {
                    let client = client.clone();
                    async move { knows_all(&client).await }
                },
            )
            .await;
        }
        set
    }

    /// The store URL naming the three Sentinels and the service.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(_, port)| format!("127.0.0.1:{port}"))
            .collect();
        let scheme = match self.ca {
            Some(_) => "rediss+sentinel",
            None => "redis+sentinel",
        };
        format!("{scheme}://{}/{SERVICE}/0", hosts.join(","))
    }

    /// `kill -9` of the master: what it had not passed to the replica is gone.
    pub async fn kill_master(&mut self) {
        self.master.stop().await;
    }

    /// Waits until the replica is the master (the Sentinels promoted it).
    pub async fn until_promoted(&self) {
        let client = self.server(self.replica.port);
        until("the replica to be promoted", true, || {
            let client = client.clone();
            async move { replication(&client).await.contains("role:master") }
        })
        .await;
    }

    /// A failover while the master is up, as an operator plans one: `SENTINEL FAILOVER` to the
    /// first Sentinel, which promotes the replica and announces it (`+switch-master`) while
    /// the old master still answers as one, until the Sentinels make it a replica of the new
    /// one some seconds later. When the announcement came, as a subscriber read it.
    pub async fn planned_failover(&self) -> Instant {
        let sentinel = self.sentinel(self.sentinels[0].1);
        let mut announcements = sentinel.get_async_pubsub().await.unwrap();
        announcements.subscribe("+switch-master").await.unwrap();
        let mut connection = sentinel.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(SERVICE)
            .query_async(&mut connection)
            .await
            .expect("a Sentinel starts a failover when asked");
        let message = within("the Sentinel to announce the new master", async {
            announcements.on_message().next().await
        })
        .await
        .expect("the Sentinel's announcements go on");
        let announced = Instant::now();
        let payload: String = message.get_payload().unwrap();
        let new_master = format!("127.0.0.1 {}", self.replica.port);
        assert!(
            payload.starts_with(SERVICE) && payload.ends_with(&new_master),
            "{payload}"
        );
        announced
    }

    /// Whether the old master still says it is a master (the Sentinels have not made it a
    /// replica of the new one yet).
    pub async fn old_master_still_answers_as_one(&self) -> bool {
        replication(&self.server(self.master.port))
            .await
            .contains("role:master")
    }

    /// Waits until the old master is a replica of the new one, copying it.
    pub async fn until_old_master_follows(&self) {
        let client = self.server(self.master.port);
        until("the old master to become a replica", true, || {
            let client = client.clone();
            async move {
                let replication = replication(&client).await;
                replication.contains("role:slave") && replication.contains("master_link_status:up")
            }
        })
        .await;
    }

    /// A client of the Redis on `port` (the master or the replica).
    fn server(&self, port: u16) -> redis::Client {
        client_of(port, self.password.as_deref(), self.ca.as_deref())
    }

    /// A client of the Sentinel on `port`.
    fn sentinel(&self, port: u16) -> redis::Client {
        client_of(port, self.sentinel_password.as_deref(), self.ca.as_deref())
    }
}

/// A client of the server on `port` (a Sentinel, or Redis's database 0) that gives `password`
/// and, with `ca`, speaks TLS trusting it.
fn client_of(port: u16, password: Option<&str>, ca: Option<&[u8]>) -> redis::Client {
    let auth = password.map(|p| format!(":{p}@")).unwrap_or_default();
    match ca {
        None => redis::Client::open(format!("redis://{auth}127.0.0.1:{port}/0")).unwrap(),
        Some(ca) => redis::Client::build_with_tls(
            format!("rediss://{auth}127.0.0.1:{port}/0"),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.to_vec()),
            },
        )
        .unwrap(),
    }
}

/// Whether the Sentinel `client` reaches knows the replica and the two other Sentinels.
async fn knows_all(client: &redis::Client) -> bool {
    let Ok(mut connection) = client.get_multiplexed_async_connection().await else {
        return false;
    };
    known(&mut connection, "REPLICAS").await == 1 && known(&mut connection, "SENTINELS").await == 2
}

/// How many `what` (`REPLICAS`, `SENTINELS`) of the service a Sentinel knows.
async fn known(connection: &mut redis::aio::MultiplexedConnection, what: &str) -> usize {
    redis::cmd("SENTINEL")
        .arg(what)
        .arg(SERVICE)
        .query_async::<Vec<redis::Value>>(connection)
        .await
        .map(|found| found.len())
        .unwrap_or(0)
}

/// A server's `INFO replication` ("" while it cannot be read).
async fn replication(client: &redis::Client) -> String {
    let Ok(mut connection) = client.get_multiplexed_async_connection().await else {
        return String::new();
    };
    redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut connection)
        .await
        .unwrap_or_default()
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for (child, _) in &mut self.sentinels {
            let _ = child.start_kill();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
