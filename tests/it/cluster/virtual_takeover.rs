//! A virtual server's sessions on replicas sharing Redis: when the replica owning a session is
//! killed, the replica that takes it over brings every member back (a stdio member a new server,
//! initialized with the client's params; an HTTP member in the session its server keeps, its
//! state with it), and every member's calls are served again, while the session's other
//! messages cross to the owner as for any server.

use crate::harness::cluster::{call_until_served, metric, through, Redis, Replica, FAST_TAKEOVER};
use crate::harness::{Client, Proxy, DEMO};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A configuration file of two demo members over stdio, `notes` and `tasks`, and one over HTTP,
/// `remote`, composed as `work`; removed when dropped.
struct VirtualConfig(std::path::PathBuf);

impl VirtualConfig {
    fn write(remote: &str) -> VirtualConfig {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("mcp-virtual-{}-{n}.toml", std::process::id()));
        let demo = format!("{} demo-server", shell_words::quote(DEMO));
        let text = format!(
            "[servers.notes.upstream]\nstdio = {demo:?}\n\
             [servers.tasks.upstream]\nstdio = {demo:?}\n\
             [servers.remote.upstream]\nhttp = {remote:?}\nprotocol = \"legacy\"\n\
             [virtual.work]\nservers = [\"notes\", \"tasks\", \"remote\"]\n"
        );
        std::fs::write(&path, text).unwrap();
        VirtualConfig(path)
    }
}

impl Drop for VirtualConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test]
async fn a_taken_over_virtual_session_brings_every_member_back() {
    let redis = Redis::start().await;
    // The HTTP member: a proxy of its own in front of the demo, a demo process (and count) per
    // session it keeps.
    let remote = Proxy::start().await;
    let config = VirtualConfig::write(&format!("http://{}/mcp", remote.addr()));
    let path = config.0.to_str().unwrap();
    let options = [&["--config", path][..], &FAST_TAKEOVER].concat();
    let mut a = Replica::start(&redis, "a", &options).await;
    let b = Replica::start(&redis, "b", &options).await;

    let mut on_a = Client::new(a.addr);
    on_a.path = "/servers/work/mcp".into();
    on_a.initialize("2025-11-25").await;
    assert_eq!(on_a.call_tool("notes__counter", json!({})).await, "1");
    assert_eq!(on_a.call_tool("tasks__counter", json!({})).await, "1");
    assert_eq!(on_a.call_tool("remote__counter", json!({})).await, "1");
    // Through b before the owner dies: carried to a, the members' state there.
    let mut on_b = through(&on_a, &b);
    assert_eq!(on_b.call_tool("notes__counter", json!({})).await, "2");

    a.kill().await;
    for member in ["notes", "tasks"] {
        let answer = call_until_served(
            "the session taken over",
            &on_b,
            &format!("{member}__echo"),
            json!({ "text": member }),
        )
        .await;
        assert_eq!(answer["result"]["content"][0]["text"], member, "{answer}");
    }
    assert_eq!(metric(&b, "mcp_proxy_sessions_taken_over_total").await, 1);
    // The stdio members are new servers, initialized for the session: their counts start
    // again. The HTTP member goes on in the session its server keeps: its count goes on.
    assert_eq!(on_b.call_tool("tasks__counter", json!({})).await, "1");
    assert_eq!(on_b.call_tool("remote__counter", json!({})).await, "2");
    assert_eq!(
        remote.metric("mcp_proxy_sessions_created_total"),
        1,
        "the HTTP member's server opened no other session"
    );
}
