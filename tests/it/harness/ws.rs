//! A WebSocket MCP client for tests: one JSON-RPC message per text frame, subprotocol `mcp`.
//! Every wait on the peer is bounded ([`within`]).

use std::collections::VecDeque;
use std::net::SocketAddr;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error, Message as Frame};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::within;

pub struct Ws {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// Messages read while waiting for something else, in arrival order.
    pending: VecDeque<Value>,
}

/// Request ids unique across connections, as a client resuming a session on a new connection
/// keeps numbering where it was (a replayed answer is then never mistaken for a new one).
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1000);

impl Ws {
    /// Connects to `/mcp` with subprotocol `mcp`.
    pub async fn connect(addr: SocketAddr) -> Ws {
        Ws::connect_with(addr, "/mcp", &[("sec-websocket-protocol", "mcp")])
            .await
            .expect("the WebSocket handshake succeeds")
    }

    pub async fn connect_with(
        addr: SocketAddr,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Ws, Error> {
        let mut request = format!("ws://{addr}{path}").into_client_request()?;
        for (name, value) in headers {
            request.headers_mut().insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        let (socket, _) = within(
            "the WebSocket handshake",
            tokio_tungstenite::connect_async(request),
        )
        .await?;
        Ok(Ws {
            socket,
            pending: VecDeque::new(),
        })
    }

    pub async fn send(&mut self, message: Value) {
        self.send_frame(Frame::text(message.to_string())).await;
    }

    /// Sends `frame` (bounded: a peer that stops reading fills the socket's buffers).
    pub async fn send_frame(&mut self, frame: Frame) {
        within("the frame to be sent", self.socket.send(frame))
            .await
            .expect("the frame is sent");
    }

    /// The next message, in arrival order (already read ones first); bounded.
    pub async fn recv(&mut self) -> Value {
        if let Some(message) = self.pending.pop_front() {
            return message;
        }
        self.read().await.expect("the connection stays open")
    }

    /// The next frame of any kind, as the socket delivers it (pings included).
    pub async fn next_frame(&mut self) -> Option<Frame> {
        within("a WebSocket frame", self.socket.next())
            .await
            .and_then(Result::ok)
    }

    /// Reads the next text frame off the socket (bounded); `None` once the connection is closed.
    async fn read(&mut self) -> Option<Value> {
        within("a WebSocket message", async {
            loop {
                match self.socket.next().await? {
                    Ok(Frame::Text(text)) => {
                        return Some(serde_json::from_str(&text).expect("text frames are JSON"))
                    }
                    Ok(Frame::Close(_)) | Err(_) => return None,
                    Ok(_) => continue,
                }
            }
        })
        .await
    }

    /// Sends a request and returns its response; other messages are kept for `recv`.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        self.response_to(json!(id)).await
    }

    /// Waits (bounded, however many other messages come first) for the response with `id`;
    /// other messages are kept for `recv`.
    pub async fn response_to(&mut self, id: Value) -> Value {
        if let Some(at) = self
            .pending
            .iter()
            .position(|m| m["id"] == id && m.get("method").is_none())
        {
            return self.pending.remove(at).unwrap();
        }
        within("the response", async {
            loop {
                let message = self.read().await.expect("the connection stays open");
                if message["id"] == id && message.get("method").is_none() {
                    return message;
                }
                self.pending.push_back(message);
            }
        })
        .await
    }

    /// `session/start`: the new session's id.
    pub async fn start_session(&mut self) -> String {
        let started = self.request("session/start", json!({})).await;
        started["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("a session id: {started}"))
            .to_owned()
    }

    /// `session/resume` from `last` (a `sessionEventId`): the response's `result`.
    pub async fn resume(&mut self, session_id: &str, last: &Value) -> Value {
        let resumed = self
            .request(
                "session/resume",
                json!({ "sessionId": session_id, "lastSessionEventId": last }),
            )
            .await;
        assert!(resumed["result"].is_object(), "resumed: {resumed}");
        resumed["result"].clone()
    }

    /// Takes the messages read while waiting for responses.
    pub fn take_pending(&mut self) -> Vec<Value> {
        self.pending.drain(..).collect()
    }

    /// initialize + notifications/initialized.
    pub async fn initialize(&mut self) -> Value {
        let result = self
            .request(
                "initialize",
                json!({ "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": { "name": "ws-test", "version": "1" } }),
            )
            .await;
        self.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await;
        result
    }

    /// Calls a tool and returns its first text.
    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> String {
        let reply = self
            .request(
                "tools/call",
                json!({ "name": name, "arguments": arguments }),
            )
            .await;
        reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("a tool result: {reply}"))
            .to_owned()
    }

    /// Every message until the server closes the connection, and its close frame.
    pub async fn until_closed(&mut self) -> (Vec<Value>, Option<CloseFrame>) {
        let mut messages: Vec<Value> = self.pending.drain(..).collect();
        let close = within("the server to close", async {
            loop {
                match self.socket.next().await {
                    Some(Ok(Frame::Text(text))) => {
                        messages.push(serde_json::from_str(&text).expect("JSON"))
                    }
                    Some(Ok(Frame::Close(frame))) => return frame,
                    Some(Ok(_)) => continue,
                    Some(Err(_)) | None => return None,
                }
            }
        })
        .await;
        (messages, close)
    }

    /// Drops the TCP connection without a close handshake, as a network failure would.
    pub fn cut(self) {
        drop(self.socket);
    }
}
