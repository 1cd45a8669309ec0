//! A WebSocket connection's loop: it reads the client's frames (each message handled in
//! `messages`), writes the session's deliveries and what named sessions send, pings an idle
//! client and closes the connection when the client, the session or the proxy is done.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use tokio::time::{interval_at, Instant};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Message as Frame, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;
use tracing::debug;

use super::{Bound, Connection};
use crate::front::session_methods;
use crate::session::data_layer::handles;
use crate::session::Delivery;
use crate::session::EndReason;
use crate::wire::jsonrpc::{id_key, Kind, Message};

/// Close code (private range) for a connection whose session was resumed on another.
const CLOSE_RESUMED_ELSEWHERE: u16 = 4001;

/// What woke the connection up.
enum Wake {
    Frame(Option<Result<Frame, tokio_tungstenite::tungstenite::Error>>),
    Delivery(Option<Delivery>),
    Named(Bytes),
    Tick,
    Shutdown,
    /// The token that opened the connection is no longer accepted.
    Expired,
}

/// Ready when `expires` passes; never without it.
async fn expiry(expires: Option<Instant>) {
    match expires {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What to do after a wake.
enum Next {
    Continue,
    Close(CloseCode, &'static str),
    Gone,
}

type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

impl Connection {
    pub(super) async fn run(mut self, mut socket: Socket) {
        self.app.metrics.websocket_connections.inc();
        let keep_alive = self.app.http.now().sse_keep_alive;
        let mut ticks = interval_at(crate::base::clock::from_now(keep_alive), keep_alive);
        let mut last_heard = Instant::now();
        let shutdown = self.app.shutdown.clone();
        loop {
            let wake = tokio::select! {
                frame = socket.next() => Wake::Frame(frame),
                delivery = next_delivery(&mut self.bound) => Wake::Delivery(delivery),
                Some(payload) = self.named_out.recv() => Wake::Named(payload),
                _ = ticks.tick() => Wake::Tick,
                () = shutdown.cancelled() => Wake::Shutdown,
                () = expiry(self.expires) => Wake::Expired,
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
                Wake::Expired => Next::Close(
                    CloseCode::Policy,
                    "the access token expired: connect again with a fresh one",
                ),
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
                self.app
                    .registry
                    .end(bound.session.id(), EndReason::StreamClosed);
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
}

async fn next_delivery(bound: &mut Option<Bound>) -> Option<Delivery> {
    match bound {
        Some(bound) => bound.reader.next().await,
        None => std::future::pending().await,
    }
}

/// The messages of a delivery, logged ones first, end-of-stream markers left out.
pub(super) fn payloads(delivery: &Delivery) -> Vec<Bytes> {
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
    let answered = Message::parse_from_server(payload.clone())
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
