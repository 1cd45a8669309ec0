//! The demo's 2026-07-28 mode over Streamable HTTP (`demo-server --http ADDR --protocol
//! 2026-07-28`): POST only, one JSON-RPC request per POST, served by the same logic as over
//! stdio. The answer is `application/json` when the response is all there is, an SSE stream when
//! notifications (progress, log messages) come before it, and for `subscriptions/listen`, which
//! lasts until the client closes it. Closing a stream cancels its request. Each request is served
//! under an id of the server's own, so clients that pick the same ids never meet in the state
//! they share (the counter, the listens, the tools still running).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::{Demo, State};
use crate::wire::era::params::Params;
use crate::wire::era::request::{self, Unfit};
use crate::wire::era::{Era, SUBSCRIPTION_ID_KEY};
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::{self, Message};
use crate::wire::jsonrpc::{
    INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, UNSUPPORTED_VERSION,
};
use crate::wire::loopback::{is_loopback_authority, is_loopback_origin};
use crate::wire::methods;
use crate::wire::mirrored::ToolMarks;
use crate::wire::sse;

/// How often an idle stream (a listen) gets a comment, so a client that left is noticed.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The largest request body taken.
const MAX_BODY_BYTES: usize = 4 << 20;

/// What every request shares: the demo's state, and whether it listens on loopback (then it
/// answers loopback names only).
struct Server {
    state: Arc<Mutex<State>>,
    loopback: bool,
    next_id: AtomicU64,
}

/// A request refused before it is served: its status and JSON-RPC error (and for a method not
/// served, the one that is).
struct Refusal {
    status: StatusCode,
    code: i64,
    message: String,
    data: Option<Value>,
    allow: Option<&'static str>,
}

impl Refusal {
    fn new(status: StatusCode, code: i64, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            code,
            message: message.into(),
            data: None,
            allow: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, message)
    }

    fn response(self, id: &Value) -> Response<Body> {
        let body = jsonrpc::error_response(id, self.code, &self.message, self.data);
        let mut response = Response::new(Body::full(body));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(allow) = self.allow {
            headers.insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        response
    }
}

impl From<Unfit> for Refusal {
    fn from(unfit: Unfit) -> Refusal {
        Refusal {
            data: unfit.data(),
            ..Refusal::new(unfit.status(), unfit.code(), unfit.to_string())
        }
    }
}

/// Serves the modern demo on `listener` at `/mcp` until the process ends.
pub async fn serve(listener: TcpListener) {
    let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
    let server = Arc::new(Server {
        state: Arc::default(),
        loopback,
        next_id: AtomicU64::new(1),
    });
    loop {
        let socket = match listener.accept().await {
            Ok((socket, _)) => socket,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        let server = server.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let server = server.clone();
                async move { Ok::<_, Infallible>(server.answer(request).await) }
            });
            let served = http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(socket), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
}

impl Server {
    async fn answer(&self, request: Request<Incoming>) -> Response<Body> {
        match self.read(request).await {
            Ok((headers, body, message)) => self.serve(&headers, &body, message).await,
            Err(refused) => refused.response(&Value::Null),
        }
    }

