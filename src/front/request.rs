//! Reading and checking requests, and the plain responses, shared by the client fronts.

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::body::Body;
use super::guard;
use super::rejection::Rejection;
use super::App;

pub fn json(status: StatusCode, body: Bytes) -> Response<Body> {
    let mut response = Response::new(Body::full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

pub fn accepted() -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

pub async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    limit: usize,
) -> Result<Bytes, Rejection> {
    let declared =
        header_str(headers, header::CONTENT_LENGTH.as_str()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(Rejection::too_large(limit));
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            Err(Rejection::too_large(limit))
        }
        Err(error) => Err(Rejection::bad_request(format!(
            "Bad Request: the body could not be read: {error}"
        ))),
    }
}

/// `Origin` and `Host` checks against DNS rebinding: 403 when either is not allowed.
pub fn check_origin(app: &App, headers: &HeaderMap) -> Result<(), Rejection> {
    if let Some(origin) = header_str(headers, header::ORIGIN.as_str()) {
        if !guard::origin_allowed(&app.http, origin) {
            return Err(Rejection::forbidden_origin(origin));
        }
    }
    match header_str(headers, header::HOST.as_str()) {
        Some(host) if !guard::host_allowed(&app.http, host) => Err(Rejection::forbidden_host(host)),
        _ => Ok(()),
    }
}

pub fn require_accept(headers: &HeaderMap, required: &[&str]) -> Result<(), Rejection> {
    let accepted: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|part| {
            part.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .collect();
    let satisfied = |wanted: &str| {
        let family = wanted.split('/').next().unwrap_or_default();
        accepted
            .iter()
            .any(|a| a == wanted || a == "*/*" || *a == format!("{family}/*"))
    };
    match required.iter().find(|wanted| !satisfied(wanted)) {
        Some(_) => Err(Rejection::not_acceptable(&required.join(" and "))),
        None => Ok(()),
    }
}

pub fn media_type_is(headers: &HeaderMap, wanted: &str) -> bool {
    header_str(headers, header::CONTENT_TYPE.as_str())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(wanted))
}

pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}
