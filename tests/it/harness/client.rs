//! A small HTTP client that speaks Streamable HTTP (and the legacy SSE front) over real
//! sockets, one fresh connection a request.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use mcp_session_proxy::wire::sse::Decoder;
use serde_json::{json, Value};
use tokio::net::TcpStream;

use super::{within, Reply};

/// A Streamable HTTP client with just enough state: its session id, credentials, next id.
#[derive(Clone)]
pub struct Client {
    pub addr: SocketAddr,
    pub session: Option<String>,
    pub authorization: Option<String>,
    pub protocol_version: Option<String>,
    /// Extra headers sent with every request (a trusted principal header, say).
    pub extra_headers: Vec<(String, String)>,
    /// The MCP endpoint: `/mcp`, or `/servers/<name>/mcp` in a gateway.
    pub path: String,
    /// The loopback address its connections come from (`127.0.0.2`, say); `None`: the
    /// system's choice (127.0.0.1).
    pub from: Option<std::net::IpAddr>,
    next_id: u64,
}

impl Client {
    /// A client of the proxy at `addr` with a session initialized in `version`.
    pub async fn initialized(addr: SocketAddr, version: &str) -> Client {
        let mut client = Client::new(addr);
        client.initialize(version).await;
        client
    }

    pub fn new(addr: SocketAddr) -> Client {
        Client {
            addr,
            session: None,
            authorization: None,
            protocol_version: None,
            extra_headers: Vec::new(),
            path: "/mcp".into(),
            from: None,
            next_id: 1,
        }
    }

    /// Sends one request to the MCP endpoint on a fresh connection.
    pub async fn send(
        &self,
        method: Method,
        headers: &[(&str, &str)],
        body: Option<Bytes>,
    ) -> Reply {
        self.send_to(&self.path, method, headers, body).await
    }

