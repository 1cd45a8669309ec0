//! HTTP/1 connections to a server driven by the task that sends on them: the connection is
//! polled together with the request and its answer's body, so no connection task sits between
//! a request and its answer (a task hand-off less each way, each a possible cross-thread
//! wake-up). An idle connection waits in a small pool for the next request; one the server
//! closed meanwhile is dropped, and a request it could not take is sent on a new one.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::FutureExt;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::http_client::{error_chain, HttpSpec};
use super::tls_stream::{Stream, TlsDialer};
use super::UpstreamError;

type Driver = Pin<Box<http1::Connection<TokioIo<Stream>, Full<Bytes>>>>;

/// Idle connections kept at most, per server: as many as requests were in flight at once, up
/// to this (fewer, and every burst above it opened and closed connections by the hundred).
const MAX_IDLE: usize = 1024;

/// The connections to one server, shared by its upstream sessions.
#[derive(Default)]
pub struct ConnectionPool {
    idle: Mutex<Vec<Conn>>,
    /// How `https://` connections are made (none: only `http://` servers are reached).
    tls: Option<TlsDialer>,
    /// The last URL sent to, as HTTP/1 sends it: one server's requests go to one URL, so it is
    /// worked out once.
    origin: Mutex<Option<OriginForm>>,
}

/// A URL and the request line's path and `Host` header it makes.
#[derive(Clone)]
struct OriginForm {
    absolute: http::Uri,
    path: Option<http::Uri>,
    host: Option<http::HeaderValue>,
}

struct Conn {
    sender: http1::SendRequest<Full<Bytes>>,
    driver: Driver,
}

impl ConnectionPool {
    /// ConnectionPool made over TLS as `tls` says for `https://` servers.
    pub fn with_tls(tls: TlsDialer) -> ConnectionPool {
        ConnectionPool {
            idle: Mutex::default(),
            tls: Some(tls),
            origin: Mutex::default(),
        }
    }

    /// Sends `request`, waiting at most the request timeout for its answer to begin.
    pub async fn send(
        self: &Arc<Self>,
        spec: &HttpSpec,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<DrivenBody>, UpstreamError> {
        tokio::time::timeout(spec.request_timeout, self.exchange(spec, request))
            .await
            .unwrap_or_else(|_| Err(spec.silent()))
    }

    async fn exchange(
        self: &Arc<Self>,
        spec: &HttpSpec,
        mut request: Request<Full<Bytes>>,
    ) -> Result<Response<DrivenBody>, UpstreamError> {
        self.origin_form(&mut request);
        // An idle connection first; if it cannot take the request, a new one.
        let mut reused = self.take_idle();
        loop {
            let fresh = reused.is_none();
            let mut conn = match reused.take() {
                Some(conn) => conn,
                None => connect(spec, self.tls.as_ref()).await?,
            };
            if !conn.ready().await {
                if fresh {
                    return Err(spec.unreachable("the connection closed at once"));
                }
                continue;
            }
            let answer = conn.sender.try_send_request(request);
            tokio::pin!(answer);
            let answered = tokio::select! {
                outcome = &mut answer => Some(outcome),
                _ = &mut conn.driver => None,
            };
            let (outcome, conn) = match answered {
                Some(outcome) => (outcome, Some(conn)),
                None => {
                    // Closed: once the connection is dropped, the answer resolves with what it
                    // got, or why not.
                    drop(conn);
                    (answer.as_mut().await, None)
                }
            };
            match outcome {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let body = DrivenBody {
                        body,
                        conn,
                        pool: self.clone(),
                    };
                    return Ok(Response::from_parts(parts, body));
                }
                Err(mut failed) => match failed.take_message() {
                    // Never sent: it goes on a new connection (once).
                    Some(unsent) if !fresh => request = unsent,
                    _ => return Err(spec.unreachable(error_chain(failed.error()))),
                },
            }
        }
    }

    /// An idle connection the server has not closed: each is polled once, which reads a close
    /// already waiting on its socket (nothing drives a connection while it is idle).
    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(mut conn) = idle.pop() {
            if conn.driver.as_mut().now_or_never().is_none() {
                return Some(conn);
            }
        }
        None
    }

    fn put_idle(&self, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }
}

impl Conn {
    /// Drives the connection until it can take a request; false if it closed.
    async fn ready(&mut self) -> bool {
        tokio::select! {
            ready = self.sender.ready() => ready.is_ok(),
            _ = &mut self.driver => false,
        }
    }
}

