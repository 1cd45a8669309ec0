//! Where sessions get their upstreams: one factory per served server builds the kind its spec
//! names (a child per session, a share of one child, an HTTP or SSE client session), keeps
//! children started ahead of sessions (`warm`), and releases everything at shutdown.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio_util::task::TaskTracker;
use tracing::warn;

use super::era_switch::EraSwitch;
use super::http_client::{self, HttpClient, HttpSpec};
use super::legacy_sse::SseUpstream;
use super::modern::Bridge;
use super::modern_http_builder::ModernHttpBuilder;
use super::shared::SharedStdio;
use super::stdio::{StdioSpec, StdioUpstream};
use super::streamable_http::{HttpUpstream, UpstreamSession};
use super::{EventSink, Sink, Upstream, UpstreamError, UpstreamEvent, UpstreamSpec};
use crate::base::backlog::Backlog;
use crate::telemetry::metrics::ServerMetrics;
use crate::upstream::credential::Credential;
use crate::wire::era::Era;
use crate::wire::mirrored::ToolMarks;

/// Builds the upstreams of one served server's sessions.
pub struct UpstreamFactory {
    spec: UpstreamSpec,
    /// One connection pool for every HTTP upstream session (and the replicas' hops).
    http_client: HttpClient,
    /// ConnectionPool for the POSTs of legacy HTTP upstreams, driven by their senders.
    connections: Arc<super::driven::ConnectionPool>,
    /// The one child of `shared` isolation.
    shared: Option<Arc<SharedStdio>>,
    /// The upstream actors, so shutdown can wait until every child is released.
    tasks: TaskTracker,
    /// Children started ahead of sessions (`warm`), with their bindings (a 2026-07-28 child
    /// behind its bridge already).
    warm: Mutex<VecDeque<(Upstream, Arc<Binding>)>>,
    metrics: Arc<ServerMetrics>,
    /// The parameters the server's tools mirror into headers, as its `tools/list` said.
    tool_marks: Arc<ToolMarks>,
    /// The revision new upstreams speak: the spec's, until the server names another.
    era: Arc<EraSwitch>,
}

impl UpstreamFactory {
    pub fn new(mut spec: UpstreamSpec, metrics: Arc<ServerMetrics>) -> UpstreamFactory {
        let tasks = TaskTracker::new();
        if let UpstreamSpec::Stdio(stdio) | UpstreamSpec::SharedStdio(stdio) = &mut spec {
            Arc::make_mut(stdio).stderr_dropped =
                metrics.upstream_stderr_lines_dropped_total.clone();
        }
        let shared = match &spec {
            UpstreamSpec::SharedStdio(stdio) => Some(SharedStdio::new(
                stdio.clone(),
                tasks.clone(),
                metrics.clone(),
            )),
            _ => None,
        };
        let era = EraSwitch::new(spec.era(), spec.display(), metrics.clone());
        let (http_client, connections) = match &spec {
            UpstreamSpec::Http(http) | UpstreamSpec::Sse(http) => (
                http_client::client_or_none(&http.tls),
                Arc::new(super::driven::ConnectionPool::with_tls(
                    http_client::dialer_or_none(&http.tls),
                )),
            ),
            _ => (http_client::plain_client(), Arc::default()),
        };
        UpstreamFactory {
            spec,
            era,
            http_client,
            connections,
            shared,
            tasks,
            warm: Mutex::new(VecDeque::new()),
            metrics,
            tool_marks: Arc::default(),
        }
    }

    /// The server sessions are bound to (a command line or URL), for operators.
    pub fn display(&self) -> String {
        self.spec.display()
    }

    /// Whether each session gets a legacy server process of its own (stdio, per-session
    /// isolation).
    pub fn spawns_legacy_children(&self) -> bool {
        matches!(&self.spec, UpstreamSpec::Stdio(spec) if spec.protocol == Era::Legacy)
    }