    /// Sends one request to `path` on a fresh connection.
    pub async fn send_to(
        &self,
        path: &str,
        method: Method,
        headers: &[(&str, &str)],
        body: Option<Bytes>,
    ) -> Reply {
        let stream = within("the connection", self.connect()).await;
        let handshake = hyper::client::conn::http1::handshake(TokioIo::new(stream));
        let (mut sender, connection) = within("the HTTP handshake", handshake)
            .await
            .expect("handshake");
        tokio::spawn(connection);
        let mut request = Request::builder().method(method).uri(path);
        if !headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("host"))
        {
            request = request.header("host", self.addr.to_string());
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(body.unwrap_or_default())).unwrap();
        let response = within("the response head", sender.send_request(request))
            .await
            .expect("response");
        let (parts, body) = response.into_parts();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
            decoder: Decoder::new(1 << 24),
            ended: false,
        }
    }

    /// A connection to the proxy, from `from` when set.
    async fn connect(&self) -> TcpStream {
        let Some(from) = self.from else {
            return TcpStream::connect(self.addr).await.expect("connect");
        };
        let socket = match from {
            std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .expect("a socket");
        socket
            .bind(SocketAddr::new(from, 0))
            .unwrap_or_else(|e| panic!("cannot connect from {from}: {e}"));
        socket.connect(self.addr).await.expect("connect")
    }

    /// A GET of `path` (`/sse`) asking for an event stream, as a 2024-11-05 client opens one.
    pub async fn get_sse(&self, path: &str) -> Reply {
        self.send_to(path, Method::GET, &[("accept", "text/event-stream")], None)
            .await
    }

    /// Opens a 2024-11-05 SSE stream at `path` (`/sse`): the stream, and the endpoint its first
    /// event names for the client's POSTs.
    pub async fn open_legacy_sse(&self, path: &str) -> (Reply, String) {
        let mut stream = self.get_sse(path).await;
        assert_eq!(stream.status, StatusCode::OK, "the SSE stream opens");
        let endpoint = within("the endpoint event", stream.next_event())
            .await
            .expect("an endpoint event");
        assert_eq!(endpoint.event.as_deref(), Some("endpoint"));
        (stream, endpoint.data)
    }

    fn session_headers(&self) -> Vec<(&str, &str)> {
        let mut headers = Vec::new();
        if let Some(session) = &self.session {
            headers.push(("mcp-session-id", session.as_str()));
        }
        if let Some(authorization) = &self.authorization {
            headers.push(("authorization", authorization.as_str()));
        }
        if let Some(version) = &self.protocol_version {
            headers.push(("mcp-protocol-version", version.as_str()));
        }
        for (name, value) in &self.extra_headers {
            headers.push((name.as_str(), value.as_str()));
        }
        headers
    }

    /// Calls `tool` (a demo's `sleep`, by the name this client sees) for a minute under the id
    /// `slow-1`, then cancels it: the call's stream, which should end without an answer.
    pub async fn call_then_cancel(&self, tool: &str) -> Reply {
        let slow = self
            .post(
                &serde_json::json!({ "jsonrpc": "2.0", "id": "slow-1", "method": "tools/call",
                "params": { "name": tool, "arguments": { "ms": 60000 } } }),
            )
            .await;
        let cancel = self
            .post(
                &serde_json::json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": { "requestId": "slow-1", "reason": "changed my mind" } }),
            )
            .await;
        assert_eq!(cancel.status, StatusCode::ACCEPTED);
        slow
    }

    /// POSTs a message with the headers a well-behaved client sends.
    pub async fn post(&self, message: &Value) -> Reply {
        let mut headers = self.session_headers();
        headers.push(("content-type", "application/json"));
        headers.push(("accept", "application/json, text/event-stream"));
        self.send(
            Method::POST,
            &headers,
            Some(Bytes::from(message.to_string())),
        )
        .await
    }

    /// POSTs `text` as it is (JSON a `Value` cannot hold, such as a duplicated member name)
    /// with the headers a well-behaved client sends.
    pub async fn post_text(&self, text: &str) -> Reply {
        let mut headers = self.session_headers();
        headers.push(("content-type", "application/json"));
        headers.push(("accept", "application/json, text/event-stream"));
        self.send(Method::POST, &headers, Some(Bytes::from(text.to_owned())))
            .await
    }

    /// Opens the GET stream, or resumes the stream named by `last_event_id`.
    pub async fn get(&self, last_event_id: Option<&str>) -> Reply {
        let mut headers = self.session_headers();
        headers.push(("accept", "text/event-stream"));
        if let Some(id) = last_event_id {
            headers.push(("last-event-id", id));
        }
        self.send(Method::GET, &headers, None).await
    }

    pub async fn delete(&self) -> StatusCode {
        self.send(Method::DELETE, &self.session_headers(), None)
            .await
            .status
    }

    pub fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// initialize + notifications/initialized; keeps the session id.
    pub async fn initialize(&mut self, version: &str) -> Value {
        match self.try_initialize(version).await {
            Ok(response) => response,
            Err(status) => panic!("initialize answered {status}"),
        }
    }

    /// [`Client::initialize`], or the status of an `initialize` that was refused.
    pub async fn try_initialize(&mut self, version: &str) -> Result<Value, StatusCode> {
        let id = self.next_id();
        let reply = self
            .post(&json!({
                "jsonrpc": "2.0", "id": id, "method": "initialize",
                "params": {
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": { "name": "harness", "version": "1" }
                }
            }))
            .await;
        if reply.status != StatusCode::OK {
            return Err(reply.status);
        }
        let session = reply
            .headers
            .get("mcp-session-id")
            .expect("initialize answers with Mcp-Session-Id")
            .to_str()
            .unwrap()
            .to_owned();
        let response = reply.response().await;
        self.session = Some(session);
        self.protocol_version = Some(version.to_owned());
        let ack = self
            .post(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await;
        assert_eq!(ack.status, StatusCode::ACCEPTED);
        Ok(response)
    }

    /// Sends a request and returns its response message (from JSON or from the SSE stream).
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id();
        let reply = self
            .post(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{method}");
        let response = reply.response().await;
        assert_eq!(
            response["id"], id,
            "{method}: the response carries the client's id"
        );
        response
    }

    /// Calls a tool and returns the text of its first content item.
    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> String {
        let response = self
            .request(
                "tools/call",
                json!({ "name": name, "arguments": arguments }),
            )
            .await;
        response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} answered {response}"))
            .to_owned()
    }
}