    /// The request's headers, body and message, once it is one this server takes.
    async fn read(&self, request: Request<Incoming>) -> Result<(HeaderMap, Bytes, Value), Refusal> {
        admitted(request.headers(), request.uri(), self.loopback)?;
        if request.uri().path() != "/mcp" {
            let not_found = "Not Found: use /mcp";
            return Err(Refusal::new(
                StatusCode::NOT_FOUND,
                INVALID_REQUEST,
                not_found,
            ));
        }
        if request.method() != Method::POST {
            return Err(Refusal {
                allow: Some("POST"),
                ..Refusal::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    INVALID_REQUEST,
                    "Method Not Allowed: a 2026-07-28 server takes POST only",
                )
            });
        }
        let (parts, body) = request.into_parts();
        let body = match Limited::new(body, MAX_BODY_BYTES).collect().await {
            Ok(body) => body.to_bytes(),
            Err(error) if error.is::<LengthLimitError>() => {
                return Err(Refusal::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    INVALID_REQUEST,
                    format!("Payload Too Large: the body exceeds {MAX_BODY_BYTES} bytes"),
                ))
            }
            Err(_) => return Err(Refusal::bad_request("the body could not be read")),
        };
        match serde_json::from_slice::<Value>(&body) {
            Ok(message @ Value::Object(_)) => Ok((parts.headers, body, message)),
            Ok(_) => Err(Refusal::bad_request(
                "Invalid Request: one JSON-RPC message per POST",
            )),
            Err(error) => Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                PARSE_ERROR,
                format!("Parse error: {error}"),
            )),
        }
    }

    /// Serves one JSON-RPC message the server took.
    async fn serve(&self, headers: &HeaderMap, body: &Bytes, message: Value) -> Response<Body> {
        // A notification (a closed stream is the cancellation here), or a response (this
        // server asks the client nothing): taken, with nothing to answer.
        let (Some(id), true) = (message.get("id").cloned(), message["method"].is_string()) else {
            return accepted();
        };
        if message["method"] == methods::INITIALIZE {
            // A legacy client, whatever its headers: told which revision this server speaks.
            let error = super::modern::unsupported_version(&message["params"]["protocolVersion"]);
            let refused = json!({ "jsonrpc": "2.0", "id": id, "error": error });
            return json_response(StatusCode::BAD_REQUEST, &refused);
        }
        if let Err(refused) = check(headers, body) {
            return refused.response(&id);
        }
        self.exchange(id, message).await
    }

    /// Hands the request to the demo under an id of its own; answers with its response alone,
    /// or streams what comes before it.
    async fn exchange(&self, asked_as: Value, mut message: Value) -> Response<Body> {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let served_as = Value::String(format!("http-{n}"));
        message["id"] = served_as.clone();
        let (out, mut sent) = mpsc::unbounded_channel();
        let request = InFlight {
            state: self.state.clone(),
            served_as,
            asked_as,
        };
        Demo {
            state: self.state.clone(),
            out,
            protocol: Era::Modern,
            round: None,
        }
        .handle(message);
        let Some(first) = sent.recv().await else {
            return request.unanswered();
        };
        if request.is_response(&first) {
            let status = status_of(&first);
            return json_response(status, &request.restore(first));
        }
        let (chunks, body) = mpsc::channel(16);
        tokio::spawn(request.stream(first, sent, chunks));
        let mut response = Response::new(Body::Stream(body));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    }
}

/// One request being served. Dropped (answered, or its stream closed): whatever of it is still
/// running in the demo stops, and a listen ends.
struct InFlight {
    state: Arc<Mutex<State>>,
    served_as: Value,
    asked_as: Value,
}

impl InFlight {
    fn is_response(&self, message: &Value) -> bool {
        message.get("method").is_none() && message.get("id") == Some(&self.served_as)
    }

    /// The client's own id back in the response and in a listen's subscription ids.
    fn restore(&self, mut message: Value) -> Value {
        if message.get("id") == Some(&self.served_as) {
            message["id"] = self.asked_as.clone();
        }
        let subscription = message
            .get_mut("params")
            .and_then(|params| params.get_mut("_meta"))
            .and_then(|meta| meta.get_mut(SUBSCRIPTION_ID_KEY));
        if let Some(subscription) = subscription.filter(|s| **s == self.served_as) {
            *subscription = self.asked_as.clone();
        }
        message
    }

    fn unanswered(&self) -> Response<Body> {
        Refusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            INTERNAL_ERROR,
            "the request ended without an answer",
        )
        .response(&self.asked_as)
    }

    /// The request's messages as SSE events, up to its response (a listen: until the client
    /// closes the stream).
    async fn stream(
        self,
        first: Value,
        mut sent: mpsc::UnboundedReceiver<Value>,
        chunks: mpsc::Sender<Bytes>,
    ) {
        let start = tokio::time::Instant::now() + KEEP_ALIVE;
        let mut keep_alive = tokio::time::interval_at(start, KEEP_ALIVE);
        let mut next = first;
        loop {
            let answered = self.is_response(&next);
            let event = sse::event(None, self.restore(next).to_string().as_bytes());
            if chunks.send(event).await.is_err() || answered {
                return;
            }
            next = loop {
                tokio::select! {
                    message = sent.recv() => match message {
                        Some(message) => break message,
                        None => {
                            let failed = json!({ "jsonrpc": "2.0", "id": self.asked_as,
                                "error": { "code": INTERNAL_ERROR,
                                           "message": "the request ended without an answer" } });
                            let _ = chunks.send(sse::event(None, failed.to_string().as_bytes())).await;
                            return;
                        }
                    },
                    _ = keep_alive.tick() => {
                        if chunks.send(sse::keep_alive()).await.is_err() {
                            return;
                        }
                    }
                    () = chunks.closed() => return,
                }
            };
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.listens.retain(|listen| listen.id != self.served_as);
        if !state.running.is_empty() {
            if let Some(task) = state.running.remove(&self.served_as.to_string()) {
                task.abort();
            }
        }
    }
}

/// What a 2026-07-28 request must carry, checked as the proxy's own 2026-07-28 face checks it
/// (`_meta` fields, the headers mirroring the body, the version, the methods removed).
fn check(headers: &HeaderMap, body: &Bytes) -> Result<(), Refusal> {
    let message = Message::parse(body.clone()).map_err(|e| Refusal::bad_request(e.to_string()))?;
    request::check(
        headers,
        &message,
        &Params::read(&message),
        &ToolMarks::default(),
    )
    .map(drop)
    .map_err(Refusal::from)
}