    pub fn tool_marks(&self) -> &Arc<ToolMarks> {
        &self.tool_marks
    }

    pub fn http_client(&self) -> &HttpClient {
        &self.http_client
    }

    /// Fills the warm pool (a no-op without one); call once the runtime is up.
    pub fn prewarm(&self) {
        if let UpstreamSpec::Stdio(spec) = &self.spec {
            self.refill(
                spec,
                &mut self.warm.lock().unwrap_or_else(|e| e.into_inner()),
            );
        }
    }

    /// An upstream for a new session, and the binding its events will reach the session by.
    /// `credential` (the client's, as the front made it for this server) reaches an HTTP
    /// server only when configured.
    pub fn build(&self, credential: Credential) -> Result<(Upstream, Arc<Binding>), UpstreamError> {
        if let Some(warm) = self.take_warm() {
            return Ok(warm);
        }
        let binding = Arc::new(Binding::default());
        let events: EventSink = binding.clone();
        let modern = self.era.era() == Era::Modern;
        let upstream = match (&self.spec, &self.shared) {
            (UpstreamSpec::SharedStdio(_), Some(shared)) if modern => {
                let bridge = Bridge::new(events, self.tool_marks.clone());
                let share = shared.attach(bridge.clone())?;
                Upstream::Modern(bridge.attach(Upstream::Shared(share)))
            }
            (_, Some(shared)) => Upstream::Shared(shared.attach(events)?),
            (UpstreamSpec::Stdio(spec) | UpstreamSpec::SharedStdio(spec), None) => {
                self.spawn(spec, events)?
            }
            (UpstreamSpec::Http(spec), None) => {
                let modern_http = self.modern_http(spec, &credential);
                match modern {
                    true => modern_http.build(events),
                    false => Upstream::Http(HttpUpstream::start(
                        spec,
                        self.http_client.clone(),
                        self.connections.clone(),
                        events,
                        credential,
                        Some(modern_http),
                    )),
                }
            }
            #[cfg(test)]
            (UpstreamSpec::InProcess(spec), None) => {
                Upstream::InProcess(super::in_process::InProcessUpstream::start(spec, events))
            }
            (UpstreamSpec::Virtual(server), None) => {
                Upstream::Virtual(server.open(credential, events, None))
            }
            (UpstreamSpec::Sse(spec), None) => Upstream::Sse(SseUpstream::start(
                spec,
                self.http_client.clone(),
                events,
                credential,
                self.metrics.clone(),
            )),
        };
        Ok((upstream, binding))
    }

    /// An upstream for a session taken over from another replica: linked to `session`, the
    /// upstream session the server keeps for it, when the server is a Streamable HTTP one still
    /// spoken to in the legacy revisions (its GET stream opens at `Upstream::listen`); else a
    /// new one, as [`Self::build`] makes (its `upstream_session` says which).
    pub fn resume(
        &self,
        credential: Credential,
        record: Option<&str>,
    ) -> Result<(Upstream, Arc<Binding>), UpstreamError> {
        if let (UpstreamSpec::Virtual(server), Some(_)) = (&self.spec, record) {
            let binding = Arc::new(Binding::default());
            let members = server.open(credential, binding.clone(), record);
            return Ok((Upstream::Virtual(members), binding));
        }
        let session = record.and_then(UpstreamSession::from_record);
        let (UpstreamSpec::Http(spec), Some(session), Era::Legacy) =
            (&self.spec, session.as_ref(), self.era.era())
        else {
            return self.build(credential);
        };
        let binding = Arc::new(Binding::default());
        match HttpUpstream::resume(
            spec,
            self.http_client.clone(),
            self.connections.clone(),
            binding.clone(),
            credential.clone(),
            Some(self.modern_http(spec, &credential)),
            session,
        ) {
            Some(http) => Ok((Upstream::Http(http), binding)),
            None => self.build(credential),
        }
    }

