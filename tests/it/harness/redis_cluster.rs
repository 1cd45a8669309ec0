//! A Redis Cluster for tests: six `redis-server --cluster-enabled yes` on free loopback ports
//! (their bus ports too), made into three masters with a replica each by
//! `redis-cli --cluster create`, a master failed after 1 s of silence; each stopped by its own
//! handle, also when a test fails.

use tokio::process::Command;

use super::balancer::fresh_dir;
use super::cluster::Redis;
use super::{free_port, until, within};

pub struct RedisCluster {
    pub nodes: Vec<Redis>,
    dir: std::path::PathBuf,
}

/// A node of the cluster as `CLUSTER NODES` tells it: its port, whether it is a master, the
/// slot ranges it serves.
#[derive(Debug)]
struct Node {
    port: u16,
    master: bool,
    failed: bool,
    slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Starts the six servers, makes them a cluster and waits until every node says it is
    /// whole (`cluster_state:ok`) and every replica has copied its master.
    pub async fn start() -> RedisCluster {
        RedisCluster::start_with(Vec::new()).await
    }

    /// With these configuration lines besides (an ACL `user`, say) on every node.
    pub async fn start_with(extra: Vec<String>) -> RedisCluster {
        let dir = fresh_dir("redis-cluster");
        let mut nodes = Vec::new();
        for n in 0..6 {
            let lines = vec![
                format!("dir {}", dir.display()),
                "cluster-enabled yes".into(),
                format!("cluster-config-file nodes-{n}.conf"),
                format!("cluster-port {}", free_port()),
                "cluster-node-timeout 1000".into(),
                // A replica may always take over, however long since it heard its master.
                "cluster-replica-validity-factor 0".into(),
                "repl-diskless-sync-delay 0".into(),
            ];
            let lines = [lines, extra.clone()].concat();
            nodes.push(Redis::start_with(None, lines, false).await);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let output = within(
            "redis-cli --cluster create",
            Command::new("redis-cli")
                .arg("--cluster")
                .arg("create")
                .args(&addresses)
                .args(["--cluster-replicas", "1", "--cluster-yes"])
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("redis-cli runs (scripts/test installs it)");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = RedisCluster { nodes, dir };
        for node in &cluster.nodes {
            let port = node.port;
            until("every node to see the cluster whole", true, || async move {
                let info = info(port, "CLUSTER", Some("INFO")).await;
                let replication = info_replication(port).await;
                info.contains("cluster_state:ok")
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            })
            .await;
        }
        cluster
    }

    /// The store URL naming two of the nodes (the others are found from them).
    pub fn url(&self) -> String {
        format!(
            "redis+cluster://127.0.0.1:{},127.0.0.1:{}",
            self.nodes[0].port, self.nodes[3].port
        )
    }

    /// The port of the master serving `key`'s slot, as a live node tells.
    pub async fn master_of(&self, key: &str) -> u16 {
        self.serving(key).await.expect("a master serves every slot")
    }

    /// The port of the live master serving `key`'s slot, if one does.
    async fn serving(&self, key: &str) -> Option<u16> {
        let slot = self.slot_of(key).await;
        self.view()
            .await
            .into_iter()
            .find(|node| {
                node.master
                    && !node.failed
                    && node.slots.iter().any(|&(f, t)| (f..=t).contains(&slot))
            })
            .map(|node| node.port)
    }

    /// `kill -9` of the node on `port`: what it had not passed to its replica is gone.
    pub async fn kill(&mut self, port: u16) {
        let node = self.nodes.iter_mut().find(|n| n.port == port).unwrap();
        node.stop().await;
    }

    /// Waits until a node other than `old` (killed) serves `key`'s slot, and every live node
    /// says the cluster is whole again.
    pub async fn until_promoted(&self, key: &str, old: u16) {
        until("a replica to be promoted", true, || async move {
            self.serving(key).await.is_some_and(|port| port != old)
        })
        .await;
        for node in self.nodes.iter().filter(|n| n.port != old) {
            let port = node.port;
            until(
                "every live node to see the cluster whole",
                true,
                || async move {
                    info(port, "CLUSTER", Some("INFO"))
                        .await
                        .contains("cluster_state:ok")
                },
            )
            .await;
        }
    }

    /// The hash slot of `key`, as a live node computes it.
    async fn slot_of(&self, key: &str) -> u16 {
        for node in &self.nodes {
            let Some(mut connection) = connect(node.port).await else {
                continue;
            };
            if let Ok(slot) = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(key)
                .query_async::<u16>(&mut connection)
                .await
            {
                return slot;
            }
        }
        panic!("no node of the cluster answers");
    }

    /// The nodes, as the first live node tells.
    async fn view(&self) -> Vec<Node> {
        for node in &self.nodes {
            let text = info(node.port, "CLUSTER", Some("NODES")).await;
            if text.is_empty() {
                continue;
            }
            return text.lines().filter_map(parse_node).collect();
        }
        Vec::new()
    }
}

/// One line of `CLUSTER NODES`.
fn parse_node(line: &str) -> Option<Node> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let port = fields
        .get(1)?
        .split(['@', ','])
        .next()?
        .rsplit(':')
        .next()?;
    let flags = fields.get(2)?;
    Some(Node {
        port: port.parse().ok()?,
        master: flags.contains("master"),
        failed: flags.contains("fail"),
        slots: fields
            .iter()
            .skip(8)
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| {
                let (f, t) = s.split_once('-').unwrap_or((s, s));
                Some((f.parse().ok()?, t.parse().ok()?))
            })
            .collect(),
    })
}

/// A connection to the node on `port`, if it answers within a second.
async fn connect(port: u16) -> Option<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0")).ok()?;
    tokio::time::timeout(
        std::time::Duration::from_secs(1),
        client.get_multiplexed_async_connection(),
    )
    .await
    .ok()?
    .ok()
}

/// `<command> [<argument>]`'s text answer from the node on `port` ("" when it cannot be read).
async fn info(port: u16, command: &str, argument: Option<&str>) -> String {
    let Some(mut connection) = connect(port).await else {
        return String::new();
    };
    let mut cmd = redis::cmd(command);
    if let Some(argument) = argument {
        cmd.arg(argument);
    }
    tokio::time::timeout(
        std::time::Duration::from_secs(1),
        cmd.query_async::<String>(&mut connection),
    )
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or_default()
}

async fn info_replication(port: u16) -> String {
    info(port, "INFO", Some("replication")).await
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
