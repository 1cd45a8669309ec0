//! The legacy HTTP+SSE upstream (MCP 2024-11-05 as a client): a GET stream whose first event
//! (`endpoint`, treated as opaque) names where to POST, and on which every answer arrives. The
//! endpoint must be on the stream's own origin (scheme, host and port, as the TypeScript SDK's
//! client requires): one elsewhere is refused, so a server cannot send the proxy's POSTs, and
//! the credentials they carry, to another host; its session's messages then fail saying so. A cut
//! stream is a lost upstream session: the stream is re-opened and the session told
//! (`SessionLost`), which re-initializes and re-subscribes it while other traffic waits; requests
//! in flight at the cut get an error (their answers went with the old stream).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::Full;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

use super::body;
use super::http_client::{self, EventStream, HttpClient, HttpSpec};
use super::{EventSink, UpstreamError, UpstreamEvent};
use crate::telemetry::metrics::ServerMetrics;
use crate::upstream::credential::Credential;
use crate::wire::jsonrpc::{Kind, Message};
use crate::wire::methods;

const RECONNECT: Duration = Duration::from_secs(1);
const MAX_RECONNECT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct SseUpstream {
    inner: Arc<Inner>,
}

struct Inner {
    spec: HttpSpec,
    client: HttpClient,
    events: EventSink,
    credential: Credential,
    released: CancellationToken,
    /// Where to POST: known once the current stream announced it (or why it is refused).
    endpoint: watch::Sender<Option<Announced>>,
    /// False while the session re-initializes a new stream's session: only `initialize` and
    /// `notifications/initialized` go meanwhile.
    ready: watch::Sender<bool>,
    metrics: Arc<ServerMetrics>,
}

/// An endpoint the stream announced: where to POST, or why nothing is posted there.
type Announced = Result<Uri, UpstreamError>;

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseUpstream")
            .field("url", &self.spec.url)
            .finish()
    }
}

impl SseUpstream {
    /// `credential` is sent on every request when the spec forwards credentials.
    pub fn start(
        spec: &HttpSpec,
        client: HttpClient,
        events: EventSink,
        credential: Credential,
        metrics: Arc<ServerMetrics>,
    ) -> Self {
        let inner = Arc::new(Inner {
            spec: spec.clone(),
            client,
            events,
            credential,
            released: CancellationToken::new(),
            endpoint: watch::channel(None).0,
            ready: watch::channel(true).0,
            metrics,
        });
        tokio::spawn(inner.clone().run().in_current_span());
        SseUpstream { inner }
    }

    pub async fn send(&self, message: Message) -> Result<(), UpstreamError> {
        if self.inner.released.is_cancelled() {
            return Err(UpstreamError::Gone);
        }
        let wire = message.to_bytes();
        let starting = matches!(
            message.method(),
            Some(methods::INITIALIZE | methods::INITIALIZED)
        );
        let inner = self.inner.clone();
        tokio::spawn(
            async move {
                let posted = async {
                    match starting {
                        true => inner.post(wire).await,
                        false => inner.post_when_established(wire).await,
                    }
                };
                // Released: the POST is let go (its connection closed), nothing is read.
                let sent = tokio::select! {
                    sent = posted => sent,
                    () = inner.released.cancelled() => return,
                };
                match sent {
                    Err(cause) => inner.fail(&message, cause).await,
                    // The session is there again: the traffic held back goes.
                    Ok(()) if message.method() == Some(methods::INITIALIZED) => {
                        inner.ready.send_replace(true);
                    }
                    Ok(()) => {}
                }
            }
            .in_current_span(),
        );
        Ok(())
    }

    /// How the session's `initialize` went after `SessionLost`: on success, other traffic goes
    /// once `notifications/initialized` is delivered; on failure it goes now (and fails, if the
    /// server does not take it).
    pub fn reestablished(&self, outcome: Result<(), UpstreamError>) {
        if outcome.is_err() {
            self.inner.ready.send_replace(true);
        }
    }

    pub fn release(&self) {
        self.inner.released.cancel();
    }
}

impl Inner {
    /// POSTs a message once the current stream's session is initialized: the endpoint it goes
    /// to is taken while that holds (a cut in between means a new session, to wait for again).
    /// The whole wait, however many cuts come in between, is bounded by the request timeout.
    async fn post_when_established(&self, wire: Bytes) -> Result<(), UpstreamError> {
        let timeout = self.spec.request_timeout;
        let url = tokio::time::timeout(timeout, async {
            let mut ready = self.ready.subscribe();
            let mut endpoint = self.endpoint.subscribe();
            loop {
                ready.wait_for(|r| *r).await.ok()?;
                let url = endpoint.wait_for(Option::is_some).await.ok()?.clone();
                if *ready.borrow() {
                    return url;
                }
            }
        })
        .await
        .ok()
        .flatten()
        .ok_or(UpstreamError::NotReestablished(timeout))?;
        self.post_to(url?, wire).await
    }

