//! Client-facing adapters: accept connections, route paths, speak the client's transport.
//! A front turns requests into session calls; it never reaches into an upstream.

pub mod access;
pub mod authorization;
pub mod cidr;
pub mod connections;
pub mod cors;
pub mod data_layer;
pub mod event_stream;
pub mod guard;
pub mod internal;
pub mod legacy_sse;
pub mod modern;
pub mod rejection;
pub mod request;
pub mod session_methods;
pub mod session_stream;
pub mod settings;
pub mod streamable_http;
pub mod telemetry;
pub mod traced;
pub mod websocket;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::base::carry::Repolled;
use crate::base::ids::Principal;
use crate::base::swap::Swappable;
use crate::session::cluster::Cluster;
use crate::session::Registry;
use crate::telemetry::metrics::{Metrics, ServerMetrics};
use crate::wire::http_body::Body;
use rejection::Rejection;

use settings::HttpSettings;

/// One MCP server as served to clients: its sessions and the settings every handler shares.
pub struct App {
    /// Its name: `default` for `/mcp`, else the gateway's name for it.
    pub server: Arc<str>,
    pub registry: Arc<Registry>,
    /// The front's settings, one handle a reload may replace (shared by every served server).
    pub http: Arc<Swappable<HttpSettings>>,
    pub metrics: Arc<ServerMetrics>,
    /// Where its spans go (nowhere unless tracing is on).
    pub spans: crate::telemetry::spans::Spans,
    /// Cancelled when the proxy starts shutting down.
    pub shutdown: CancellationToken,
    /// WebSocket connections (past their HTTP upgrade): shutdown waits for their close frames.
    pub websockets: TaskTracker,
    /// The 2026-07-28 face: its settings and the upstream sessions serving it.
    pub modern: modern::Modern,
    /// Sessions clients name in their messages: data-layer sessions and state handles.
    pub data_layer: crate::session::data_layer::NamedSessions,
    /// With `[auth]`: what its server gets of a client's token.
    pub upstream_credentials: settings::UpstreamCredentials,
}

/// Every served server: `/mcp` (the single-server form) and `/servers/<name>/…` (a gateway).
pub struct Router {
    pub default: Option<Arc<App>>,
    /// The front's settings (the `Host` policy every path but the internal hop is held to, …):
    /// the handle every served server's `App` shares.
    pub http: Arc<Swappable<HttpSettings>>,
    pub servers: BTreeMap<String, Arc<App>>,
    pub metrics: Arc<Metrics>,
    /// Cancelled first when stopping: `/readyz` answers 503 and every answer says
    /// `Connection: close`, while everything else is served as before (`drain_delay`).
    pub draining: CancellationToken,
    pub shutdown: CancellationToken,
    pub cluster: Cluster,
    /// The resource server, with `[auth]`: every served path needs a token it verifies.
    pub auth: Option<Arc<crate::auth::Authority>>,
    /// With `[tls]`: every connection is TLS, its handshake first (bounded), with the newest
    /// certificate its files hold.
    pub tls: Option<crate::tls::Rotating>,
    /// With `tls.principal_from_client_cert`: a client certificate's subject names the
    /// principal of every request on its connection.
    pub principal_from_client_cert: bool,
}

impl Router {
    /// The server a path is for and the endpoint it names there (`mcp`, `sse`, `messages`).
    pub fn served<'p>(&self, path: &'p str) -> Option<(&Arc<App>, &'p str)> {
        match path.strip_prefix("/servers/") {
            Some(rest) => {
                let (name, endpoint) = rest.split_once('/')?;
                Some((self.servers.get(name)?, endpoint))
            }
            None => Some((self.default.as_ref()?, path.trim_start_matches('/'))),
        }
    }
}

/// Accepts connections until `stop_accepting` (new ones are then refused, which a balancer
/// retries elsewhere; those the system had already completed are taken first), and lets open ones finish their current exchange once `closing`. From
/// `draining` on, every answer says `Connection: close`, so a connection carries no request
/// after its current one; at `stop_accepting`, before anything is refused, the connections
/// clients (and balancers) keep idle after a request are closed too, so that none is used for
/// a request sent after this replica stopped. A connection that carried no request yet (its
/// first may be on its way) and those other replicas' hops came on stay open until `closing`:
/// what reaches this replica meanwhile is served, or refused over them with a clear answer,
/// never a reset.
pub async fn serve(
    listener: TcpListener,
    router: Arc<Router>,
    stop_accepting: CancellationToken,
    closing: CancellationToken,
) {
    let connections = TaskTracker::new();
    let open = connections::Connections::new(
        router.http.now().max_connections,
        router.metrics.http.clone(),
    );
    let tokens = (stop_accepting.clone(), closing);
    loop {
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, say: a pause, not a loop that spins on it.
                    warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
            () = stop_accepting.cancelled() => break,
        };
        let Some(slot) = open.take() else {
            open.refuse(socket);
            continue;
        };
        connections.spawn(connection(
            socket,
            peer,
            slot,
            router.clone(),
            tokens.clone(),
        ));
    }
    // Connections the system completed and this loop did not take yet would be reset when the
    // listener closes, their requests perhaps sent: they are taken (and served) first.
    if let Ok(listener) = listener.into_std() {
        while let Ok((socket, peer)) = listener.accept() {
            let taken = socket.set_nonblocking(true).map(|()| socket);
            let Ok(socket) = taken.and_then(tokio::net::TcpStream::from_std) else {
                continue;
            };
            match open.take() {
                Some(slot) => {
                    let served = connection(socket, peer, slot, router.clone(), tokens.clone());
                    connections.spawn(served);
                }
                None => open.refuse(socket),
            }
        }
    }
    connections.close();
    connections.wait().await;
}

