//! Wires a configuration into a running proxy: binds, serves, expires idle sessions, and stops
//! cleanly (nothing new taken, requests in flight answered, sessions ended or handed over,
//! upstreams released).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::base::keys::Keys;
use crate::base::swap::Swappable;
use crate::config::{exposure, ServedBy};
use crate::config::{Config, SessionConfig, UpstreamConfig, VirtualConfig};
use crate::front::modern::envelope::CacheHints;
use crate::front::modern::state::StateKey;
use crate::front::modern::Modern;
use crate::front::settings::UpstreamCredentials;
use crate::front::{self, App, Router};
use crate::session::cluster::Cluster;
use crate::session::correlate::held::HeldCalls;
use crate::session::correlate::pool::AnonymousPool;
use crate::session::data_layer::NamedSessions;
use crate::session::exposure::{Exposure, ResourceExposure};
use crate::session::virtual_server::{Member, MemberNames, VirtualServer};
use crate::session::Registry;
use crate::store::{RedisStore, Store};
use crate::telemetry::metrics::{Metrics, ServerMetrics};
use crate::telemetry::spans::{Exporter, Spans};
use crate::upstream::child_env::Secrets;
use crate::upstream::{probe, stdio, UpstreamSpec};
use tracing::warn;

mod stdio_checks;

use stdio_checks::check_commands;

/// The longest a leaving replica keeps the connections other replicas' hops came on open after
/// it left.
const LINGER: Duration = Duration::from_secs(2);

/// A proxy that is listening.
pub struct Running {
    pub addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    router: Arc<Router>,
    store: Store,
    /// Where spans go with tracing on: flushed when stopping.
    exporter: Option<Arc<Exporter>>,
    /// Cancelled after `drain_delay`: nothing new is taken, open streams are told to reconnect.
    shutdown: CancellationToken,
    /// Cancelled once `drain_delay` is over: no new connection is accepted.
    stop_accepting: CancellationToken,
    /// How long a stopping replica serves on, unready, while balancers notice.
    drain_delay: Duration,
    /// Cancelled last: open connections close once their current exchange is over.
    closing: CancellationToken,
    /// How long requests in flight have to be answered when stopping.
    drain: Duration,
    served: JoinHandle<()>,
    /// Servers that are only members of virtual servers (`serve = false`): at no path, ended
    /// with the others.
    unserved: Vec<Arc<App>>,
}

/// Binds `config.listen` and starts serving.
pub async fn start(config: &Config) -> anyhow::Result<Running> {
    for (key, path) in config.paths() {
        tracing::info!(%key, path = %path.display(), "a path the configuration names");
    }
    let unenforced = check_commands(config)?;
    let http = config.http_settings()?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    warn_if_open_to_anyone(&http, addr);
    let http = Arc::new(Swappable::new(http));
    let metrics = metrics_showing(unenforced);
    let shutdown = CancellationToken::new();
    let keys = Keys::from_secret(&config.cluster.secret);
    crate::telemetry::redact::set_digest_key(keys.log_digest.clone());
    let redis = config.redis_settings(addr, &keys)?;
    let instance = redis
        .as_ref()
        .map_or_else(|| addr.to_string(), |r| r.node_id.clone());
    let exporter = config
        .exporter_settings(&instance)?
        .map(|settings| Arc::new(Exporter::start(settings, metrics.spans.clone())));
    let spans = Spans::new(exporter.clone());
    let store = match redis {
        None => Store::Memory,
        Some(settings) => Store::Redis(RedisStore::connect(settings, metrics.store.clone()).await?),
    };
    let shared = Shared {
        config,
        http: &http,
        metrics: &metrics,
        spans: &spans,
        store: &store,
        keys: &keys,
        shutdown: &shutdown,
    };
    let auth = config.auth.settings()?;
    let tls = match config.tls.server_tls()? {
        None => None,
        Some(tls) => Some(crate::tls::Rotating::new(tls).with_context(|| "tls")?),
    };
    let (default, servers, unserved) = shared.serve_every_server().await?;
    let router = Arc::new(Router {
        default,
        http: http.clone(),
        servers,
        metrics: metrics.clone(),
        draining: CancellationToken::new(),
        shutdown: shutdown.clone(),
        cluster: Cluster::new(store.clone(), config.cluster.max_hop_nonces),
        auth: auth
            .map(|settings| Arc::new(crate::auth::Authority::new(settings, metrics.auth.clone()))),
        tls,
        principal_from_client_cert: config.tls.principal_from_client_cert,
    });
    let closing = CancellationToken::new();
    let stop_accepting = CancellationToken::new();
    let served = tokio::spawn(front::serve(
        listener,
        router.clone(),
        stop_accepting.clone(),
        closing.clone(),
    ));
    Ok(Running {
        addr,
        metrics,
        router,
        store,
        exporter,
        shutdown,
        stop_accepting,
        drain_delay: config.drain_delay,
        closing,
        drain: config.shutdown_timeout / 2,
        served,
        unserved,
    })
}