impl ConnectionPool {
    /// The request as HTTP/1 sends it on its own connection: a path, and `Host` naming the
    /// server (what a pooled client does for its requests).
    fn origin_form(&self, request: &mut Request<Full<Bytes>>) {
        let form = {
            let mut known = self.origin.lock().unwrap_or_else(|e| e.into_inner());
            match known.as_ref() {
                Some(form) if form.absolute == *request.uri() => form.clone(),
                _ => known.insert(OriginForm::of(request.uri())).clone(),
            }
        };
        if let Some(host) = form.host {
            request
                .headers_mut()
                .entry(http::header::HOST)
                .or_insert(host);
        }
        if let Some(path) = form.path {
            *request.uri_mut() = path;
        }
    }
}

impl OriginForm {
    fn of(uri: &http::Uri) -> OriginForm {
        let host = uri.host().and_then(|host| {
            let host = match uri.port_u16() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_owned(),
            };
            http::HeaderValue::from_str(&host).ok()
        });
        let path = uri.scheme().and_then(|_| {
            uri.path_and_query()
                .map_or("/", |p| p.as_str())
                .parse()
                .ok()
        });
        OriginForm {
            absolute: uri.clone(),
            path,
            host,
        }
    }
}

/// A new connection to the server; why it is unreachable if none could be made.
async fn connect(spec: &HttpSpec, tls: Option<&TlsDialer>) -> Result<Conn, UpstreamError> {
    let https = spec.url.scheme_str() == Some("https");
    let host = spec.url.host().unwrap_or("127.0.0.1");
    let port = spec.url.port_u16().unwrap_or(if https { 443 } else { 80 });
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let tcp = TcpStream::connect((host, port))
        .await
        .map_err(|e| spec.unreachable(e.to_string()))?;
    tcp.set_nodelay(true)
        .map_err(|e| spec.unreachable(e.to_string()))?;
    let stream = match (https, tls) {
        (false, _) => Stream::Plain(tcp),
        (true, Some(tls)) => tls
            .handshake(host, tcp)
            .await
            .map_err(|e| spec.failed_to_connect(&e))?,
        (true, None) => {
            return Err(spec.unreachable("https:// with no TLS settings for this server"))
        }
    };
    let (sender, driver) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| spec.unreachable(error_chain(&e)))?;
    Ok(Conn {
        sender,
        driver: Box::pin(driver),
    })
}

/// An answer's body, read while its connection is driven; the connection goes back to the pool
/// once the body has ended.
pub struct DrivenBody {
    body: Incoming,
    conn: Option<Conn>,
    pool: Arc<ConnectionPool>,
}

impl Body for DrivenBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some(conn) = this.conn.as_mut() {
            if conn.driver.as_mut().poll(cx).is_ready() {
                this.conn = None; // closed: what it delivered is still in the body
            }
        }
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            if let Some(conn) = this.conn.take() {
                this.pool.put_idle(conn);
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use http_body_util::BodyExt;
    use hyper::service::service_fn;

    /// A server on 127.0.0.1:0 answering each request with its path; `keep_alive` off closes
    /// every connection after its answer. Counts the connections it accepted.
    async fn server(keep_alive: bool) -> (HttpSpec, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let service = service_fn(|request: Request<Incoming>| async move {
                    let path = request.uri().path().to_owned();
                    let host = request.headers().contains_key(http::header::HOST);
                    let body = format!("{path} host={host}");
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(body))))
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .keep_alive(keep_alive)
                    .serve_connection(TokioIo::new(stream), service);
                tokio::spawn(connection);
            }
        });
        let spec = HttpSpec {
            url: format!("http://{addr}/mcp").parse().unwrap(),
            request_timeout: Duration::from_secs(5),
            max_event_bytes: 1 << 20,
            forward_authorization: false,
            static_header: None,
            protocol: crate::wire::era::Era::Legacy,
            trace_headers: true,
            tls: Default::default(),
        };
        (spec, accepted)
    }

    async fn call(connections: &Arc<ConnectionPool>, spec: &HttpSpec) -> String {
        let request = Request::post(spec.url.clone())
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        let response = connections.send(spec, request).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_connection_is_used_again_and_one_the_server_closed_is_replaced() {
        let (spec, accepted) = server(true).await;
        let connections = Arc::new(ConnectionPool::default());
        for _ in 0..3 {
            assert_eq!(call(&connections, &spec).await, "/mcp host=true");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection for all");

        let (spec, accepted) = server(false).await;
        let connections = Arc::new(ConnectionPool::default());
        for _ in 0..3 {
            assert_eq!(call(&connections, &spec).await, "/mcp host=true");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3, "a new one each time");
    }
}
