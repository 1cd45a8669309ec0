//! Browser pages on other origins (CORS): a preflight from an allowed origin is answered with
//! the headers MCP uses, and every answer to that origin lets the page read it and its
//! `Mcp-Session-Id`, `MCP-Protocol-Version` and `WWW-Authenticate`; an origin not allowed is
//! refused (403) and told nothing. Over raw HTTP, and with the official TypeScript client
//! running in a page in headless Chromium, served from another origin.

use std::process::Stdio;
use std::time::Duration;

use crate::harness::{Client, Proxy, DEMO};
use http::{HeaderMap, Method, StatusCode};
use mcp_session_proxy::config::{Config, ServerConfig};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const APP: &str = "https://app.example";
const EVIL: &str = "https://evil.example";

/// The headers a browser asks for before the SDK's POST, as Chromium lists them (lowercase,
/// sorted), with a 2026-07-28 parameter header.
const REQUESTED: &str = "authorization,content-type,last-event-id,mcp-method,mcp-name,\
                         mcp-param-region,mcp-protocol-version,mcp-session-id";

fn allowing_the_app(config: &mut Config) {
    config.http.allowed_origins = vec![APP.to_owned()];
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

/// A header's comma-separated values, lowercase, over all its lines.
fn listed(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .flat_map(|v| v.to_str().unwrap().split(','))
        .map(|item| item.trim().to_ascii_lowercase())
        .filter(|item| !item.is_empty())
        .collect()
}

fn no_cors_headers(headers: &HeaderMap) {
    let cors: Vec<_> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("access-control-"))
        .collect();
    assert!(cors.is_empty(), "no CORS headers, got {cors:?}");
}

/// The page `origin` may read this answer and the headers the SDK reads.
fn readable_by(headers: &HeaderMap, origin: &str) {
    assert_eq!(
        header(headers, "access-control-allow-origin"),
        Some(origin),
        "{headers:?}"
    );
    assert!(listed(headers, "vary").contains(&"origin".to_owned()));
    let exposed = listed(headers, "access-control-expose-headers");
    for name in ["mcp-session-id", "mcp-protocol-version", "www-authenticate"] {
        assert!(exposed.contains(&name.to_owned()), "{name} in {exposed:?}");
    }
    assert!(
        headers.get("access-control-allow-credentials").is_none(),
        "no ambient credentials are asked for"
    );
}

async fn preflight(
    client: &Client,
    path: &str,
    origin: &str,
    method: &str,
) -> crate::harness::Reply {
    client
        .send_to(
            path,
            Method::OPTIONS,
            &[
                ("origin", origin),
                ("access-control-request-method", method),
                ("access-control-request-headers", REQUESTED),
            ],
            None,
        )
        .await
}

async fn initialize_from(client: &Client, origin: &str) -> crate::harness::Reply {
    client
        .send(
            Method::POST,
            &[
                ("origin", origin),
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
            ],
            Some(
                json!({
                    "jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": { "name": "page", "version": "1" } }
                })
                .to_string()
                .into(),
            ),
        )
        .await
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_is_answered_with_the_mcp_headers() {
    let proxy = Proxy::start_with(allowing_the_app).await;
    let reply = preflight(&proxy.client(), "/mcp", APP, "POST").await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    let headers = &reply.headers;
    assert_eq!(header(headers, "access-control-allow-origin"), Some(APP));
    assert!(listed(headers, "vary").contains(&"origin".to_owned()));
    let methods = listed(headers, "access-control-allow-methods");
    for method in ["get", "post", "delete"] {
        assert!(methods.contains(&method.to_owned()), "{methods:?}");
    }
    let allowed = listed(headers, "access-control-allow-headers");
    for name in REQUESTED.split(',').chain(["accept"]) {
        assert!(allowed.contains(&name.to_owned()), "{name} in {allowed:?}");
    }
    let max_age: u64 = header(headers, "access-control-max-age")
        .expect("the preflight may be cached")
        .parse()
        .unwrap();
    assert!(max_age > 0);
    assert!(headers.get("access-control-allow-credentials").is_none());
    proxy.stop().await;
}

