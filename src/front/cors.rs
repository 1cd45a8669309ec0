//! Browser pages on other origins (Fetch standard §CORS protocol): a preflight to a served path
//! is answered for the origins `guard::check_origin` admits, and every answer to such an origin
//! names it and the headers its page may read. Never `Access-Control-Allow-Credentials`: the
//! proxy reads no cookie and no ambient credential; a page's token travels in `Authorization`,
//! a header its script sets, which the preflight allows by name.

use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};

use super::guard;
use super::rejection::Rejection;
use super::settings::HttpSettings;
use crate::wire::http_body::Body;
use crate::wire::mirrored::PARAM_PREFIX;

/// The request headers MCP clients send (lowercase); `Mcp-Param-*` names are allowed one by one.
const ALLOWED_HEADERS: &str = "accept, authorization, content-type, last-event-id, \
     mcp-method, mcp-name, mcp-protocol-session-id, mcp-protocol-version, mcp-session-id, \
     traceparent, tracestate";

/// The answer headers a page's client reads that a browser hides unless named.
const EXPOSED_HEADERS: &str = "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate, Retry-After";

/// How long a browser may keep a preflight's answer (Chromium keeps it 2 h at most). A page
/// whose origin is struck off meanwhile is still refused: every request is checked again.
const MAX_AGE_SECONDS: u32 = 7200;

/// At most this many `Mcp-Param-*` names are allowed in one preflight; a page asking for more
/// is refused them (its browser then fails the request).
const MAX_PARAM_HEADERS: usize = 64;

/// The methods each kind of served path takes.
pub mod methods {
    /// `/mcp`: Streamable HTTP.
    pub const MCP: &str = "GET, POST, DELETE";
    /// The legacy stream, `/sse`.
    pub const SSE: &str = "GET";
    /// The legacy messages, `/messages`.
    pub const MESSAGES: &str = "POST";
    /// Protected Resource Metadata.
    pub const METADATA: &str = "GET, HEAD";

    /// The methods a served server's endpoint takes (`mcp`, `sse`, `messages`).
    pub fn of(endpoint: &str) -> Option<&'static str> {
        match endpoint {
            "mcp" => Some(MCP),
            "sse" => Some(SSE),
            "messages" => Some(MESSAGES),
            _ => None,
        }
    }
}

/// Whether `request` is a CORS preflight: `OPTIONS` with `Origin` and
/// `Access-Control-Request-Method`. Any other `OPTIONS` is an ordinary request.
pub fn is_preflight<B>(request: &Request<B>) -> bool {
    request.method() == Method::OPTIONS
        && request.headers().contains_key(header::ORIGIN)
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The answer to a preflight for a path that takes `methods`: 204 with what the page may send,
/// when its origin is allowed; else the origin check's refusal (403), with no CORS headers.
/// (Without `Origin`, no preflight: 204 with `Allow` alone.)
pub fn preflight(
    settings: &HttpSettings,
    headers: &HeaderMap,
    methods: &'static str,
) -> Response<Body> {
    let origin = match admitted_origin(settings, headers) {
        Err(refused) => return Rejection::from(refused).into_response(),
        Ok(origin) => origin,
    };
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    let answer = response.headers_mut();
    answer.insert(header::ALLOW, HeaderValue::from_static(methods));
    let Some(origin) = origin else {
        return response;
    };
    answer.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    answer.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(methods),
    );
    answer.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        allowed_headers(headers),
    );
    answer.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from(MAX_AGE_SECONDS),
    );
    answer.append(
        header::VARY,
        HeaderValue::from_static(
            "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
        ),
    );
    response
}

/// The request's `Origin` when `check_origin` admits it; `None` without one.
fn admitted_origin(
    settings: &HttpSettings,
    headers: &HeaderMap,
) -> Result<Option<HeaderValue>, guard::Refused> {
    guard::check_origin(settings, headers).map(|()| headers.get(header::ORIGIN).cloned())
}

