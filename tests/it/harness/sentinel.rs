//! Redis with Sentinel for tests: a master, a replica of it and three Sentinels
//! (`redis-server --sentinel`, quorum 2, a master down after 500 ms), all on free loopback
//! ports, each stopped by its own handle, also when a test fails.

use std::process::Stdio;

use tokio::process::{Child, Command};

use super::balancer::fresh_dir;
use super::cluster::Redis;
use super::{free_port, until};

pub const SERVICE: &str = "mcp-store";

pub struct Sentinels {
    pub master: Redis,
    pub replica: Redis,
    sentinels: Vec<(Child, u16)>,
    dir: std::path::PathBuf,
    /// What the servers' clients must give (`requirepass`), if anything.
    password: Option<String>,
}

impl Sentinels {
    /// Starts them and waits until every Sentinel knows the replica and the other Sentinels,
    /// so that a failover can happen.
    pub async fn start() -> Sentinels {
        Sentinels::start_with_passwords(None, None).await
    }

    /// With `password`, the master and its replica take only clients that give it (and give
    /// it to each other); with `sentinel_password`, so do the Sentinels (theirs).
    pub async fn start_with_passwords(
        password: Option<&str>,
        sentinel_password: Option<&str>,
    ) -> Sentinels {
        // Whatever a server writes to disk (a replica's copy of the master) goes in a folder
        // of the test's own.
        let dir = fresh_dir("sentinel");
        let mut lines = vec![format!("dir {}", dir.display())];
        if let Some(password) = password {
            lines.push(format!("masterauth \"{password}\""));
        }
        // The replica's first copy at once (not after diskless sync's 5 s default delay).
        let mut master_lines = lines.clone();
        master_lines.push("repl-diskless-sync-delay 0".into());
        let master = Redis::start_with(password, master_lines, false).await;
        lines.push(format!("replicaof 127.0.0.1 {}", master.port));
        let replica = Redis::start_with(password, lines, false).await;
        let auth = password.map(|p| format!(":{p}@")).unwrap_or_default();
        let client =
            redis::Client::open(format!("redis://{auth}127.0.0.1:{}/0", replica.port)).unwrap();
        until("the replica to copy the master", true, || {
            let client = client.clone();
            async move { replication(&client).await.contains("master_link_status:up") }
        })
        .await;
        let mut sentinels = Vec::new();
        for n in 0..3 {
            let port = free_port();
            // A Sentinel rewrites its configuration file: one of its own, in the folder.
            let config = dir.join(format!("sentinel-{n}.conf"));
            std::fs::write(
                &config,
                format!(
                    "port {port}\nbind 127.0.0.1\nsentinel monitor {SERVICE} 127.0.0.1 {} 2\n\
                     sentinel down-after-milliseconds {SERVICE} 500\n\
                     sentinel failover-timeout {SERVICE} 5000\n{}{}",
                    master.port,
                    password
                        .map(|p| format!("sentinel auth-pass {SERVICE} \"{p}\"\n"))
                        .unwrap_or_default(),
                    sentinel_password
                        .map(|p| format!("requirepass \"{p}\"\nsentinel sentinel-pass \"{p}\"\n"))
                        .unwrap_or_default(),
                ),
            )
            .unwrap();
            let child = Command::new("redis-server")
                .arg(&config)
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
        };
        let sentinel_auth = sentinel_password
            .map(|p| format!(":{p}@"))
            .unwrap_or_default();
        for (_, port) in &set.sentinels {
            let client =
                redis::Client::open(format!("redis://{sentinel_auth}127.0.0.1:{port}")).unwrap();
            until(
                "a Sentinel to know the replica and the others",
                true,
                || {
                    let client = client.clone();
                    async move {
                        let Ok(mut c) = client.get_multiplexed_async_connection().await else {
                            return false;
                        };
                        let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
                            .arg("REPLICAS")
                            .arg(SERVICE)
                            .query_async(&mut c)
                            .await
                            .unwrap_or_default();
                        let others: Vec<redis::Value> = redis::cmd("SENTINEL")
                            .arg("SENTINELS")
                            .arg(SERVICE)
                            .query_async(&mut c)
                            .await
                            .unwrap_or_default();
                        replicas.len() == 1 && others.len() == 2
                    }
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
        format!("redis+sentinel://{}/{SERVICE}/0", hosts.join(","))
    }

    /// `kill -9` of the master: what it had not passed to the replica is gone.
    pub async fn kill_master(&mut self) {
        self.master.stop().await;
    }

    /// Waits until the replica is the master (the Sentinels promoted it).
    pub async fn until_promoted(&self) {
        let auth = self
            .password
            .as_deref()
            .map(|p| format!(":{p}@"))
            .unwrap_or_default();
        let client =
            redis::Client::open(format!("redis://{auth}127.0.0.1:{}/0", self.replica.port))
                .unwrap();
        until("the replica to be promoted", true, || {
            let client = client.clone();
            async move { replication(&client).await.contains("role:master") }
        })
        .await;
    }
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
