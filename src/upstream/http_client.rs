//! The HTTP client side shared by the Streamable HTTP and legacy SSE upstreams: one pooled
//! client, where a server is, and one way to send a request that names what went wrong.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, Uri};
use http_body_util::BodyExt;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::credential::{Credential, StaticHeader};
use super::tls_stream::TlsDialer;
use super::UpstreamError;
use rustls::pki_types::ServerName;

use crate::tls::{ClientTls, ClientTlsError};
use crate::wire::sse;

/// The pooled HTTP client shared by every HTTP upstream: `http://`, or `https://` verified as
/// `tls` says (connections, and their TLS sessions, reused).
pub type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A client for servers reached as `tls` says (its files read now).
pub fn client(tls: &ClientTls) -> Result<HttpClient, ClientTlsError> {
    Ok(client_with(tls.config()?, tls.server_name()?))
}

/// A client for servers reached as `tls` says; settings that cannot be used (a file gone since
/// the start checked it) give one that trusts no server, and say so.
pub fn client_or_none(tls: &ClientTls) -> HttpClient {
    let (config, name) = usable(tls);
    client_with(config, name)
}

/// How the driven connections reach `https://` servers, as [`client_or_none`].
pub fn dialer_or_none(tls: &ClientTls) -> TlsDialer {
    let (config, name) = usable(tls);
    TlsDialer::new(config, name)
}

/// `tls` as rustls takes it; settings that cannot be used trust no server (fail closed).
fn usable(tls: &ClientTls) -> (Arc<rustls::ClientConfig>, Option<ServerName<'static>>) {
    match tls
        .config()
        .and_then(|config| Ok((config, tls.server_name()?)))
    {
        Ok(usable) => usable,
        Err(error) => {
            warn!(%error, "the upstream TLS settings cannot be used: no https:// server is trusted");
            (crate::tls::client::trusting_nothing(), None)
        }
    }
}

/// A client for plain `http://` servers and `https://` ones the platform's roots vouch for.
pub fn plain_client() -> HttpClient {
    client_with(crate::tls::client::platform_config(), None)
}

fn client_with(config: Arc<rustls::ClientConfig>, name: Option<ServerName<'static>>) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.enforce_http(false);
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(Arc::unwrap_or_clone(config))
        .https_or_http();
    let builder = match name {
        Some(name) => builder.with_server_name_resolver(FixedServerNameResolver::new(name)),
        None => builder,
    };
    let connector = builder.enable_http1().wrap_connector(connector);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .build(connector)
}

/// Where the server is and how patient to be with it.
#[derive(Debug, Clone)]
pub struct HttpSpec {
    pub url: Uri,
    /// Longest wait for the answer to a POST to begin (headers, or a JSON body).
    pub request_timeout: Duration,
    /// Largest message accepted from the server: an SSE event, or a whole JSON answer
    /// (`upstream.max_line_bytes`).
    pub max_event_bytes: usize,
    /// Send the client's credential (as the front made it for this server) to the server
    /// (off: credentials stay here).
    pub forward_authorization: bool,
    /// A header of the operator's for every request (`upstream.auth = "static"`).
    pub static_header: Option<StaticHeader>,
    /// The revision the server speaks.
    pub protocol: crate::wire::era::Era,
    /// Send a request's trace context as `traceparent`/`tracestate` headers too.
    pub trace_headers: bool,
    /// How an https:// server is verified and what the proxy shows it.
    pub tls: ClientTls,
}

/// Sends `request`, waiting at most the request timeout for its answer to begin.
pub async fn send(
    client: &HttpClient,
    spec: &HttpSpec,
    request: Request<Full<Bytes>>,
) -> Result<Response<Incoming>, UpstreamError> {
    tokio::time::timeout(spec.request_timeout, client.request(request))
        .await
        .map_err(|_| spec.silent())?
        .map_err(|e| spec.failed_to_connect(&e))
}

impl HttpSpec {
    /// Puts a request's credentials in `headers`: the client's, when this server gets it, and
    /// the operator's header.
    pub fn put_credentials(&self, headers: &mut http::HeaderMap, credential: &Credential) {
        if self.forward_authorization {
            if let Some(value) = credential.current() {
                headers.insert(header::AUTHORIZATION, value);
            }
        }
        if let Some(fixed) = &self.static_header {
            headers.insert(fixed.name.clone(), fixed.value.clone());
        }
    }

    /// Why a request failed when the server did not answer within the request timeout.
    pub fn silent(&self) -> UpstreamError {
        UpstreamError::Silent(self.request_timeout)
    }

    /// Why a request failed on its way to the server: a TLS handshake that failed, named for
    /// what was wrong, else the server unreachable.
    pub fn failed_to_connect(&self, error: &(dyn std::error::Error + 'static)) -> UpstreamError {
        match crate::tls::failure::failure_in(error) {
            Some(failure) => UpstreamError::Tls {
                url: crate::telemetry::redact::url(&self.url.to_string()).into_owned(),
                failure,
            },
            None => self.unreachable(error_chain(error)),
        }
    }

    /// Why a request failed when the server could not be reached.
    pub fn unreachable(&self, cause: impl Into<String>) -> UpstreamError {
        UpstreamError::Unreachable {
            url: crate::telemetry::redact::url(&self.url.to_string()).into_owned(),
            cause: cause.into(),
        }
    }
}

pub fn is_event_stream<B>(response: &Response<B>) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

pub use crate::base::error_chain::error_chain;

/// An SSE response body read event by event.
pub struct EventStream<B = Incoming> {
    body: B,
    decoder: sse::Decoder,
    /// Why it stopped before the body's end, when it could not be decoded.
    unreadable: Option<sse::DecodeError>,
}

impl<B: http_body::Body<Data = Bytes> + Unpin> EventStream<B> {
    pub fn new(body: B, max_event_bytes: usize) -> EventStream<B> {
        EventStream {
            body,
            decoder: sse::Decoder::new(max_event_bytes),
            unreadable: None,
        }
    }

    /// Why the stream stopped, when an event could not be decoded (one over the bound, say).
    pub fn take_unreadable(&mut self) -> Option<sse::DecodeError> {
        self.unreadable.take()
    }

    /// The next event; `None` once the body ends or breaks, cannot be decoded, or `stop` fires.
    pub async fn next(&mut self, stop: &CancellationToken) -> Option<sse::Event> {
        loop {
            match self.decoder.next_event() {
                Ok(Some(event)) => return Some(event),
                Ok(None) => {}
                Err(error) => {
                    warn!(%error, "unreadable upstream event stream");
                    self.unreadable = Some(error);
                    return None;
                }
            }
            let frame = tokio::select! {
                frame = self.body.frame() => frame,
                () = stop.cancelled() => return None,
            };
            if let Ok(data) = frame?.ok()?.into_data() {
                self.decoder.feed(&data);
            }
        }
    }
}
