//! The WebSocket front (draft SEP-1287/1288): an upgrade on the Streamable HTTP path, subprotocol
//! `mcp`, one JSON-RPC message per UTF-8 text frame (binary → close 1003). A connection carries
//! at most one session: its own, opened by its first message and ended with it (as with stdio),
//! or a protocol-level one (`session/start`, `session/resume`, seed `000`) that outlives the
//! connection and resumes on another, over either transport. Here the handshake; `connection`
//! is the connection's loop, `messages` what each client message does.

mod connection;
mod messages;

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;
use tracing::{debug, Instrument};

use super::guard::{self, Admitted};
use super::rejection::Rejection;
use super::request::{check_origin, header_str};
use super::streamable_http::SESSION_HEADER;
use super::telemetry::Telemetry;
use super::App;
use crate::base::caller::Caller;
use crate::session::{Reader, Session};
use crate::wire::http_body::Body;

pub const SUBPROTOCOL: &str = "mcp";

/// Whether a request asks to become a WebSocket.
pub fn is_upgrade(request: &Request<Incoming>) -> bool {
    let has = |name: header::HeaderName, token: &str| {
        request
            .headers()
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|part| part.trim().eq_ignore_ascii_case(token))
    };
    request.method() == Method::GET
        && has(header::UPGRADE, "websocket")
        && has(header::CONNECTION, "upgrade")
}

/// Checks the handshake and answers 101; the connection is served once hyper hands it over.
pub fn upgrade(app: Arc<App>, mut request: Request<Incoming>) -> Response<Body> {
    let telemetry = Telemetry::opening(&app);
    let admitted = accept(&app, &request)
        .and_then(|response| Ok((response, guard::admitted_caller(request.extensions())?)));
    let outcome = admitted.map(|(response, caller)| {
        // A connection lives no longer than the token that opened it.
        let expires = request
            .extensions()
            .get::<Admitted>()
            .map(|admitted| Instant::now() + admitted.verified.remaining());
        let on_upgrade = hyper::upgrade::on(&mut request);
        // The connection's place among those open goes with it (`http.max_connections`).
        let slot = request
            .extensions_mut()
            .remove::<super::connections::Slot>();
        let config = WebSocketConfig::default()
            .max_message_size(Some(app.http.now().max_body_bytes))
            .max_frame_size(Some(app.http.now().max_body_bytes));
        let span = tracing::debug_span!("websocket");
        let connected = app.clone();
        app.websockets.spawn(
            async move {
                match on_upgrade.await {
                    Ok(upgraded) => {
                        let socket = WebSocketStream::from_raw_socket(
                            TokioIo::new(upgraded),
                            Role::Server,
                            Some(config),
                        )
                        .await;
                        Connection::new(connected, caller, expires)
                            .run(socket)
                            .await;
                        drop(slot);
                    }
                    Err(error) => debug!(%error, "the WebSocket upgrade did not complete"),
                }
            }
            .instrument(span),
        );
        response
    });
    telemetry.end(outcome)
}

fn accept(app: &App, request: &Request<Incoming>) -> Result<Response<Body>, Rejection> {
    let headers = request.headers();
    check_origin(app, headers)?;
    if header_str(headers, SESSION_HEADER).is_some()
        || header_str(headers, "last-event-id").is_some()
    {
        return Err(Rejection::conflict(
            "a WebSocket connection names its session with session/resume (protocol mode), not \
             with Mcp-Session-Id or Last-Event-ID",
        ));
    }
    if header_str(headers, "sec-websocket-version") != Some("13") {
        return Err(Rejection::upgrade_required(
            "Bad Request: Sec-WebSocket-Version must be 13",
        ));
    }
    let key = headers
        .get("sec-websocket-key")
        .ok_or_else(|| Rejection::bad_request("Bad Request: Sec-WebSocket-Key is missing"))?;
    let offered = offered_subprotocols(headers);
    if !offered.is_empty() && !offered.iter().any(|p| p == SUBPROTOCOL) {
        return Err(Rejection::bad_request(format!(
            "Bad Request: the WebSocket subprotocol must be {SUBPROTOCOL:?} (offered: {})",
            offered.join(", ")
        )));
    }
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let out = response.headers_mut();
    out.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    out.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    out.insert(
        "sec-websocket-accept",
        HeaderValue::from_str(&derive_accept_key(key.as_bytes()))
            .map_err(|_| Rejection::bad_request("Bad Request: bad Sec-WebSocket-Key"))?,
    );
    if !offered.is_empty() {
        out.insert(
            "sec-websocket-protocol",
            HeaderValue::from_static(SUBPROTOCOL),
        );
    }
    Ok(response)
}

fn offered_subprotocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The session a connection carries, and its one reader.
struct Bound {
    session: Arc<Session>,
    reader: Reader,
    /// Opened by this connection's first message: it ends with the connection.
    own: bool,
}

struct Connection {
    app: Arc<App>,
    /// Who its messages act for, as its upgrade request was admitted.
    caller: Caller,
    /// When its token stops being accepted: then it is closed (1008), and the client connects
    /// again with a fresh token and resumes its session.
    expires: Option<Instant>,
    bound: Option<Bound>,
    /// What the client's data-layer sessions and listens send it, written as it comes.
    named: mpsc::Sender<Bytes>,
    named_out: mpsc::Receiver<Bytes>,
    /// `tools/list` requests (by id) whose answers get the handle tools added.
    lists: std::collections::HashSet<String>,
}

impl Connection {
    fn new(app: Arc<App>, caller: Caller, expires: Option<Instant>) -> Connection {
        let (named, named_out) = mpsc::channel(64);
        Connection {
            app,
            caller,
            expires,
            bound: None,
            named,
            named_out,
            lists: Default::default(),
        }
    }
}