    /// What a legacy HTTP upstream hands over to when its server speaks 2026-07-28.
    fn modern_http(&self, spec: &HttpSpec, credential: &Credential) -> ModernHttpBuilder {
        ModernHttpBuilder {
            spec: spec.clone(),
            client: self.http_client.clone(),
            credential: credential.clone(),
            tool_marks: self.tool_marks.clone(),
            era: self.era.clone(),
        }
    }

    /// A child of its own for a session (behind a bridge when it speaks 2026-07-28).
    fn spawn(&self, spec: &Arc<StdioSpec>, events: EventSink) -> Result<Upstream, UpstreamError> {
        self.metrics.upstream_spawns_total.inc();
        if self.era.era() != Era::Modern {
            return Ok(Upstream::Stdio(StdioUpstream::spawn(
                spec,
                events,
                &self.tasks,
            )?));
        }
        let bridge = Bridge::new(events, self.tool_marks.clone());
        let server = StdioUpstream::spawn(spec, bridge.clone(), &self.tasks)?;
        Ok(Upstream::Modern(bridge.attach(Upstream::Stdio(server))))
    }

    /// A child started ahead of time (`warm`), replaced at once; `None` without a pool.
    fn take_warm(&self) -> Option<(Upstream, Arc<Binding>)> {
        let UpstreamSpec::Stdio(spec) = &self.spec else {
            return None;
        };
        if spec.warm == 0 {
            return None;
        }
        let mut pool = self.warm.lock().unwrap_or_else(|e| e.into_inner());
        let taken = loop {
            match pool.pop_front() {
                // A waiting child says nothing before initialize; one that did has died.
                Some((upstream, binding)) if binding.spoke_unbound() => upstream.release(),
                Some(warm) => break Some(warm),
                None => break None,
            }
        };
        self.refill(spec, &mut pool);
        taken
    }

    fn refill(&self, spec: &Arc<StdioSpec>, pool: &mut VecDeque<(Upstream, Arc<Binding>)>) {
        while pool.len() < spec.warm {
            let binding = Arc::new(Binding::default());
            match self.spawn(spec, binding.clone()) {
                Ok(upstream) => pool.push_back((upstream, binding)),
                Err(error) => {
                    warn!(%error, "could not start a warm upstream");
                    return;
                }
            }
        }
    }

    /// Releases the shared child and the warm ones, and waits until every upstream this factory
    /// built is released (the sessions' own are released by their sessions).
    pub async fn release_all(&self) {
        if let Some(shared) = &self.shared {
            shared.release_all();
        }
        let warm: Vec<_> = self
            .warm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for (stdio, _) in warm {
            stdio.release();
        }
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// An upstream's way into its session, bound once the session exists (a warm child is started
/// before its session is). Weak, so a session and its upstream do not keep each other alive.
#[derive(Default)]
pub struct Binding {
    session: OnceLock<Weak<dyn Sink>>,
    /// The upstream spoke before it was bound (a warm child that died while waiting).
    spoke_unbound: AtomicBool,
}

impl Binding {
    pub fn bind(&self, session: Weak<dyn Sink>) {
        let _ = self.session.set(session);
    }

    /// Binds `other` (an upstream's started later) to the session this one is bound to.
    pub fn bind_alike(&self, other: &Binding) {
        if let Some(session) = self.session.get() {
            other.bind(session.clone());
        }
    }

    fn spoke_unbound(&self) -> bool {
        self.spoke_unbound.load(Ordering::Acquire)
    }
}

impl Sink for Binding {
    fn deliver(&self, event: UpstreamEvent) {
        match self.session.get().and_then(Weak::upgrade) {
            Some(session) => session.deliver(event),
            None => self.spoke_unbound.store(true, Ordering::Release),
        }
    }

    fn backlog(&self) -> Option<Arc<Backlog>> {
        self.session.get()?.upgrade()?.backlog()
    }
}