/// How long the listener pauses after a failed accept.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// The longest a client may take over its TLS handshake.
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

/// The TLS acceptor for a new connection, if the listener speaks TLS; a reload of its files
/// (they changed) is counted and logged.
fn acceptor(router: &Router) -> Option<tokio_rustls::TlsAcceptor> {
    let (acceptor, reload) = router.tls.as_ref()?.acceptor();
    match reload {
        None => {}
        Some(crate::tls::Reload::Done) => {
            router.metrics.http.tls_reloads.inc();
            tracing::info!("the listener's certificate files changed: new connections get them");
        }
        Some(crate::tls::Reload::Failed(error)) => {
            router.metrics.http.tls_reload_failures.inc();
            warn!(%error, "the listener's certificate files changed but cannot be used: the previous certificate stays");
        }
    }
    Some(acceptor)
}

/// Serves one connection: over TLS first when the listener speaks it (a client that does not
/// complete its handshake, within `TLS_HANDSHAKE`, is dropped and counted).
async fn connection(
    socket: tokio::net::TcpStream,
    peer: SocketAddr,
    slot: connections::Slot,
    router: Arc<Router>,
    tokens: (CancellationToken, CancellationToken),
) {
    let _ = socket.set_nodelay(true);
    let Some(tls) = acceptor(&router) else {
        return serve_connection(socket, peer, slot, router, tokens, None).await;
    };
    match tokio::time::timeout(TLS_HANDSHAKE, tls.accept(socket)).await {
        Ok(Ok(stream)) if router.principal_from_client_cert => {
            let certificate = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(<[_]>::first);
            match certificate.map(|certificate| crate::tls::subject_of(certificate)) {
                Some(Ok(subject)) => {
                    let certified = guard::Certified(Principal::from_certificate(&subject));
                    serve_connection(stream, peer, slot, router, tokens, Some(certified)).await
                }
                // The CA's client certificates name every principal: one that names none
                // (or that cannot be read) is served nothing, rather than as nobody.
                Some(Err(error)) => {
                    router.metrics.http.tls_handshakes_failed.inc();
                    warn!(%peer, %error, "a client certificate names no principal: the connection is closed");
                }
                None => {
                    router.metrics.http.tls_handshakes_failed.inc();
                    warn!(%peer, "a client without a certificate, which names principals here: the connection is closed");
                }
            }
        }
        Ok(Ok(stream)) => serve_connection(stream, peer, slot, router, tokens, None).await,
        Ok(Err(error)) => {
            router.metrics.http.tls_handshakes_failed.inc();
            debug!(%peer, %error, "a client's TLS handshake failed");
        }
        Err(_) => {
            router.metrics.http.tls_handshakes_failed.inc();
            debug!(%peer, "a client's TLS handshake did not finish in time");
        }
    }
}