    /// Holds the stream; after a cut, re-opens it and re-establishes the session.
    async fn run(self: Arc<Self>) {
        let mut established_before = false;
        let mut failures = 0u32;
        while !self.released.is_cancelled() {
            match self.open().await {
                Ok(body) => {
                    failures = 0;
                    let mut events = EventStream::new(body, self.spec.max_event_bytes);
                    let mut reestablished = !established_before;
                    while super::room_to_read_unless(self.events.as_ref(), &self.released).await {
                        let Some(event) = events.next(&self.released).await else {
                            break;
                        };
                        if event.event.as_deref() == Some("endpoint") {
                            let url = self.announced(event.data.trim());
                            if !reestablished && url.is_some() {
                                // A new upstream session: other traffic waits until the
                                // session has initialized it.
                                // (`ready` went false at the cut.)
                                reestablished = true;
                                warn!(url = %crate::telemetry::redact::url(&self.spec.url.to_string()), "upstream SSE stream was cut; the session re-initializes it");
                                self.events.deliver(UpstreamEvent::SessionLost);
                            }
                            self.endpoint.send_replace(url);
                        } else if !event.data.is_empty() {
                            self.receive(Bytes::from(event.data)).await;
                        }
                    }
                    if self.released.is_cancelled() {
                        return;
                    }
                    established_before = true;
                    // The next stream is a new upstream session: traffic waits for it.
                    self.ready.send_replace(false);
                    self.endpoint.send_replace(None);
                    self.cut().await;
                }
                Err(cause) => {
                    failures += 1;
                    debug!(%cause, failures, "upstream SSE stream could not be opened");
                    if failures == 1 {
                        self.events.deliver(UpstreamEvent::AnswersLost(cause));
                    }
                }
            }
            let pause = (RECONNECT * failures.max(1)).min(MAX_RECONNECT);
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.released.cancelled() => return,
            }
        }
    }

    async fn open(&self) -> Result<hyper::body::Incoming, UpstreamError> {
        let mut request = self.request(Bytes::new());
        *request.uri_mut() = self.spec.url.clone();
        request.headers_mut().insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        let response = http_client::send(&self.client, &self.spec, request).await?;
        if response.status() != StatusCode::OK {
            return Err(UpstreamError::Status(response.status()));
        }
        Ok(response.into_body())
    }

    /// The endpoint an `endpoint` event names, resolved against the stream's URL (`None` when
    /// it cannot be): refused, logged and counted when it is on another origin.
    fn announced(&self, reference: &str) -> Option<Announced> {
        let url = resolve(&self.spec.url, reference)?;
        match same_origin(&self.spec.url, &url) {
            Ok(()) => Some(Ok(url)),
            Err(refused) => {
                self.metrics.upstream_foreign_endpoints_total.inc();
                warn!(%refused, "the upstream SSE stream announced an endpoint on another origin; nothing is sent there");
                Some(Err(refused))
            }
        }
    }

    /// A request carrying the forwarded credential, if any.
    fn request(&self, body: Bytes) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(body));
        self.spec
            .put_credentials(request.headers_mut(), &self.credential);
        request
    }

    /// A message from the stream.
    async fn receive(&self, data: Bytes) {
        let Ok(message) = Message::parse_from_server(data) else {
            warn!("the upstream stream carried something that is not JSON-RPC");
            return;
        };
        self.events
            .deliver(UpstreamEvent::Message(Box::new(message)));
    }

    /// POSTs one message to the current endpoint, waiting for one if the stream is re-opening.
    async fn post(&self, wire: Bytes) -> Result<(), UpstreamError> {
        let Some(url) = self.announced_endpoint().await else {
            return Err(UpstreamError::NoEndpoint(self.spec.request_timeout));
        };
        self.post_to(url?, wire).await
    }

    async fn post_to(&self, url: Uri, wire: Bytes) -> Result<(), UpstreamError> {
        let mut request = self.request(wire);
        *request.method_mut() = Method::POST;
        *request.uri_mut() = url;
        request.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let response = http_client::send(&self.client, &self.spec, request).await?;
        let status = response.status();
        if !status.is_success() {
            return Err(UpstreamError::Status(status));
        }
        // The answer comes on the stream; the POST's own body ("Accepted") is read to its end,
        // bounded, so its connection can serve again.
        let body = response.into_body();
        body::read(body, self.spec.max_event_bytes, self.spec.request_timeout)
            .await
            .map(|_| ())
            .map_err(UpstreamError::from)
    }

    /// The current endpoint, waiting (up to the request timeout) while the stream re-opens.
    async fn announced_endpoint(&self) -> Option<Announced> {
        let mut endpoint = self.endpoint.subscribe();
        let ready = tokio::time::timeout(
            self.spec.request_timeout,
            endpoint.wait_for(Option::is_some),
        )
        .await;
        match ready {
            Ok(Ok(url)) => url.clone(),
            _ => None,
        }
    }

    /// The stream was cut: the answers of the requests in flight went with it.
    async fn cut(&self) {
        self.events
            .deliver(UpstreamEvent::AnswersLost(UpstreamError::StreamCut));
    }

    /// Reports a request that could not be delivered, with the cause, to its session.
    async fn fail(&self, message: &Message, cause: UpstreamError) {
        warn!(%cause, "upstream delivery failed");
        if let (Kind::Request, Some(id)) = (message.kind(), message.id()) {
            self.events.deliver(UpstreamEvent::Failed {
                id: Box::new(id.clone()),
                cause,
            });
        }
    }
}

