//! The proxy in process: started on 127.0.0.1:0 in front of the demo server, its metrics read
//! back, and the secrets its configuration takes from files.

use std::net::SocketAddr;
use std::time::Duration;

use mcp_session_proxy::config::Config;
use mcp_session_proxy::server::{self, Running};

use super::{within, Client, DEMO};

/// Serves the demo's 2026-07-28-only mode over stdio.
#[allow(dead_code)]
pub fn serve_the_modern_demo(config: &mut Config) {
    config.upstream.stdio = Some(format!(
        "{} demo-server --protocol 2026-07-28",
        shell_words::quote(DEMO)
    ));
    config.upstream.protocol = mcp_session_proxy::wire::era::Era::Modern;
}

/// A proxy in front of the demo server. Dropping the runtime kills its children
/// (`kill_on_drop`), so a failing test leaves nothing behind.
pub struct Proxy {
    pub running: Running,
}

impl Proxy {
    /// A proxy in front of the Streamable HTTP server at `url`, spoken to in the legacy
    /// revisions whatever a probe would find, its configuration adjusted.
    pub async fn in_front_of(
        url: String,
        adjust: impl FnOnce(&mut mcp_session_proxy::config::Config),
    ) -> Proxy {
        Proxy::start_with(|c| {
            c.upstream.stdio = None;
            c.upstream.http = Some(url);
            c.upstream.protocol = mcp_session_proxy::wire::era::Era::Legacy;
            adjust(c);
        })
        .await
    }

    pub async fn start() -> Proxy {
        Proxy::start_with(|_| {}).await
    }

    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> Proxy {
        crate::harness::use_the_proxys_launcher();
        let mut config = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Config::default()
        };
        config.upstream.stdio = Some(format!("{} demo-server", shell_words::quote(DEMO)));
        config.upstream.shutdown_grace = Duration::from_millis(500);
        // No balancer to wait for; a test that drains says how long.
        config.drain_delay = Duration::ZERO;
        adjust(&mut config);
        let running = within("the proxy to start", server::start(&config))
            .await
            .expect("the proxy starts");
        Proxy { running }
    }

    pub fn addr(&self) -> SocketAddr {
        self.running.addr
    }

    pub fn client(&self) -> Client {
        Client::new(self.addr())
    }

    /// A client with a session, initialized at `version`.
    pub async fn initialized_client(&self, version: &str) -> Client {
        let mut client = self.client();
        client.initialize(version).await;
        client
    }

    pub fn metric(&self, name: &str) -> u64 {
        metric_in(&self.running.metrics.render(), name)
    }

    /// The client opened one session and ended it with DELETE.
    pub fn assert_one_session_ended_by_delete(&self) {
        assert_eq!(self.metric("mcp_proxy_sessions_created_total"), 1);
        assert_eq!(
            self.metric("mcp_proxy_sessions_open"),
            0,
            "terminated by DELETE"
        );
    }

    pub async fn stop(self) {
        within("the proxy to stop", self.running.stop()).await;
    }
}

/// The value of the metric `name` in a Prometheus exposition, summed over its label sets (its
/// servers, say); panics if it has no sample. `name` may name one series (`name{labels}`).
pub fn metric_in(text: &str, name: &str) -> u64 {
    let samples: Vec<u64> = text
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?.1,
                None => rest.strip_prefix(' ')?,
            };
            value.trim().parse::<f64>().ok().map(|v| v as u64)
        })
        .collect();
    assert!(!samples.is_empty(), "no metric {name} in {text}");
    samples.iter().sum()
}

/// A secret in a file of its own (the proxy reads secrets from files, never from its command
/// line), removed when dropped.
pub struct SecretFile(std::path::PathBuf);

impl SecretFile {
    pub fn new(name: &str, secret: &str) -> SecretFile {
        let mut unique = [0u8; 4];
        getrandom::fill(&mut unique).unwrap();
        let unique: String = unique.iter().map(|b| format!("{b:02x}")).collect();
        let file = format!("mcp-proxy-{name}-{}-{unique}", std::process::id());
        let path = std::env::temp_dir().join(file);
        std::fs::write(&path, format!("{secret}\n")).unwrap();
        SecretFile(path)
    }

    pub fn source(&self) -> Option<mcp_session_proxy::config::SecretSource> {
        Some(mcp_session_proxy::config::SecretSource::File(
            self.0.clone(),
        ))
    }
}

impl Drop for SecretFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