/// The proxy's metrics, showing what confinement each server's children go without.
fn metrics_showing(unenforced: Vec<(String, &'static str)>) -> Arc<Metrics> {
    let metrics = Arc::new(Metrics::default());
    for (server, what) in unenforced {
        let labels = vec![("server", server), ("what", what.to_owned())];
        metrics.sandbox.unenforced.get_or_create(&labels).set(1);
    }
    metrics
}

impl Shared<'_> {
    /// The default server (`/mcp`), when there is one, and the gateway's servers by name.
    /// The default server's `App`, the served ones' by name, and those of members served only
    /// through virtual servers.
    async fn serve_every_server(&self) -> anyhow::Result<Served> {
        let config = self.config;
        let secrets = config.child_secrets();
        let default = match config.serves_default() {
            true => {
                let spec = settled("upstream", &config.upstream, &secrets).await?;
                Some(self.serve(
                    "default",
                    &config.upstream,
                    &config.session,
                    exposure(&config.tools, &config.prompts, &config.resources),
                    (spec, config.upstream.upstream_credentials()),
                ))
            }
            false => None,
        };
        let mut servers = BTreeMap::new();
        let mut members = BTreeMap::new();
        let mut unserved = Vec::new();
        for (name, server) in &config.servers {
            let session = server.session.as_ref().unwrap_or(&config.session);
            let key = format!("servers.{name}.upstream");
            let spec = settled(&key, &server.upstream, &secrets).await?;
            let exposure = exposure(&server.tools, &server.prompts, &server.resources);
            let upstream = (spec, server.upstream.upstream_credentials());
            let app = self.serve(name, &server.upstream, session, exposure, upstream);
            members.insert(name.as_str(), app.clone());
            if server.serve {
                servers.insert(name.clone(), app);
            } else {
                unserved.push(app);
            }
        }
        let mut default = default;
        for (name, composed) in &config.r#virtual {
            let app = self.serve_virtual(name, composed, &members);
            if composed.default {
                default = Some(app.clone());
            }
            servers.insert(name.clone(), app);
        }
        Ok((default, servers, unserved))
    }

    /// The `App` of virtual server `name`: its sessions each hold an upstream per member,
    /// built by the member's own factory.
    fn serve_virtual(
        &self,
        name: &str,
        composed: &VirtualConfig,
        apps: &BTreeMap<&str, Arc<App>>,
    ) -> Arc<App> {
        let config = self.config;
        let members: Vec<Member> = composed
            .servers
            .iter()
            .map(|member| {
                let server = &config.servers[member];
                Member {
                    names: MemberNames {
                        name: member.clone(),
                        tools: server.tools.exposure(),
                        prompts: server.prompts.exposure(),
                        resources: server.resources.exposure(),
                    },
                    factory: apps[member.as_str()].registry.upstream_factory(),
                    request_timeout: server.upstream.request_timeout,
                }
            })
            .collect();
        // A member's own timeout bounds its requests; the virtual server's, the longest.
        let request_timeout = composed
            .servers
            .iter()
            .map(|member| config.servers[member].upstream.request_timeout)
            .max()
            .unwrap_or(config.upstream.request_timeout);
        let upstream = UpstreamConfig {
            request_timeout,
            ..UpstreamConfig::default()
        };
        let metrics = self.metrics.server(name);
        let window = config.session.window();
        let spec = VirtualServer::new(name, &composed.separator, members, window, metrics).spec();
        let exposure = exposure(&composed.tools, &composed.prompts, &composed.resources);
        // Each member's credential made for it, as at its own path.
        let credentials = UpstreamCredentials::Members(
            composed
                .servers
                .iter()
                .map(|m| (m.clone(), config.servers[m].upstream.upstream_credentials()))
                .collect(),
        );
        self.serve(
            name,
            &upstream,
            &config.session,
            exposure,
            (spec, credentials),
        )
    }
}

