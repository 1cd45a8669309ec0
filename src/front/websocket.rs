//! The WebSocket front (draft SEP-1287/1288): an upgrade on the Streamable HTTP path, subprotocol
//! `mcp`, one JSON-RPC message per UTF-8 text frame (binary → close 1003). A connection carries
//! at most one session: its own, opened by its first message and ended with it (as with stdio),
//! or a protocol-level one (`session/start`, `session/resume`, seed `000`) that outlives the
//! connection and resumes on another, over either transport.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::{interval_at, Instant};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Message as Frame, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;
use tracing::{debug, Instrument};

use super::body::Body;
use super::data_layer::legacy::{self, Routed};
use super::data_layer::{handles, listen};
use super::guard;
use super::rejection::{failed_request, Rejection};
use super::request::{check_origin, header_str};
use super::session_methods;
use super::streamable_http::SESSION_HEADER;
use super::traced::{self, RequestSpan};
use super::App;
use crate::ids::Principal;
use crate::jsonrpc::{id_key, Kind, Message};
use crate::session::log::StreamKey;
use crate::session::protocol::{self, is_session_method};
use crate::session::{Delivery, Reader, Session, Shape};

pub const SUBPROTOCOL: &str = "mcp";

/// Close code (private range) for a connection whose session was resumed on another.
const CLOSE_RESUMED_ELSEWHERE: u16 = 4001;

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
    let started = std::time::Instant::now();
    let metrics = app.metrics.clone();
    let response = match accept(&app, &request) {
        Ok((response, principal)) => {
            let credential = request.headers().get(header::AUTHORIZATION).cloned();
            let on_upgrade = hyper::upgrade::on(&mut request);
            let config = WebSocketConfig::default()
                .max_message_size(Some(app.http.max_body_bytes))
                .max_frame_size(Some(app.http.max_body_bytes));
            let span = tracing::debug_span!("websocket");
            let websockets = app.websockets.clone();
            websockets.spawn(
                async move {
                    match on_upgrade.await {
                        Ok(upgraded) => {
                            let socket = WebSocketStream::from_raw_socket(
                                TokioIo::new(upgraded),
                                Role::Server,
                                Some(config),
                            )
                            .await;
                            Connection::new(app, principal, credential)
                                .run(socket)
                                .await;
                        }
                        Err(error) => debug!(%error, "the WebSocket upgrade did not complete"),
                    }
                }
                .instrument(span),
            );
            response
        }
        Err(rejection) => rejection.into_response(),
    };
    metrics.record_request("GET", response.status().as_u16(), started.elapsed());
    response
}

fn accept(
    app: &App,
    request: &Request<Incoming>,
) -> Result<(Response<Body>, Principal), Rejection> {
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
    Ok((response, guard::principal(&app.http, headers)))
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
    principal: Principal,
    credential: Option<HeaderValue>,
    bound: Option<Bound>,
    /// What the client's data-layer sessions and listens send it, written as it comes.
    named: mpsc::Sender<Bytes>,
    named_out: mpsc::Receiver<Bytes>,
    /// `tools/list` requests (by id) whose answers get the handle tools added.
    lists: std::collections::HashSet<String>,
}

/// What woke the connection up.
enum Wake {
    Frame(Option<Result<Frame, tokio_tungstenite::tungstenite::Error>>),
    Delivery(Option<Delivery>),
    Named(Bytes),
    Tick,
    Shutdown,
}

/// What to do after a wake.
enum Next {
    Continue,
    Close(CloseCode, &'static str),
    Gone,
}

type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

impl Connection {
    fn new(app: Arc<App>, principal: Principal, credential: Option<HeaderValue>) -> Connection {
        let (named, named_out) = mpsc::channel(64);
        Connection {
            app,
            principal,
            credential,
            bound: None,
            named,
            named_out,
            lists: Default::default(),
        }
    }