/// The endpoint announced by the stream, resolved against the stream's URL (RFC 3986 §5.2:
/// an absolute URL, a network-path reference `//host/path`, an absolute or a relative path).
fn resolve(base: &Uri, reference: &str) -> Option<Uri> {
    if reference.starts_with("http://") || reference.starts_with("https://") {
        return reference.parse().ok();
    }
    let authority = base.authority()?;
    let scheme = base.scheme_str().unwrap_or("http");
    if reference.starts_with("//") {
        return format!("{scheme}:{reference}").parse().ok();
    }
    let path = if reference.starts_with('/') {
        reference.to_owned()
    } else {
        let directory = base.path().rsplit_once('/').map_or("", |(dir, _)| dir);
        format!("{directory}/{reference}")
    };
    format!("{scheme}://{authority}{path}").parse().ok()
}

/// Whether `endpoint` is on the origin of `stream` (RFC 6454: scheme, host and port, a default
/// port spelled or not): else the error naming both origins (never a path, query or userinfo,
/// which may hold secrets).
fn same_origin(stream: &Uri, endpoint: &Uri) -> Result<(), UpstreamError> {
    let expected = origin(stream);
    let announced = origin(endpoint);
    match expected.is_some() && expected == announced {
        true => Ok(()),
        false => Err(UpstreamError::ForeignEndpoint {
            announced: announced.unwrap_or_else(|| "(no origin)".into()),
            expected: expected.unwrap_or_else(|| "(no origin)".into()),
        }),
    }
}

/// `scheme://host:port`, lower-cased, the port always spelled.
fn origin(url: &Uri) -> Option<String> {
    let scheme = url.scheme_str()?.to_ascii_lowercase();
    let host = url.host()?.to_ascii_lowercase();
    let port = url.port_u16().or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some(format!("{scheme}://{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_endpoint_on_the_streams_own_origin_is_taken() {
        let base: Uri = "http://127.0.0.1:3001/sse".parse().unwrap();
        let taken = |reference: &str| {
            let url = resolve(&base, reference).unwrap();
            same_origin(&base, &url).map(|()| url.to_string())
        };
        for same in [
            "/message?sessionId=abc",
            "messages",
            "http://127.0.0.1:3001/m",
            "//127.0.0.1:3001/m",
        ] {
            assert!(taken(same).is_ok(), "{same}");
        }
        let default_port: Uri = "https://Example.org/sse".parse().unwrap();
        let url = resolve(&default_port, "https://example.org:443/m").unwrap();
        assert!(same_origin(&default_port, &url).is_ok());
        for foreign in [
            "http://127.0.0.1:3002/steal",
            "https://127.0.0.1:3001/m",
            "http://localhost:3001/m",
            "http://127.0.0.1:3001@10.0.0.1:3001/m",
            "//10.0.0.1:3001/m",
        ] {
            let error = taken(foreign).unwrap_err().to_string();
            assert!(error.contains("http://127.0.0.1:3001"), "{error}");
            assert!(!error.contains("/m") && !error.contains("steal"), "{error}");
        }
        let error = taken("http://user:secret@10.0.0.1:9/p?token=t").unwrap_err();
        assert_eq!(
            error.to_string(),
            "the upstream server's stream announced an endpoint on another origin \
             (http://10.0.0.1:9) than its own (http://127.0.0.1:3001): nothing is sent there"
        );
    }

    #[test]
    fn resolves_the_announced_endpoint_against_the_stream_url() {
        let base: Uri = "http://127.0.0.1:3001/sse".parse().unwrap();
        let cases = [
            (
                "/message?sessionId=abc",
                "http://127.0.0.1:3001/message?sessionId=abc",
            ),
            (
                "messages?session_id=1",
                "http://127.0.0.1:3001/messages?session_id=1",
            ),
            ("http://10.0.0.1:9/m", "http://10.0.0.1:9/m"),
            ("//10.0.0.1:9/m", "http://10.0.0.1:9/m"),
        ];
        for (reference, expected) in cases {
            assert_eq!(
                resolve(&base, reference).unwrap().to_string(),
                expected,
                "{reference}"
            );
        }
        let nested: Uri = "http://h/servers/a/sse".parse().unwrap();
        assert_eq!(
            resolve(&nested, "messages?x=1").unwrap().to_string(),
            "http://h/servers/a/messages?x=1"
        );
    }
}