/// What `serve_every_server` makes: see there.
type Served = (Option<Arc<App>>, BTreeMap<String, Arc<App>>, Vec<Arc<App>>);

/// Warns when anyone who reaches `addr` is served under any Host (see `guard::open_to_anyone`).
fn warn_if_open_to_anyone(http: &crate::front::settings::HttpSettings, addr: SocketAddr) {
    if front::guard::open_to_anyone(http) {
        tracing::warn!(%addr,
            "listening beyond loopback with no allowed hosts (--allowed-host, \
             MCP_PROXY_ALLOWED_HOSTS) and no authorization in front (--principal-header): any \
             Host header is served, so a browser page can reach this proxy by DNS rebinding");
    }
}

/// What every served server's `App` is built from.
struct Shared<'a> {
    config: &'a Config,
    http: &'a Arc<Swappable<crate::front::settings::HttpSettings>>,
    metrics: &'a Arc<Metrics>,
    spans: &'a Spans,
    store: &'a Store,
    keys: &'a Keys,
    shutdown: &'a CancellationToken,
}

impl Shared<'_> {
    /// The `App` of server `name`: its sessions (with their expiry running), its 2026-07-28
    /// face and its data layer; its server as `spec` names it, given the client's credential as
    /// `credentials` says.
    fn serve(
        &self,
        name: &str,
        upstream: &UpstreamConfig,
        session: &SessionConfig,
        exposure: (Exposure, Exposure, ResourceExposure),
        (spec, credentials): (UpstreamSpec, UpstreamCredentials),
    ) -> Arc<App> {
        let server_metrics = self.metrics.server(name);
        let settings = session.settings(ServedBy {
            upstream,
            exposure,
            limits: self.config.limits.rates(),
            spans: self.spans.clone(),
        });
        let registry = Arc::new(Registry::with_store(
            spec,
            settings,
            server_metrics.clone(),
            self.store.clone(),
            name,
        ));
        registry.prewarm();
        tokio::spawn(registry.clone().run_expiry(self.shutdown.clone()));
        Arc::new(App {
            server: name.into(),
            spans: self.spans.clone(),
            modern: self.modern_face(&registry, upstream, session, &server_metrics),
            registry,
            http: self.http.clone(),
            metrics: server_metrics,
            shutdown: self.shutdown.clone(),
            websockets: TaskTracker::new(),
            data_layer: NamedSessions::new(
                session.data_layer_settings(),
                self.keys.layer_state.clone(),
            ),
            upstream_credentials: credentials,
        })
    }

    /// A server's 2026-07-28 face: cache hints, held calls, signed request state and the pool
    /// of sessions prepared for anonymous requests.
    fn modern_face(
        &self,
        registry: &Registry,
        upstream: &UpstreamConfig,
        session: &SessionConfig,
        server_metrics: &ServerMetrics,
    ) -> Modern {
        // Only a child per session makes a request of its own costly; pooled sessions are
        // anonymous ones, within their limit.
        let pool_size = match registry.spawns_legacy_children() {
            true => session.anonymous_pool.min(session.max_anonymous_sessions),
            false => 0,
        };
        Modern {
            hints: CacheHints {
                ttl_ms: upstream.cache_ttl.as_millis() as u64,
                scope: upstream.cache_scope,
            },
            anonymous: session.anonymous,
            input_ttl: session.input_ttl,
            held_calls: Arc::new(HeldCalls::new(
                session.max_held_per_principal,
                server_metrics.input_required_held.clone(),
            )),
            state_key: StateKey::new(self.keys.request_state.clone()),
            pool: AnonymousPool::new(
                pool_size,
                session.anonymous_pool_wait,
                session.anonymous_pool_reuse,
                server_metrics.anonymous_pool_ready.clone(),
            ),
            ..Modern::default()
        }
    }
}