    async fn run(mut self, mut socket: Socket) {
        self.app.metrics.websocket_connections.inc();
        let keep_alive = self.app.http.sse_keep_alive;
        let mut ticks = interval_at(crate::clock::from_now(keep_alive), keep_alive);
        let mut last_heard = Instant::now();
        let shutdown = self.app.shutdown.clone();
        loop {
            let wake = tokio::select! {
                frame = socket.next() => Wake::Frame(frame),
                delivery = next_delivery(&mut self.bound) => Wake::Delivery(delivery),
                Some(payload) = self.named_out.recv() => Wake::Named(payload),
                _ = ticks.tick() => Wake::Tick,
                () = shutdown.cancelled() => Wake::Shutdown,
            };
            let next = match wake {
                Wake::Frame(frame) => {
                    last_heard = Instant::now();
                    self.on_frame(frame, &mut socket).await
                }
                Wake::Delivery(Some(delivery)) => {
                    send_delivery(&mut socket, &delivery, &mut self.lists).await
                }
                Wake::Named(payload) => match send_text(&mut socket, payload).await {
                    Ok(()) => Next::Continue,
                    Err(_) => Next::Gone,
                },
                Wake::Delivery(None) if shutdown.is_cancelled() => {
                    Next::Close(CloseCode::Away, "the proxy is shutting down")
                }
                Wake::Delivery(None) => self.on_reader_end(&mut socket).await,
                Wake::Tick if last_heard.elapsed() > keep_alive * 3 => {
                    Next::Close(CloseCode::Away, "no answer to pings")
                }
                Wake::Tick => match socket.send(Frame::Ping(Bytes::new())).await {
                    Ok(()) => Next::Continue,
                    Err(_) => Next::Gone,
                },
                Wake::Shutdown => Next::Close(CloseCode::Away, "the proxy is shutting down"),
            };
            match next {
                Next::Continue => {}
                Next::Close(code, reason) => {
                    close(&mut socket, code, reason).await;
                    break;
                }
                Next::Gone => break,
            }
        }
        if let Some(bound) = self.bound.take() {
            if bound.own {
                self.app.registry.end(bound.session.id());
            }
        }
        self.app.metrics.websocket_connections.dec();
    }

    async fn on_frame(
        &mut self,
        frame: Option<Result<Frame, tokio_tungstenite::tungstenite::Error>>,
        socket: &mut Socket,
    ) -> Next {
        match frame {
            None => Next::Gone,
            Some(Err(tokio_tungstenite::tungstenite::Error::Capacity(error))) => {
                debug!(%error, "frame over the size limit");
                Next::Close(CloseCode::Size, "message too big")
            }
            Some(Err(error)) => {
                debug!(%error, "WebSocket read failed");
                Next::Gone
            }
            Some(Ok(Frame::Text(text))) => {
                for reply in self.on_message(Bytes::from(text)).await {
                    if send_text(socket, reply).await.is_err() {
                        return Next::Gone;
                    }
                }
                Next::Continue
            }
            Some(Ok(Frame::Binary(_))) => {
                Next::Close(CloseCode::Unsupported, "MCP messages are UTF-8 text frames")
            }
            Some(Ok(Frame::Close(_))) => Next::Gone,
            Some(Ok(_)) => Next::Continue,
        }
    }

    /// The session's reader stopped: resumed elsewhere (the client is told), or the session
    /// ended (expired, or ended from another connection).
    async fn on_reader_end(&mut self, socket: &mut Socket) -> Next {
        let Some(bound) = self.bound.take() else {
            return Next::Continue;
        };
        if bound.reader.replaced() {
            let notice = session_methods::detached(bound.session.id());
            if send_text(socket, notice).await.is_err() {
                return Next::Gone;
            }
            return Next::Close(
                CloseCode::from(CLOSE_RESUMED_ELSEWHERE),
                "the session was resumed on another connection",
            );
        }
        Next::Close(CloseCode::Normal, "the session ended")
    }

    /// One client message; returns what to send back at once (before any further delivery).
    async fn on_message(&mut self, text: Bytes) -> Vec<Bytes> {
        let message = match session_methods::parse(text) {
            Ok(message) => message,
            Err(error) => return vec![Rejection::from(error).error_body()],
        };
        let outcome = match message.method().filter(|_| message.kind() == Kind::Request) {
            Some(protocol::START) => self.start(&message).await,
            Some(protocol::RESUME) => self.resume(&message).await,
            Some(protocol::END) => self.end(&message).await,
            Some(method) if is_session_method(method) => {
                Err(Rejection::unknown_session_method(&message))
            }
            _ => self.forward(message).await,
        };
        outcome.unwrap_or_else(|rejection| vec![rejection.error_body()])
    }

