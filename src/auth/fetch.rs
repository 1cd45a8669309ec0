//! The proxy's own requests to an authorization server: a JSON document fetched, a form
//! posted (introspection, token exchange), each bounded in time and in size; over `https://`
//! (rustls, the machine's CA certificates) or `http://`.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use tracing::warn;

use crate::base::error_chain::error_chain;

/// Longest wait for a whole answer.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Largest answer read.
const MAX_BYTES: usize = 1 << 20;

/// Why a request to the authorization server failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    #[error("{0} is not an https:// or http:// URL")]
    Url(String),
    #[error("{url} could not be reached: {cause}")]
    Unreachable { url: String, cause: String },
    #[error("{url} did not answer within {TIMEOUT:?}")]
    Silent { url: String },
    #[error("{url} answered more than {MAX_BYTES} bytes")]
    TooLarge { url: String },
    #[error("{url} answered {status}")]
    Status { url: String, status: StatusCode },
    #[error("{url} answered something other than the JSON expected")]
    NotJson { url: String },
}

/// A client's credentials at the authorization server, sent as HTTP Basic (RFC 6749 §2.3.1).
#[derive(Clone)]
pub struct ClientCredentials {
    pub id: String,
    pub secret: String,
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClientCredentials({}, ***)", self.id)
    }
}

/// A pooled client for the authorization server's endpoints.
#[derive(Clone)]
pub struct Fetcher {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Default for Fetcher {
    fn default() -> Self {
        let roots = HttpsConnectorBuilder::new()
            .with_native_roots()
            .unwrap_or_else(|error| {
                warn!(%error, "no CA certificates found: https:// issuers cannot be verified");
                let empty = rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth();
                HttpsConnectorBuilder::new().with_tls_config(empty)
            });
        let connector = roots.https_or_http().enable_http1().build();
        Fetcher {
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(60))
                .build(connector),
        }
    }
}

impl Fetcher {
    /// The JSON document at `url`, decoded as `T`.
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
    ) -> Result<T, FetchError> {
        let request = Request::get(parse(url)?)
            .header(header::ACCEPT, "application/json")
            .body(Full::default())
            .map_err(|_| FetchError::Url(url.to_owned()))?;
        let (status, body) = self.send(url, request).await?;
        if !status.is_success() {
            return Err(FetchError::Status {
                url: url.to_owned(),
                status,
            });
        }
        serde_json::from_slice(&body).map_err(|_| FetchError::NotJson {
            url: url.to_owned(),
        })
    }

    /// POSTs `form` to `url` with the client's credentials; the status and the JSON answer
    /// (an error answer of RFC 6749 §5.2 is JSON too).
    pub async fn post_form(
        &self,
        url: &str,
        form: &[(&str, &str)],
        client: &ClientCredentials,
    ) -> Result<(StatusCode, serde_json::Value), FetchError> {
        let body = form
            .iter()
            .map(|(name, value)| format!("{}={}", form_encode(name), form_encode(value)))
            .collect::<Vec<_>>()
            .join("&");
        let basic = format!(
            "{}:{}",
            form_encode(&client.id),
            form_encode(&client.secret)
        );
        let mut authorization = HeaderValue::try_from(format!("Basic {}", STANDARD.encode(basic)))
            .map_err(|_| FetchError::Url(url.to_owned()))?;
        authorization.set_sensitive(true);
        let request = Request::builder()
            .method(Method::POST)
            .uri(parse(url)?)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "application/json")
            .header(header::AUTHORIZATION, authorization)
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| FetchError::Url(url.to_owned()))?;
        let (status, body) = self.send(url, request).await?;
        let json = serde_json::from_slice(&body).map_err(|_| match status.is_success() {
            true => FetchError::NotJson {
                url: url.to_owned(),
            },
            false => FetchError::Status {
                url: url.to_owned(),
                status,
            },
        })?;
        Ok((status, json))
    }

    async fn send(
        &self,
        url: &str,
        request: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, Bytes), FetchError> {
        let exchange =
            async {
                let response = self.client.request(request).await.map_err(|error| {
                    FetchError::Unreachable {
                        url: url.to_owned(),
                        cause: error_chain(&error),
                    }
                })?;
                let status = response.status();
                let body = Limited::new(response.into_body(), MAX_BYTES)
                    .collect()
                    .await
                    .map_err(|_| FetchError::TooLarge {
                        url: url.to_owned(),
                    })?;
                Ok((status, body.to_bytes()))
            };
        tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| FetchError::Silent {
                url: url.to_owned(),
            })?
    }
}

fn parse(url: &str) -> Result<Uri, FetchError> {
    url.parse::<Uri>()
        .ok()
        .filter(|uri| matches!(uri.scheme_str(), Some("https" | "http")) && uri.host().is_some())
        .ok_or_else(|| FetchError::Url(url.to_owned()))
}

/// `application/x-www-form-urlencoded` (the WHATWG URL standard's byte serializer).
pub fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                out.push(byte as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_are_encoded_as_browsers_do() {
        assert_eq!(form_encode("a b&c=d/é"), "a+b%26c%3Dd%2F%C3%A9");
        assert_eq!(form_encode("mcp:tools"), "mcp%3Atools");
    }

    #[test]
    fn only_http_urls_are_fetched() {
        assert!(parse("http://127.0.0.1:9/jwks").is_ok());
        assert!(parse("https://login.example.com/jwks").is_ok());
        assert!(matches!(
            parse("file:///etc/passwd"),
            Err(FetchError::Url(_))
        ));
        assert!(matches!(parse("/relative"), Err(FetchError::Url(_))));
    }

    #[tokio::test]
    async fn an_https_url_is_fetched_over_tls() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // A plain HTTP server: a TLS client reads its answer as a broken handshake.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/jwks", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut hello = [0u8; 512];
            let _ = socket.read(&mut hello).await;
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                .await;
        });
        let fetched = Fetcher::default().get_json::<serde_json::Value>(&url).await;
        assert!(
            matches!(&fetched, Err(FetchError::Unreachable { .. })),
            "{fetched:?}"
        );
    }
}
