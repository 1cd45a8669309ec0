//! `mcp-session-proxy health`: one GET of a running proxy's health endpoint, answered within a
//! bound; success is a 2xx. A container's health check with nothing but the binary in the image.

use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use http::{header, Request, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// The longest answer read: a health endpoint says a word or two.
const MAX_BODY: usize = 64 * 1024;
/// The most of it that is printed.
const MAX_PRINTED: usize = 200;

/// GETs `url` (plain HTTP) with the `Host` header `host` (else the URL's own authority), and
/// waits at most `timeout` for the whole answer. Returns the status line and the body's first
/// line for a 2xx answer; an error naming what came instead (another status, no answer).
pub async fn check(url: &str, host: Option<&str>, timeout: Duration) -> anyhow::Result<String> {
    let uri: Uri = url
        .parse()
        .with_context(|| format!("{url:?} is not a URL"))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        bail!("{url:?}: the health endpoint is a plain http:// URL with a host");
    }
    let host = match host {
        Some(host) => host.to_owned(),
        None => uri.authority().map(ToString::to_string).unwrap_or_default(),
    };
    let request = Request::get(uri)
        .header(header::HOST, host.as_str())
        .body(Empty::<Bytes>::new())
        .with_context(|| format!("Host {host:?}"))?;
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let exchange = async {
        let response = client.request(request).await?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading the answer: {e}"))?
            .to_bytes();
        anyhow::Ok((status, body))
    };
    let (status, body) = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| anyhow::anyhow!("{url}: no answer within {timeout:?}"))?
        .with_context(|| format!("{url}: no answer"))?;
    let text = String::from_utf8_lossy(&body);
    let first_line: String = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .chars()
        .take(MAX_PRINTED)
        .collect();
    if !status.is_success() {
        bail!("{url} answered {status}: {first_line}");
    }
    Ok(format!("{status} {first_line}"))
}

/// The `Host` to send: the first name the proxy allows (`MCP_PROXY_ALLOWED_HOSTS`, as the
/// proxy beside this command reads it) unless that is `*`; none (the URL's own) otherwise.
pub fn allowed_host(allowed: &[String]) -> Option<&str> {
    allowed
        .iter()
        .map(|host| host.trim())
        .find(|host| !host.is_empty())
        .filter(|host| *host != "*")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_the_first_allowed_name_unless_any_is_allowed() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(allowed_host(&names(&[])), None);
        assert_eq!(allowed_host(&names(&["*"])), None);
        assert_eq!(
            allowed_host(&names(&[" ", "mcp.example.com", "localhost"])),
            Some("mcp.example.com")
        );
    }

    #[tokio::test]
    async fn only_plain_http_urls_are_checked() {
        for url in ["https://127.0.0.1:8787/healthz", "/healthz", "not a url"] {
            assert!(
                check(url, None, Duration::from_secs(1)).await.is_err(),
                "{url}"
            );
        }
    }
}