    async fn start(&mut self, message: &Message) -> Result<Vec<Bytes>, Rejection> {
        let id = message.id().cloned().unwrap_or(Value::Null);
        match &mut self.bound {
            Some(bound) if !bound.own => Err(Rejection::conflict(format!(
                "this connection already carries session {}; open another connection for another session",
                bound.session.id()
            ))
            .with_id(Some(&id))),
            // The connection's own session becomes a protocol-level one: it now outlives the
            // connection and numbers its events from here on.
            Some(bound) => {
                bound.session.number_events();
                bound.own = false;
                bound.session.store_synced().await;
                Ok(vec![session_methods::started(&id, &bound.session)])
            }
            None => {
                let session =
                    session_methods::start(&self.app, self.principal.clone(), self.credential.clone())
                        .await
                        .map_err(|r| r.with_id(Some(&id)))?;
                let reader = session.attach(StreamKey::Standalone, None);
                let reply = session_methods::started(&id, &session);
                self.bound = Some(Bound {
                    session,
                    reader,
                    own: false,
                });
                Ok(vec![reply])
            }
        }
    }

    async fn resume(&mut self, message: &Message) -> Result<Vec<Bytes>, Rejection> {
        let id = message.id().cloned().unwrap_or(Value::Null);
        if let Some(bound) = &self.bound {
            return Err(Rejection::conflict(format!(
                "this connection already carries session {}; resume on a new connection",
                bound.session.id()
            ))
            .with_id(Some(&id)));
        }
        let (session_id, last) =
            session_methods::resume_params(message).map_err(|r| r.with_id(Some(&id)))?;
        let (session, resumed) = session_methods::resume(
            &self.app,
            &self.principal,
            self.credential.as_ref(),
            &session_id,
            last,
            traced::context_of(message),
        )
        .await
        .map_err(|r| r.with_id(Some(&id)))?;
        let mut replies = vec![session_methods::resumed(&id, resumed.catchup)];
        if let Some(first) = &resumed.first {
            replies.extend(payloads(first));
        }
        self.bound = Some(Bound {
            session,
            reader: resumed.reader,
            own: false,
        });
        Ok(replies)
    }

    async fn end(&mut self, message: &Message) -> Result<Vec<Bytes>, Rejection> {
        let id = message.id().cloned().unwrap_or(Value::Null);
        let session_id = session_methods::end_params(message).map_err(|r| r.with_id(Some(&id)))?;
        session_methods::find(&self.app, &self.principal, None, &session_id)
            .await
            .map_err(|r| r.with_id(Some(&id)))?;
        // Stop reading first: nothing of the session may follow the answer.
        if self
            .bound
            .as_ref()
            .is_some_and(|bound| bound.session.id() == session_id)
        {
            self.bound = None;
        }
        session_methods::end(&self.app, &self.principal, &session_id)
            .await
            .map_err(|r| r.with_id(Some(&id)))?;
        Ok(vec![session_methods::ended(&id)])
    }

    /// Any other message goes to the connection's session, opened now if it has none.
    async fn forward(&mut self, mut message: Message) -> Result<Vec<Bytes>, Rejection> {
        let mut span = RequestSpan::start(&self.app, None, &mut message);
        span.set("mcp_proxy.era", "legacy");
        let outcome = self.forward_message(message).await;
        if let Some(bound) = &self.bound {
            span.set(
                "mcp.session.id",
                crate::redact::session(bound.session.id()).to_string(),
            );
        }
        span.finish_message(&outcome);
        outcome
    }

