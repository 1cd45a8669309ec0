//! A client session of the load generator, legacy or 2026-07-28, and how many of them call.

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use mcp_session_proxy::upstream::http_client::HttpClient;
use mcp_session_proxy::wire::sse;
use serde_json::{json, Value};

/// The revision of `--era modern`.
pub(crate) const MODERN: &str = "2026-07-28";

/// One client session: a legacy one (`id`), or a 2026-07-28 client (`modern`, with a
/// `principal` unless anonymous).
pub(crate) struct Session {
    pub(crate) client: HttpClient,
    pub(crate) url: http::Uri,
    pub(crate) id: Option<HeaderValue>,
    pub(crate) modern: bool,
    pub(crate) principal: Option<HeaderValue>,
    /// The data-layer session it calls within (its cookie).
    pub(crate) cookie: Option<Value>,
    pub(crate) next: u64,
}

/// How many sessions call how often, and in which era.
pub(crate) struct Shape {
    pub(crate) sessions: usize,
    pub(crate) calls: usize,
    pub(crate) warmup: usize,
    pub(crate) modern: bool,
    pub(crate) data_layer: bool,
    /// 2026-07-28 clients without a credential.
    pub(crate) anonymous: bool,
    /// The credential of every request, instead of one per session.
    pub(crate) authorization: Option<HeaderValue>,
    /// The client the sessions share: plain, or trusting a CA for https://.
    pub(crate) client: HttpClient,
    /// The process whose CPU time per call is reported.
    pub(crate) cpu_pid: Option<u32>,
}

impl Session {
    /// A 2026-07-28 client: nothing to open; its credential (unless `anonymous`) makes it a
    /// principal of its own.
    pub(crate) fn modern(
        client: &HttpClient,
        url: &str,
        n: usize,
        anonymous: bool,
    ) -> Result<Session, String> {
        let principal = match anonymous {
            true => None,
            false => Some(
                HeaderValue::from_str(&format!("Bearer mcp-bench-{n}"))
                    .map_err(|e| e.to_string())?,
            ),
        };
        Ok(Session {
            client: client.clone(),
            url: url.parse().map_err(|e| format!("{url}: {e}"))?,
            id: None,
            modern: true,
            cookie: None,
            principal,
            next: 1,
        })
    }

    pub(crate) async fn open(
        client: &HttpClient,
        url: &str,
        version: &str,
        principal: Option<HeaderValue>,
    ) -> Result<Session, String> {
        let mut session = Session {
            client: client.clone(),
            url: url.parse().map_err(|e| format!("{url}: {e}"))?,
            id: None,
            modern: false,
            principal,
            cookie: None,
            next: 1,
        };
        let response = session
            .post(
                json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": { "name": "mcp-bench", "version": "1" } } }),
            )
            .await?;
        session.id = response.headers().get("mcp-session-id").cloned();
        answer(response).await?;
        let ack = session
            .post(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await?;
        let _ = ack.into_body().collect().await;
        Ok(session)
    }

    /// Creates the data-layer session this 2026-07-28 client calls within.
    pub(crate) async fn create_data_session(&mut self) -> Result<(), String> {
        let created = self
            .post(
                json!({ "jsonrpc": "2.0", "id": 0, "method": "sessions/create",
                          "params": { "_meta": modern_meta() } }),
            )
            .await?;
        let created = answer(created).await?;
        let session = &created["result"]["session"];
        if !session["sessionId"].is_string() {
            return Err(format!("sessions/create answered {created}"));
        }
        self.cookie = Some(json!({ "sessionId": session["sessionId"], "state": session["state"] }));
        Ok(())
    }

    pub(crate) async fn post(&self, message: Value) -> Result<Response<Incoming>, String> {
        let mut request = Request::new(Full::new(Bytes::from(message.to_string())));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.url.clone();
        let headers = request.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if let Some(principal) = &self.principal {
            headers.insert(header::AUTHORIZATION, principal.clone());
        }
        if self.modern {
            headers.insert("mcp-protocol-version", HeaderValue::from_static(MODERN));
            for (name, field) in [("mcp-method", "method"), ("mcp-name", "name")] {
                let value = message[field]
                    .as_str()
                    .or(message["params"][field].as_str())
                    .and_then(|v| HeaderValue::from_str(v).ok());
                if let Some(value) = value {
                    headers.insert(name, value);
                }
            }
        } else {
            headers.insert(
                "mcp-protocol-version",
                HeaderValue::from_static("2025-06-18"),
            );
        }
        if let Some(id) = &self.id {
            headers.insert("mcp-session-id", id.clone());
        }
        self.client
            .request(request)
            .await
            .map_err(|e| e.to_string())
    }

    /// Ends the session (DELETE), as a client done with it does; best effort, after the run.
    pub(crate) async fn end(&self) {
        let Some(id) = &self.id else {
            return;
        };
        let mut request = Request::new(Full::new(Bytes::new()));
        *request.method_mut() = Method::DELETE;
        *request.uri_mut() = self.url.clone();
        request.headers_mut().insert("mcp-session-id", id.clone());
        request.headers_mut().insert(
            "mcp-protocol-version",
            HeaderValue::from_static("2025-06-18"),
        );
        if let Ok(response) = self.client.request(request).await {
            let _ = response.into_body().collect().await;
        }
    }

    /// Calls a tool; returns the response message.
    pub(crate) async fn call(&mut self, tool: &str, arguments: &Value) -> Result<Value, String> {
        self.next += 1;
        let mut params = json!({ "name": tool, "arguments": arguments });
        if self.modern {
            params["_meta"] = modern_meta();
        }
        if let Some(cookie) = &self.cookie {
            params["_meta"]["io.modelcontextprotocol/session"] = cookie.clone();
        }
        let response = self
            .post(
                json!({ "jsonrpc": "2.0", "id": self.next, "method": "tools/call",
                          "params": params }),
            )
            .await?;
        answer(response).await
    }
}

/// The per-request `_meta` of a 2026-07-28 request.
pub(crate) fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "mcp-bench", "version": "1" },
    })
}

/// The response message of a POST, from a JSON body or an SSE stream.
pub(crate) async fn answer(response: Response<Incoming>) -> Result<Value, String> {
    let status = response.status();
    let streamed = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut body = response.into_body();
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    if !streamed {
        let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        return serde_json::from_slice(&bytes).map_err(|e| e.to_string());
    }
    let mut decoder = sse::Decoder::new(16 << 20);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() else {
            continue;
        };
        decoder.feed(&data);
        while let Some(event) = decoder.next_event().map_err(|e| e.to_string())? {
            let Ok(message) = serde_json::from_str::<Value>(&event.data) else {
                continue;
            };
            if message.get("id").is_some() && message.get("method").is_none() {
                return Ok(message);
            }
        }
    }
    Err("the stream ended without a response".into())
}
