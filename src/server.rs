//! Wires a configuration into a running proxy: binds, serves, expires idle sessions, and stops
//! cleanly (no new connections, sessions ended, upstreams released).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::front::{self, App};
use crate::metrics::Metrics;
use crate::session::Registry;

/// A proxy that is listening.
pub struct Running {
    pub addr: SocketAddr,
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    served: JoinHandle<()>,
}

/// Binds `config.listen` and starts serving.
pub async fn start(config: &Config) -> anyhow::Result<Running> {
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let metrics = Arc::new(Metrics::default());
    let registry = Arc::new(Registry::new(
        config.upstream_spec()?,
        config.session_settings(),
        metrics.clone(),
    ));
    let shutdown = CancellationToken::new();
    let app = Arc::new(App {
        registry: registry.clone(),
        http: config.http_settings(),
        metrics: metrics.clone(),
        shutdown: shutdown.clone(),
    });
    tokio::spawn(registry.clone().run_expiry(shutdown.clone()));
    let served = tokio::spawn(front::serve(listener, app, shutdown.clone()));
    Ok(Running {
        addr,
        registry,
        metrics,
        shutdown,
        served,
    })
}

impl Running {
    /// Stops accepting, tells every open stream when to reconnect (`retry:`) and closes it, ends
    /// every session, waits for open connections to finish and for every upstream to be released
    /// (stdin closed, then SIGTERM, then SIGKILL).
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.registry.end_all().await;
        let _ = self.served.await;
    }
}