/// The headers every MCP client sends, and the well-formed `Mcp-Param-*` names the preflight
/// asks for (a header name cannot be allowed by a prefix).
fn allowed_headers(headers: &HeaderMap) -> HeaderValue {
    let mut allowed = ALLOWED_HEADERS.to_owned();
    let mut params: Vec<String> = Vec::new();
    let requested = headers
        .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_ascii_lowercase());
    for name in requested {
        let well_formed = name
            .strip_prefix(PARAM_PREFIX)
            .is_some_and(|rest| !rest.is_empty())
            && HeaderName::from_bytes(name.as_bytes()).is_ok();
        if well_formed && !params.contains(&name) && params.len() < MAX_PARAM_HEADERS {
            params.push(name);
        }
    }
    for name in params {
        allowed.push_str(", ");
        allowed.push_str(&name);
    }
    // Only token characters, commas and spaces went in.
    HeaderValue::try_from(allowed).unwrap_or_else(|_| HeaderValue::from_static(ALLOWED_HEADERS))
}

/// Who may read the answer to a request: its `Origin`, when that is one `check_origin` admits.
#[derive(Debug, Clone, Default)]
pub struct Readers {
    origin: Option<HeaderValue>,
}

impl Readers {
    /// The readers of the answer to a request with `headers`.
    pub fn of(settings: &HttpSettings, headers: &HeaderMap) -> Readers {
        Readers {
            origin: admitted_origin(settings, headers).ok().flatten(),
        }
    }

    /// Lets the page read `response` and the headers its client needs: on every answer but a
    /// protocol switch (a WebSocket is no CORS request). Each answer says it varies by
    /// `Origin`, so no cache hands one origin's answer to another.
    pub fn allow(&self, response: &mut Response<Body>) {
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            return;
        }
        let headers = response.headers_mut();
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
        let Some(origin) = &self.origin else {
            return;
        };
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED_HEADERS),
        );
    }
}

/// Marks a public document (no credentials read, the same for everyone) as readable by any page.
pub fn public(response: &mut Response<Body>) {
    response.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preflight_headers(origin: &str, requested: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ORIGIN, origin.parse().unwrap());
        headers.insert(
            header::ACCESS_CONTROL_REQUEST_METHOD,
            "POST".parse().unwrap(),
        );
        headers.insert(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            requested.parse().unwrap(),
        );
        headers
    }

    fn allowed(headers: &HeaderMap) -> Vec<String> {
        allowed_headers(headers)
            .to_str()
            .unwrap()
            .split(", ")
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn only_well_formed_parameter_headers_are_added() {
        let headers = preflight_headers(
            "http://localhost",
            "Mcp-Param-Region, mcp-param-region,mcp-param-,mcp-param-a b,x-other,cookie",
        );
        let allowed = allowed(&headers);
        assert!(allowed.contains(&"mcp-param-region".to_owned()));
        assert_eq!(
            allowed
                .iter()
                .filter(|n| n.starts_with(PARAM_PREFIX))
                .count(),
            1,
            "{allowed:?}"
        );
        assert!(!allowed
            .iter()
            .any(|n| n == "cookie" || n == "x-other" || n == "*"));
    }

    #[test]
    fn parameter_headers_are_bounded() {
        let many: Vec<String> = (0..1000).map(|i| format!("mcp-param-p{i}")).collect();
        let headers = preflight_headers("http://localhost", &many.join(","));
        let params = allowed(&headers)
            .into_iter()
            .filter(|n| n.starts_with(PARAM_PREFIX))
            .count();
        assert_eq!(params, MAX_PARAM_HEADERS);
    }

    #[test]
    fn a_disallowed_origin_gets_the_refusal_and_nothing_else() {
        let settings = HttpSettings::default();
        let headers = preflight_headers("https://evil.example", "content-type");
        let response = preflight(&settings, &headers, methods::MCP);
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert!(!response
            .headers()
            .keys()
            .any(|name| name.as_str().starts_with("access-control-")));
        let mut answer = Response::new(Body::empty());
        Readers::of(&settings, &headers).allow(&mut answer);
        assert!(answer
            .headers()
            .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
            .is_none());
    }

    #[test]
    fn an_allowed_origin_is_named_never_wildcarded() {
        let settings = HttpSettings {
            allowed_origins: vec!["*".into()],
            ..HttpSettings::default()
        };
        let headers = preflight_headers("https://app.example", "content-type");
        let response = preflight(&settings, &headers, methods::MCP);
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        assert_eq!(
            response.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://app.example"
        );
        let mut answer = Response::new(Body::empty());
        Readers::of(&settings, &headers).allow(&mut answer);
        assert_eq!(
            answer.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://app.example"
        );
        assert!(answer
            .headers()
            .get(header::ACCESS_CONTROL_ALLOW_CREDENTIALS)
            .is_none());
    }
}
