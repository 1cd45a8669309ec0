//! One client session over any of the three client transports — Streamable HTTP (each
//! request's answer on its own POST stream, the rest on the GET stream), WebSocket and the
//! 2024-11-05 SSE pair (everything on one stream) — so that one scenario runs on each. Every
//! wait is bounded ([`within`]).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use http::{Method, StatusCode};
use serde_json::{json, Value};

use super::ws::Ws;
use super::{within, Client, Reply};

/// A client transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    StreamableHttp,
    WebSocket,
    LegacySse,
}

/// A client session at one MCP endpoint, initialized (declaring elicitation and roots).
pub struct Line {
    pub transport: Transport,
    client: Client,
    ws: Option<Ws>,
    /// The 2024-11-05 endpoint POSTs go to.
    endpoint: Option<String>,
    /// The GET stream (Streamable HTTP) or the one stream (2024-11-05 SSE).
    stream: Option<Reply>,
    /// Each request's POST stream (Streamable HTTP), by id.
    calls: HashMap<String, Reply>,
    /// Every message read off the one stream (WebSocket, SSE) or the GET stream, in order.
    log: Vec<Value>,
    /// How far [`Line::server_message`] has looked in `log`.
    scanned: usize,
    /// Messages of the one stream read by [`Line::server_message`] and not yet by
    /// [`Line::next_for`].
    pending: VecDeque<Value>,
    next_id: u64,
}

impl Line {
    /// A session at `path` (`/servers/<name>/mcp`; the SSE pair at `/servers/<name>/sse`).
    pub async fn open(addr: SocketAddr, path: &str, transport: Transport) -> Line {
        let mut client = Client::new(addr);
        client.path = path.to_owned();
        let mut line = Line {
            transport,
            client,
            ws: None,
            endpoint: None,
            stream: None,
            calls: HashMap::new(),
            log: Vec::new(),
            scanned: 0,
            pending: VecDeque::new(),
            next_id: 1,
        };
        match transport {
            Transport::StreamableHttp => {}
            Transport::WebSocket => {
                let protocol = [("sec-websocket-protocol", "mcp")];
                let ws = Ws::connect_with(addr, path, &protocol).await;
                line.ws = Some(ws.expect("the WebSocket handshake succeeds"));
            }
            Transport::LegacySse => {
                let sse = path.replace("/mcp", "/sse");
                let (stream, endpoint) = line.client.open_legacy_sse(&sse).await;
                line.stream = Some(stream);
                line.endpoint = Some(endpoint);
            }
        }
        let version = match transport {
            Transport::LegacySse => "2024-11-05",
            _ => "2025-11-25",
        };
        let capabilities = json!({ "elicitation": {}, "roots": { "listChanged": true } });
        let params = json!({ "protocolVersion": version, "capabilities": capabilities,
                             "clientInfo": { "name": "line", "version": "1" } });
        let id = line.start("initialize", params).await;
        let initialized = line.answer(&id).await;
        assert!(initialized["result"].is_object(), "{initialized}");
        if transport == Transport::StreamableHttp {
            line.client.protocol_version = Some(version.to_owned());
        }
        line.notify("notifications/initialized", json!({})).await;
        if transport == Transport::StreamableHttp {
            let events = line.client.get(None).await;
            assert_eq!(events.status, StatusCode::OK, "the GET stream opens");
            line.stream = Some(events);
        }
        line
    }

    /// Sends a request and waits for its answer (other messages are kept).
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.start(method, params).await;
        self.answer(&id).await
    }

    /// Sends a request without waiting for its answer: its id.
    pub async fn start(&mut self, method: &str, params: Value) -> Value {
        let id = json!(format!("r{}", self.next_id));
        self.next_id += 1;
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.send(message).await;
        id
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await;
    }

    /// Sends any message as it is.
    pub async fn send(&mut self, message: Value) {
        match self.transport {
            Transport::StreamableHttp => {
                let reply = self.client.post(&message).await;
                if message.get("method").is_some() && message.get("id").is_some() {
                    assert_eq!(reply.status, StatusCode::OK, "{message}");
                    if message["method"] == "initialize" {
                        let session = reply.headers.get("mcp-session-id").expect("a session");
                        self.client.session = Some(session.to_str().unwrap().to_owned());
                    }
                    self.calls.insert(message["id"].to_string(), reply);
                } else {
                    assert_eq!(reply.status, StatusCode::ACCEPTED, "{message}");
                }
            }
            Transport::WebSocket => self.ws.as_mut().unwrap().send(message).await,
            Transport::LegacySse => {
                let endpoint = self.endpoint.clone().unwrap();
                let headers = [("content-type", "application/json")];
                let body = Some(message.to_string().into());
                let sent = self
                    .client
                    .send_to(&endpoint, Method::POST, &headers, body)
                    .await;
                assert_eq!(sent.status, StatusCode::ACCEPTED, "{message}");
            }
        }
    }

    /// The answer to request `id`.
    pub async fn answer(&mut self, id: &Value) -> Value {
        self.until_answer(id).await.1
    }

    /// What came on request `id`'s stream before its answer (Streamable HTTP: its POST stream;
    /// WebSocket and SSE: the one stream, since the request was sent), and the answer.
    pub async fn until_answer(&mut self, id: &Value) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let message = self.next_for(id).await;
            if message["id"] == *id && message.get("method").is_none() {
                return (before, message);
            }
            before.push(message);
        }
    }

    /// The next message on request `id`'s stream (Streamable HTTP), or on the one stream.
    pub async fn next_for(&mut self, id: &Value) -> Value {
        match self.transport {
            Transport::StreamableHttp => {
                let key = id.to_string();
                let reply = self.calls.get_mut(&key).expect("a request sent");
                if !reply.is_sse() {
                    // Answered at once, as JSON.
                    return self.calls.remove(&key).unwrap().json().await;
                }
                let received = within("a message on the request's stream", reply.next_message());
                received
                    .await
                    .expect("the request's stream goes on")
                    .message
            }
            _ => match self.pending.pop_front() {
                Some(message) => message,
                None => self.read().await,
            },
        }
    }

    /// The next message off the GET stream (Streamable HTTP) or the one stream, read now or
    /// before (while waiting for an answer), for which `wanted` holds; those before it are
    /// passed over.
    pub async fn server_message(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        within("a message of the server's", async {
            loop {
                if let Some(at) = self.log[self.scanned..].iter().position(&wanted) {
                    self.scanned += at + 1;
                    return self.log[self.scanned - 1].clone();
                }
                self.scanned = self.log.len();
                let message = self.read().await;
                if self.transport != Transport::StreamableHttp {
                    self.pending.push_back(message);
                }
            }
        })
        .await
    }

    /// Every message read off the GET stream (Streamable HTTP) or the one stream so far.
    pub fn read_so_far(&self) -> &[Value] {
        &self.log
    }

    /// The next message off the GET stream or the one stream, logged.
    async fn read(&mut self) -> Value {
        let message = match self.transport {
            Transport::WebSocket => self.ws.as_mut().unwrap().recv().await,
            _ => {
                let stream = self.stream.as_mut().expect("a stream");
                let received = within("a message on the stream", stream.next_message());
                received.await.expect("the stream stays open").message
            }
        };
        self.log.push(message.clone());
        message
    }
}