    async fn forward_message(&mut self, message: Message) -> Result<Vec<Bytes>, Rejection> {
        let id = message.id().cloned();
        if self.bound.is_none() {
            let session = self
                .app
                .registry
                .create(
                    self.principal.clone(),
                    Shape::SingleStream,
                    self.credential.clone(),
                )
                .map_err(|e| Rejection::session(&e).with_id(id.as_ref()))?;
            let reader = session.attach(StreamKey::Standalone, None);
            self.bound = Some(Bound {
                session,
                reader,
                own: true,
            });
        }
        let Some(bound) = &self.bound else {
            return Ok(Vec::new());
        };
        let transport = bound.session.clone();
        let (session, message) = match self.named(&transport, message).await? {
            Named::Done(replies) => return Ok(replies),
            Named::To(session, message) => (session, message),
        };
        let kind = message.kind();
        let outcome = self.app.registry.deliver(&session, message).await;
        match (outcome.map(|_| ()), kind) {
            (Err(error), Kind::Request) => Ok(vec![failed_request(
                id.as_ref().unwrap_or(&Value::Null),
                &error,
            )]),
            (Err(error), _) => {
                debug!(%error, "a client message could not be forwarded");
                Ok(Vec::new())
            }
            (Ok(()), _) => Ok(Vec::new()),
        }
    }
}

/// Where a message of the connection goes, once sessions named in messages had their say.
enum Named {
    /// Taken care of: these go back at once (the rest follows on `Connection::named`).
    Done(Vec<Bytes>),
    /// To this session, as this message.
    To(Arc<Session>, Message),
}

impl Connection {
    /// A request naming a data-layer session or a handle (or a `sessions/*` call, a listen) is
    /// answered or relayed here; an answer to a named session's question goes to it.
    async fn named(
        &mut self,
        transport: &Arc<Session>,
        message: Message,
    ) -> Result<Named, Rejection> {
        let app = &self.app;
        match message.kind() {
            Kind::Request => {
                let credential = self.credential.clone();
                let routed =
                    legacy::route(app, credential, transport, message, &self.principal).await?;
                match routed {
                    Routed::Answered(answer) => Ok(Named::Done(vec![answer])),
                    Routed::Listen { session, scope, id } => {
                        listen::relay(app, session, id, scope, self.named.clone());
                        Ok(Named::Done(Vec::new()))
                    }
                    Routed::To(session, message) => {
                        let (app, out) = (app.clone(), self.named.clone());
                        tokio::spawn(async move {
                            legacy::relay_call(&app, session, message, out).await
                        });
                        Ok(Named::Done(Vec::new()))
                    }
                    Routed::Transport(message) => Ok(Named::To(transport.clone(), message)),
                    Routed::ToolsList(message) => {
                        // The answer comes on the connection's one stream: rewritten there.
                        if let Some(id) = message.id() {
                            self.lists.insert(id_key(id));
                        }
                        Ok(Named::To(transport.clone(), message))
                    }
                }
            }
            Kind::Response if !message.id().is_some_and(|id| transport.awaits_answer(id)) => {
                let id = message.id().cloned().unwrap_or(Value::Null);
                let named = app
                    .data_layer
                    .awaiting_answer(app, &self.principal, &id)
                    .await;
                Ok(Named::To(
                    named.unwrap_or_else(|| transport.clone()),
                    message,
                ))
            }
            _ => Ok(Named::To(transport.clone(), message)),
        }
    }
}

async fn next_delivery(bound: &mut Option<Bound>) -> Option<Delivery> {
    match bound {
        Some(bound) => bound.reader.next().await,
        None => std::future::pending().await,
    }
}

/// The messages of a delivery, logged ones first, end-of-stream markers left out.
fn payloads(delivery: &Delivery) -> Vec<Bytes> {
    delivery
        .events
        .iter()
        .map(|event| event.payload.clone())
        .filter(|payload| !payload.is_empty())
        .chain(delivery.invalidations.iter().cloned())
        .collect()
}

async fn send_delivery(
    socket: &mut Socket,
    delivery: &Delivery,
    lists: &mut std::collections::HashSet<String>,
) -> Next {
    for payload in payloads(delivery) {
        let payload = with_handle_tools(payload, lists);
        if socket.feed(text_frame(payload)).await.is_err() {
            return Next::Gone;
        }
    }
    match socket.flush().await {
        Ok(()) => Next::Continue,
        Err(_) => Next::Gone,
    }
}

/// A `tools/list` answer the connection asked for the handle tools in, rewritten; anything
/// else as it is.
fn with_handle_tools(payload: Bytes, lists: &mut std::collections::HashSet<String>) -> Bytes {
    if lists.is_empty() {
        return payload;
    }
    let answered = Message::parse(payload.clone())
        .ok()
        .filter(|message| message.kind() == Kind::Response)
        .and_then(|message| message.id().map(id_key));
    match answered.filter(|id| lists.remove(id)) {
        Some(_) => handles::rewrite_tools_list_response(payload),
        None => payload,
    }
}

async fn send_text(
    socket: &mut Socket,
    payload: Bytes,
) -> Result<(), tokio_tungstenite::tungstenite::Error> {
    socket.send(text_frame(payload)).await
}

fn text_frame(payload: Bytes) -> Frame {
    match Utf8Bytes::try_from(payload) {
        Ok(text) => Frame::Text(text),
        // Every payload is JSON the proxy parsed or wrote: valid UTF-8.
        Err(_) => Frame::Text(Utf8Bytes::from_static("")),
    }
}

async fn close(socket: &mut Socket, code: CloseCode, reason: &'static str) {
    let _ = socket
        .close(Some(CloseFrame {
            code,
            reason: Utf8Bytes::from_static(reason),
        }))
        .await;
}
