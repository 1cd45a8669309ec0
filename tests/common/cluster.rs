//! Replicas for tests: a real `redis-server` on a free loopback port and proxy processes (the
//! real binary) sharing it; each is stopped by its own handle, also when a test fails.

use std::net::SocketAddr;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use super::{listening_address, until, DEMO};

pub const SECRET: &str = "test-cluster-secret";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Redis {
    child: Option<Child>,
    pub port: u16,
}

impl Redis {
    pub async fn start() -> Redis {
        let mut redis = Redis {
            child: None,
            port: free_port(),
        };
        redis.run().await;
        redis
    }

    async fn run(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server starts (scripts/test installs it)");
        self.child = Some(child);
        let port = self.port;
        until("redis-server to listen", true, || async move {
            TcpStream::connect(("127.0.0.1", port)).await.is_ok()
        })
        .await;
    }

    /// A Redis address without a server of its own (a relay listens on `port`).
    pub fn at(port: u16) -> Redis {
        Redis { child: None, port }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills the server (its data is gone: it keeps none on disk).
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.unwrap();
        }
    }

    /// Starts it again on the same port.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.run().await;
    }

    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }
}

/// A proxy process in front of the demo server, sharing `redis`.
pub struct Replica {
    child: Child,
    pub addr: SocketAddr,
    pub name: String,
}

impl Replica {
    pub async fn start(redis: &Redis, name: &str, extra: &[&str]) -> Replica {
        let mut child = Command::new(DEMO)
            .args(["--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(["--store", &redis.url(), "--node-id", name])
            .args(["--cluster-secret", SECRET])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the proxy starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = listening_address(&mut lines, &mut Vec::new()).await;
        // Keep reading its logs, so a full pipe never stalls it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Replica {
            child,
            addr,
            name: name.to_owned(),
        }
    }

    /// `kill -9`: no goodbye to Redis, no cleanup.
    pub async fn kill(&mut self) {
        self.child.kill().await.unwrap();
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }
}