/// A server's spec with its revision settled (`auto` probed once, here, before any session),
/// a confined stdio server's package cache warmed first.
async fn settled(
    key: &str,
    upstream: &UpstreamConfig,
    secrets: &Arc<Secrets>,
) -> anyhow::Result<UpstreamSpec> {
    let spec = upstream.spec(secrets)?;
    if let UpstreamSpec::Stdio(stdio) | UpstreamSpec::SharedStdio(stdio) = &spec {
        stdio::warm_cache(stdio, upstream.request_timeout).await;
    }
    let (spec, failure) = probe::settle(key, spec, upstream.request_timeout).await;
    if let Some(failure) = failure {
        if upstream.require_start {
            anyhow::bail!("{key}: the server could not start: {failure} ({key}.require_start)");
        }
        warn!(
            server = %key,
            status = %failure.status,
            stderr = %failure.stderr,
            "the server exited at start without answering; each session will start it again \
             ({key}.require_start = true stops the start instead)"
        );
    }
    Ok(spec)
}

impl Running {
    /// The paths it serves MCP at, with the name of each gateway server: `/mcp` (no name) for
    /// the single-server form or a virtual server's `default`, `/servers/<name>/mcp` for each.
    pub fn served(&self) -> Vec<(String, Option<&str>)> {
        let default = self
            .router
            .default
            .as_ref()
            .map(|_| ("/mcp".to_owned(), None));
        let named = (self.router.servers.keys())
            .map(|name| (format!("/servers/{name}/mcp"), Some(name.as_str())));
        default.into_iter().chain(named).collect()
    }

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

    /// Stops without losing what was taken: stops accepting connections (closing idle ones)
    /// and taking new sessions (503, retry elsewhere), tells every session stream when to
    /// reconnect (`retry:`) and closes it, lets the requests in flight be answered (for half the
    /// shutdown timeout at most), ends every session here (with Redis: hands each, fully
    /// written, to another replica as soon as nothing is in flight on it, and a request that
    /// still comes for it follows it there), then closes the open connections and waits until
    /// every upstream is released (stdin closed, then SIGTERM, then SIGKILL).
    pub async fn stop(self) {
        // Unready at once, and every connection closed after its current exchange; everything
        // that reaches this replica is served as before while balancers notice.
        self.router.draining.cancel();
        tokio::time::sleep(self.drain_delay).await;
        // New connections are refused, and idle ones closed, before anything is refused.
        self.stop_accepting.cancel();
        self.shutdown.cancel();
        if let Some(redis) = self.store.redis() {
            // The others hand no session to this replica any more; it hands its own to them.
            if let Err(error) = redis.stop_taking_sessions().await {
                warn!(%error, "could not leave the replicas taking sessions");
            }
        }
        let apps: Vec<&Arc<App>> = self
            .router
            .default
            .iter()
            .chain(self.router.servers.values())
            .chain(&self.unserved)
            .collect();
        for app in &apps {
            app.registry.leave();
        }
        let deadline = crate::base::clock::from_now(self.drain);
        for app in &apps {
            let pending = app.registry.drain(deadline).await;
            if pending > 0 {
                warn!(pending, "requests still in flight when the drain ran out");
            }
        }
        // At once: a virtual server's sessions release its members' upstreams, which the
        // members' own ending waits for.
        futures_util::future::join_all(apps.iter().map(|app| app.registry.end_all())).await;
        if let Some(redis) = self.store.redis() {
            redis.leave().await;
            // The other replicas' views move to the sessions' new owners at their next
            // heartbeat; a hop that comes before gets its answer (or a 503) over a connection
            // still open, not a reset it could not tell from a lost answer.
            let views_moved = redis.heartbeat + redis.heartbeat / 2;
            tokio::time::sleep(views_moved.min(LINGER)).await;
        }
        self.closing.cancel();
        for app in &apps {
            app.websockets.close();
            app.websockets.wait().await;
        }
        let _ = self.served.await;
        if let Some(exporter) = &self.exporter {
            exporter.flush(Duration::from_secs(2)).await;
        }
    }
}
