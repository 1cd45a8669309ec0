//! Wires a configuration into a running proxy: binds, serves, expires idle sessions, and stops
//! cleanly (no new connections, sessions ended, upstreams released).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, SessionConfig, UpstreamConfig};
use crate::front::{self, App, Router};
use crate::metrics::Metrics;
use crate::session::cluster::Cluster;
use crate::session::{Registry, SessionSettings};
use crate::store::{RedisStore, Store};
use crate::upstream::UpstreamSpec;

/// A proxy that is listening.
pub struct Running {
    pub addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    router: Arc<Router>,
    shutdown: CancellationToken,
    served: JoinHandle<()>,
}

/// Binds `config.listen` and starts serving.
pub async fn start(config: &Config) -> anyhow::Result<Running> {
    check_commands(config)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let metrics = Arc::new(Metrics::default());
    let shutdown = CancellationToken::new();
    let store = match config.redis_settings(addr) {
        None => Store::Memory,
        Some(settings) => {
            Store::Redis(RedisStore::connect(settings, metrics.clone(), shutdown.clone()).await?)
        }
    };
    let serve = |name: &str,
                 upstream: &UpstreamConfig,
                 session: &SessionConfig|
     -> anyhow::Result<Arc<App>> {
        let settings = SessionSettings {
            cache_lists: upstream.caches_lists(),
            request_timeout: upstream.request_timeout,
            ..session.settings()
        };
        let registry = Arc::new(Registry::with_store(
            upstream.spec()?,
            settings,
            metrics.clone(),
            store.clone(),
            name,
        ));
        registry.prewarm();
        tokio::spawn(registry.clone().run_expiry(shutdown.clone()));
        Ok(Arc::new(App {
            registry,
            http: config.http_settings(),
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
            websockets: TaskTracker::new(),
        }))
    };
    let default = match config.serves_default() {
        true => Some(serve("default", &config.upstream, &config.session)?),
        false => None,
    };
    let mut servers = BTreeMap::new();
    for (name, server) in &config.servers {
        let session = server.session.as_ref().unwrap_or(&config.session);
        servers.insert(name.clone(), serve(name, &server.upstream, session)?);
    }
    let router = Arc::new(Router {
        default,
        http: config.http_settings(),
        servers,
        metrics: metrics.clone(),
        shutdown: shutdown.clone(),
        cluster: Cluster::new(store),
    });
    let served = tokio::spawn(front::serve(listener, router.clone(), shutdown.clone()));
    Ok(Running {
        addr,
        metrics,
        router,
        shutdown,
        served,
    })
}

/// Every stdio server can be started: a command that does not exist stops start-up with its
/// key, instead of failing each session's `initialize`.
fn check_commands(config: &Config) -> anyhow::Result<()> {
    let default = config
        .serves_default()
        .then(|| ("upstream.stdio".to_owned(), &config.upstream));
    let named = config
        .servers
        .iter()
        .map(|(name, server)| (format!("servers.{name}.upstream.stdio"), &server.upstream));
    for (key, upstream) in default.into_iter().chain(named) {
        if let UpstreamSpec::Stdio(stdio) | UpstreamSpec::SharedStdio(stdio) = upstream.spec()? {
            stdio.locate().with_context(|| key)?;
        }
    }
    Ok(())
}

impl Running {
    /// The sessions of `/mcp`.
    pub fn registry(&self) -> &Arc<Registry> {
        &self
            .router
            .default
            .as_ref()
            .expect("this proxy serves /mcp")
            .registry
    }

    /// The sessions of `/servers/<name>/mcp`.
    pub fn server(&self, name: &str) -> Option<&Arc<Registry>> {
        self.router.servers.get(name).map(|app| &app.registry)
    }

    /// Stops accepting, tells every open stream when to reconnect (`retry:`) and closes it, ends
    /// every session, waits for open connections to finish and for every upstream to be released
    /// (stdin closed, then SIGTERM, then SIGKILL).
    pub async fn stop(self) {
        self.shutdown.cancel();
        let apps = self
            .router
            .default
            .iter()
            .chain(self.router.servers.values());
        for app in apps.clone() {
            app.registry.end_all().await;
        }
        for app in apps {
            app.websockets.close();
            app.websockets.wait().await;
        }
        let _ = self.served.await;
    }
}