#[tokio::test]
async fn a_preflight_allows_only_the_headers_the_proxy_reads() {
    let proxy = Proxy::start_with(allowing_the_app).await;
    let reply = proxy
        .client()
        .send(
            Method::OPTIONS,
            &[
                ("origin", APP),
                ("access-control-request-method", "POST"),
                (
                    "access-control-request-headers",
                    "content-type,cookie,mcp-param-,mcp-param-tenant,x-anything",
                ),
            ],
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    let allowed = listed(&reply.headers, "access-control-allow-headers");
    assert!(allowed.contains(&"content-type".to_owned()));
    assert!(allowed.contains(&"mcp-param-tenant".to_owned()));
    for refused in ["cookie", "mcp-param-", "x-anything", "*"] {
        assert!(
            !allowed.contains(&refused.to_owned()),
            "{refused} in {allowed:?}"
        );
    }
    proxy.stop().await;
}

#[tokio::test]
async fn an_origin_not_allowed_is_refused_and_told_nothing() {
    let proxy = Proxy::start_with(allowing_the_app).await;
    let client = proxy.client();
    let refused = preflight(&client, "/mcp", EVIL, "POST").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    no_cors_headers(&refused.headers);
    let refused = initialize_from(&client, EVIL).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(refused.headers.get("mcp-session-id").is_none());
    no_cors_headers(&refused.headers);
    assert_eq!(proxy.metric("mcp_proxy_sessions_created_total"), 0);
    // Two Origin headers: a check could read only one of them.
    let twice = client
        .send(
            Method::OPTIONS,
            &[
                ("origin", APP),
                ("origin", EVIL),
                ("access-control-request-method", "POST"),
            ],
            None,
        )
        .await;
    assert_eq!(twice.status, StatusCode::FORBIDDEN);
    no_cors_headers(&twice.headers);
    proxy.stop().await;
}

#[tokio::test]
async fn every_answer_to_an_allowed_origin_is_readable_by_it() {
    let proxy = Proxy::start_with(allowing_the_app).await;
    let mut client = proxy.client();
    client.extra_headers = vec![("origin".into(), APP.into())];
    let opened = initialize_from(&client, APP).await;
    assert_eq!(opened.status, StatusCode::OK);
    readable_by(&opened.headers, APP);
    let session = header(&opened.headers, "mcp-session-id")
        .unwrap()
        .to_owned();
    client.session = Some(session);
    client.protocol_version = Some("2025-11-25".into());

    let stream = client.get(None).await;
    assert_eq!(stream.status, StatusCode::OK, "the GET stream");
    readable_by(&stream.headers, APP);
    drop(stream);

    let mut unknown = client.clone();
    unknown.session = Some("not-a-session".into());
    let missing = unknown.get(None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    readable_by(&missing.headers, APP);

    let ended = client
        .send(Method::DELETE, &client_headers(&client), None)
        .await;
    assert_eq!(ended.status, StatusCode::OK);
    readable_by(&ended.headers, APP);

    // An OPTIONS that is no preflight is answered as before, and readable.
    let plain = client.send(Method::OPTIONS, &[("origin", APP)], None).await;
    assert_eq!(plain.status, StatusCode::METHOD_NOT_ALLOWED);
    readable_by(&plain.headers, APP);
    let without_origin = client.send(Method::OPTIONS, &[], None).await;
    assert_eq!(without_origin.status, StatusCode::METHOD_NOT_ALLOWED);
    no_cors_headers(&without_origin.headers);
    proxy.stop().await;
}

fn client_headers(client: &Client) -> Vec<(&str, &str)> {
    let mut headers = vec![("origin", APP)];
    if let Some(session) = &client.session {
        headers.push(("mcp-session-id", session.as_str()));
    }
    headers
}

#[tokio::test]
async fn a_loopback_page_is_allowed_as_check_origin_allows_it() {
    let proxy = Proxy::start().await;
    let page = "http://localhost:5173";
    let reply = preflight(&proxy.client(), "/mcp", page, "POST").await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    assert_eq!(
        header(&reply.headers, "access-control-allow-origin"),
        Some(page)
    );
    let refused = preflight(&proxy.client(), "/mcp", APP, "POST").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "none configured");
    no_cors_headers(&refused.headers);
    proxy.stop().await;
}

#[tokio::test]
async fn the_legacy_sse_pair_and_the_gateway_paths_answer_browsers_too() {
    let proxy = Proxy::start_with(|config| {
        allowing_the_app(config);
        let mut server = ServerConfig::default();
        server.upstream.stdio = Some(format!("{} demo-server", shell_words::quote(DEMO)));
        config.servers.insert("files".into(), server);
    })
    .await;
    let client = proxy.client();
    for (path, method, serves) in [
        ("/sse", "GET", "get"),
        ("/messages", "POST", "post"),
        ("/servers/files/mcp", "POST", "delete"),
        ("/servers/files/sse", "GET", "get"),
        ("/servers/files/messages", "POST", "post"),
    ] {
        let reply = preflight(&client, path, APP, method).await;
        assert_eq!(reply.status, StatusCode::NO_CONTENT, "{path}");
        assert_eq!(
            header(&reply.headers, "access-control-allow-origin"),
            Some(APP),
            "{path}"
        );
        let methods = listed(&reply.headers, "access-control-allow-methods");
        assert!(methods.contains(&serves.to_owned()), "{path}: {methods:?}");
        let refused = preflight(&client, path, EVIL, method).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{path}");
        no_cors_headers(&refused.headers);
    }

    let stream = client
        .send_to(
            "/sse",
            Method::GET,
            &[("origin", APP), ("accept", "text/event-stream")],
            None,
        )
        .await;
    assert_eq!(stream.status, StatusCode::OK);
    readable_by(&stream.headers, APP);

    let mut gateway = proxy.client();
    gateway.path = "/servers/files/mcp".into();
    let opened = initialize_from(&gateway, APP).await;
    assert_eq!(opened.status, StatusCode::OK);
    readable_by(&opened.headers, APP);
    proxy.stop().await;
}

/// A resource server whose issuer is never asked: these requests carry no token.
fn guarded(config: &mut Config) {
    allowing_the_app(config);
    config.auth.issuer = "https://issuer.example".to_owned();
}

#[tokio::test]
async fn a_page_reads_the_challenge_and_the_resource_metadata() {
    let proxy = Proxy::start_with(guarded).await;
    let client = proxy.client();
    // A preflight carries no credentials: it is answered, not challenged.
    let reply = preflight(&client, "/mcp", APP, "POST").await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    assert_eq!(
        header(&reply.headers, "access-control-allow-origin"),
        Some(APP)
    );

    let challenged = initialize_from(&client, APP).await;
    assert_eq!(challenged.status, StatusCode::UNAUTHORIZED);
    assert!(challenged.headers.contains_key("www-authenticate"));
    readable_by(&challenged.headers, APP);

    let metadata = "/.well-known/oauth-protected-resource/mcp";
    let reply = client
        .send_to(
            metadata,
            Method::OPTIONS,
            &[
                ("origin", APP),
                ("access-control-request-method", "GET"),
                ("access-control-request-headers", "mcp-protocol-version"),
            ],
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "the SDK's discovery");
    assert!(listed(&reply.headers, "access-control-allow-headers")
        .contains(&"mcp-protocol-version".to_owned()));
    let document = client
        .send_to(
            metadata,
            Method::GET,
            &[("origin", APP), ("mcp-protocol-version", "2025-11-25")],
            None,
        )
        .await;
    assert_eq!(document.status, StatusCode::OK);
    let readers = header(&document.headers, "access-control-allow-origin");
    assert!(readers == Some(APP) || readers == Some("*"), "{readers:?}");

    let refused = preflight(&client, "/mcp", EVIL, "POST").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    no_cors_headers(&refused.headers);
    proxy.stop().await;
}

/// Where Chromium loads the page from: both resolve to 127.0.0.1 (the browser is told so), and
/// neither is a loopback name, so only the configured one is allowed.
const PAGE_HOST: &str = "page.test";
const OTHER_HOST: &str = "elsewhere.test";
const CHROMIUM: &str = "/usr/bin/chromium";

#[tokio::test]
async fn the_typescript_client_in_a_page_on_another_origin_connects_calls_and_resumes() {
    assert!(
        std::path::Path::new(CHROMIUM).exists(),
        "Chromium is not installed: run scripts/test (it installs the Debian package chromium)"
    );
    let node = crate::harness::node_dir();
    let mut command = tokio::process::Command::new(node.join("node_modules/.bin/node"));
    command
        .arg(node.join("browser_client.mjs"))
        .args([PAGE_HOST, OTHER_HOST])
        .env("CHROMIUM", CHROMIUM)
        .current_dir(&node)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped());
    let (mut driver, announced, mut lines) =
        crate::harness::spawn_announcing("the page server's port", &mut command).await;
    let mut stderr = driver.stderr.take().unwrap();
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let port = serde_json::from_str::<Value>(&announced).unwrap()["port"]
        .as_u64()
        .unwrap_or_else(|| panic!("a port: {announced}"));
    let page = format!("http://{PAGE_HOST}:{port}");
    let proxy = Proxy::start_with(|config| {
        config.http.allowed_origins = vec![page.clone()];
        // Streams close mid-call, so the page's client must resume them.
        config.http.sse_close_after = Duration::from_millis(500);
        config.http.json_wait = Duration::from_millis(100);
    })
    .await;
    let mut stdin = driver.stdin.take().unwrap();
    let url = format!("http://{}/mcp\n", proxy.addr());
    stdin.write_all(url.as_bytes()).await.unwrap();
    drop(stdin);

    // The driver bounds itself (45 s); this bounds the driver.
    let line = tokio::time::timeout(Duration::from_secs(90), lines.next_line())
        .await
        .expect("the browser driver reports within 90 s")
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), driver.wait())
        .await
        .expect("the browser driver exits")
        .unwrap();
    let errors = errors.await.unwrap();
    let report: Value = match line {
        Some(line) if status.success() => serde_json::from_str(&line).unwrap(),
        line => panic!("the browser driver failed ({status}): {line:?}\n{errors}"),
    };

    let allowed = &report[PAGE_HOST];
    assert_eq!(allowed["origin"], page.as_str());
    assert_eq!(allowed["connected"], true, "{allowed:#}");
    assert!(allowed["error"].is_null(), "{allowed:#}");
    assert!(allowed["sessionId"]
        .as_str()
        .is_some_and(|id| id.len() >= 22));
    assert_eq!(
        allowed["protocolVersion"], "2025-11-25",
        "read from the answer"
    );
    assert!(allowed["tools"]
        .as_array()
        .unwrap()
        .contains(&json!("echo")));
    assert_eq!(allowed["echoed"], "from a page");
    assert_eq!(allowed["resumed"], "Reconnection test completed");
    assert!(
        allowed["resumptions"]
            .as_array()
            .unwrap()
            .contains(&json!(200)),
        "resumed with Last-Event-ID: {allowed:#}"
    );
    assert_eq!(allowed["terminated"], true);
    assert!(proxy.metric("mcp_proxy_replays_total") >= 1);

    let other = &report[OTHER_HOST];
    assert_eq!(other["connected"], false, "{other:#}");
    assert!(
        other["consoleErrors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|error| error.as_str().unwrap().contains("blocked by CORS policy")),
        "the browser blocked it: {other:#}"
    );
    // One session in all (the allowed page's), ended by its DELETE.
    proxy.assert_one_session_ended_by_delete();
    proxy.stop().await;
}