/// What a page on another site could send is refused (DNS rebinding): one `Host` (and the
/// request target's authority), a loopback name when the server listens on loopback; an
/// `Origin`, if any, only from loopback.
fn admitted(headers: &HeaderMap, target: &http::Uri, loopback: bool) -> Result<(), Refusal> {
    let one = |name: header::HeaderName, label: &str| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (None, _) => Ok(None),
            (Some(value), None) => value.to_str().map(Some).map_err(|_| {
                Refusal::bad_request(format!(
                    "Bad Request: the {label} header is not visible ASCII"
                ))
            }),
            (Some(_), Some(_)) => Err(Refusal::bad_request(format!(
                "Bad Request: more than one {label} header"
            ))),
        }
    };
    let forbidden = |what: String| {
        Refusal::new(
            StatusCode::FORBIDDEN,
            INVALID_REQUEST,
            format!("Forbidden: {what}"),
        )
    };
    let host = one(header::HOST, "Host")?
        .ok_or_else(|| Refusal::bad_request("Bad Request: the Host header is missing"))?;
    let named = target.authority().map(http::uri::Authority::as_str);
    for authority in std::iter::once(host).chain(named) {
        if loopback && !is_loopback_authority(authority) {
            return Err(forbidden(format!("Host {authority} is not allowed")));
        }
    }
    match one(header::ORIGIN, "Origin")? {
        Some(origin) if !is_loopback_origin(origin) => {
            Err(forbidden(format!("Origin {origin} is not allowed")))
        }
        _ => Ok(()),
    }
}

/// A response's status: 400 for a version this server does not speak, 404 for a method it does
/// not know (as the proxy's own 2026-07-28 face answers), 200 otherwise.
fn status_of(response: &Value) -> StatusCode {
    match response["error"]["code"].as_i64() {
        Some(UNSUPPORTED_VERSION) => StatusCode::BAD_REQUEST,
        Some(METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

fn json_response(status: StatusCode, message: &Value) -> Response<Body> {
    let mut response = Response::new(Body::full(message.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn accepted() -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::era::{CAPABILITIES_KEY, HEADER_MISMATCH, VERSION_KEY};
    use crate::wire::jsonrpc::INVALID_PARAMS;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    fn call(version: &str) -> Value {
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "echo",
            "_meta": { VERSION_KEY: version, CAPABILITIES_KEY: {} } } })
    }

    fn check(headers: &HeaderMap, message: &Value) -> Result<(), Refusal> {
        super::check(headers, &Bytes::from(message.to_string()))
    }

    #[test]
    fn the_headers_must_say_what_the_body_says() {
        let right = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
        ]);
        assert!(check(&right, &call("2026-07-28")).is_ok());
        for wrong in [
            headers(&[("mcp-method", "tools/call")]),
            headers(&[
                ("mcp-protocol-version", "2025-06-18"),
                ("mcp-method", "tools/call"),
            ]),
            headers(&[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/list"),
            ]),
            headers(&[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-method", "tools/call"),
            ]),
        ] {
            let refused = check(&wrong, &call("2026-07-28")).unwrap_err();
            assert_eq!(
                (refused.status, refused.code),
                (StatusCode::BAD_REQUEST, HEADER_MISMATCH)
            );
        }
        let odd = headers(&[
            ("mcp-protocol-version", "v9"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
        ]);
        assert_eq!(
            check(&odd, &call("v9")).unwrap_err().code,
            UNSUPPORTED_VERSION
        );
        let mut bare = call("2026-07-28");
        bare["params"]["_meta"] = json!({});
        assert_eq!(check(&right, &bare).unwrap_err().code, INVALID_PARAMS);
    }

    #[test]
    fn the_client_id_comes_back_in_the_response_and_the_subscription_id() {
        let request = InFlight {
            state: Arc::default(),
            served_as: json!("http-7"),
            asked_as: json!(3),
        };
        let ack = json!({ "jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": { "_meta": { SUBSCRIPTION_ID_KEY: "http-7" } } });
        assert!(!request.is_response(&ack));
        assert_eq!(
            request.restore(ack)["params"]["_meta"][SUBSCRIPTION_ID_KEY],
            3
        );
        let response = json!({ "jsonrpc": "2.0", "id": "http-7", "result": {} });
        assert!(request.is_response(&response));
        assert_eq!(request.restore(response)["id"], 3);
        let unsupported = json!({ "error": { "code": UNSUPPORTED_VERSION } });
        assert_eq!(status_of(&unsupported), StatusCode::BAD_REQUEST);
    }
}