/// Serves one connection until it ends, or until `stop_accepting` when it is idle after client
/// requests (see `serve`), or `closing`. It holds `slot` among the connections open (an
/// upgraded one takes it along).
async fn serve_connection<IO>(
    socket: IO,
    peer: SocketAddr,
    slot: connections::Slot,
    router: Arc<Router>,
    (stopped, closing): (CancellationToken, CancellationToken),
    certified: Option<guard::Certified>,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // What the connection carried: nothing yet, client requests, or hops.
    let carried = Arc::new(AtomicU8::new(CARRIED_NOTHING));
    let carrying = carried.clone();
    let header_timeout = router.http.now().header_timeout;
    let service = service_fn(move |mut request: Request<Incoming>| {
        let router = router.clone();
        let kind = match request.uri().path().starts_with("/internal/") {
            true => CARRIED_HOPS,
            false => CARRIED_CLIENTS,
        };
        carrying.fetch_max(kind, Ordering::AcqRel);
        request.extensions_mut().insert(slot.clone());
        request.extensions_mut().insert(guard::Peer(peer));
        if let Some(certified) = &certified {
            request.extensions_mut().insert(certified.clone());
        }
        async move {
            let started = std::time::Instant::now();
            let asked = access::enabled().then(|| access::Asked::of(&request, peer));
            let mut response = route(&router, request).await;
            if let Some(asked) = asked {
                asked.answered(&response, started.elapsed());
            }
            let upgrade = response.status() == http::StatusCode::SWITCHING_PROTOCOLS;
            if router.draining.is_cancelled() && !upgrade {
                let close = http::HeaderValue::from_static("close");
                response
                    .headers_mut()
                    .insert(http::header::CONNECTION, close);
            }
            Ok::<_, Infallible>(response)
        }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(socket), service)
        .with_upgrades();
    // Reading a request hands its body to the handler in this same task, which wakes it: it
    // is polled again at once rather than rescheduled (which the runtime announces to its
    // other threads).
    let connection = Repolled::new(connection);
    tokio::pin!(connection);
    let closes = async {
        stopped.cancelled().await;
        if carried.load(Ordering::Acquire) != CARRIED_CLIENTS {
            closing.cancelled().await;
        }
    };
    let outcome = tokio::select! {
        outcome = connection.as_mut() => outcome,
        () = closes => {
            // Closed at once when idle; else after its current exchange.
            connection.as_mut().get_pin_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = outcome {
        debug!(%peer, %error, "connection ended with an error");
    }
}

/// What a connection carried so far (each a step past the one before).
const CARRIED_NOTHING: u8 = 0;
const CARRIED_CLIENTS: u8 = 1;
const CARRIED_HOPS: u8 = 2;

async fn route(router: &Router, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path();
    if let Some(rest) = path.strip_prefix("/internal/") {
        // Signed with the hop key, which a rebinding page cannot do.
        let rest = rest.to_owned();
        return internal::handle(router, &rest, request).await;
    }
    // Against DNS rebinding, on every path: health and metrics too.
    if let Err(refused) = guard::check_host(&router.http.now(), request.uri(), request.headers()) {
        let response = Rejection::from(refused).into_response();
        if let Some((app, _)) = router.served(path) {
            telemetry::refused(app, request.method(), &response);
        }
        return response;
    }
    match path {
        "/healthz" => return text(StatusCode::OK, "ok\n".into()),
        "/readyz" if router.draining.is_cancelled() => {
            return text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".into())
        }
        "/readyz" if !router.cluster.healthy() => {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the session store (Redis) is unreachable\n".into(),
            )
        }
        "/readyz" => return text(StatusCode::OK, "ready\n".into()),
        "/metrics" => return metrics_text(router.metrics.render()),
        _ => {}
    }
    if let Some(document) = authorization::metadata(router, &request) {
        return document;
    }
    let Some((app, endpoint)) = router.served(path) else {
        return text(StatusCode::NOT_FOUND, "not found\n".into());
    };
    // A preflight carries no credentials: it is answered before any token is asked for.
    if let Some(methods) = cors::methods::of(endpoint).filter(|_| cors::is_preflight(&request)) {
        let response = cors::preflight(&app.http.now(), request.headers(), methods);
        if !response.status().is_success() {
            telemetry::refused(app, request.method(), &response);
        }
        return response;
    }
    let readers = cors::Readers::of(&app.http.now(), request.headers());
    let mut response = serve_endpoint(router, request).await;
    readers.allow(&mut response);
    response
}

/// A request to a served server's endpoint: its token checked (with `[auth]`), then served.
async fn serve_endpoint(router: &Router, mut request: Request<Incoming>) -> Response<Body> {
    let Some((app, _)) = router.served(request.uri().path()) else {
        return text(StatusCode::NOT_FOUND, "not found\n".into());
    };
    if let Err(refused) =
        guard::check_principal_header(&app.http.now(), request.headers(), request.extensions())
    {
        router.metrics.http.principal_headers_refused.inc();
        let response = Rejection::from(refused).into_response();
        telemetry::refused(app, request.method(), &response);
        return response;
    }
    // Who the request acts for, made once here and carried with it.
    let caller = match authorization::admit(router, app, &request).await {
        Ok(Some((admitted, caller))) => {
            request.extensions_mut().insert(admitted);
            caller
        }
        Ok(None) => guard::caller(&app.http.now(), request.headers(), request.extensions()),
        Err(rejection) => {
            let response = rejection.into_response();
            telemetry::refused(app, request.method(), &response);
            return response;
        }
    };
    request.extensions_mut().insert(caller);
    let path = request.uri().path();
    let Some((app, endpoint)) = router.served(path) else {
        return text(StatusCode::NOT_FOUND, "not found\n".into());
    };
    let mut response = match endpoint {
        "mcp" if websocket::is_upgrade(&request) => websocket::upgrade(app.clone(), request),
        // Boxed once here: the request's future hyper keeps (and moves) stays small.
        "mcp" => Box::pin(streamable_http::handle(app, request)).await,
        "sse" => legacy_sse::open(app, request).await,
        "messages" => legacy_sse::message(app, request).await,
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    };
    telemetry::served_by(app, &mut response);
    response
}

/// The OpenMetrics exposition (Prometheus reads it as well as its own text format).
fn metrics_text(body: String) -> Response<Body> {
    let mut response = Response::new(Body::full(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Body::full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
