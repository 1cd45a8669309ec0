//! The internal hop between replicas: `POST /internal/<server>/sessions/<id>` hands a client
//! message to the replica owning the session (answer: `{"stream"}`, the stream its answer is
//! logged on), `PUT` marks it in use (a client reads it on another replica), `DELETE` ends it.
//! Only with a Redis store, only with the shared secret.

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use super::body::Body;
use super::request::{header_str, json, read_body};
use super::Router;
use std::sync::Arc;
use std::time::Duration;

use crate::jsonrpc::{Kind, Message};
use crate::metrics::Metrics;
use crate::session::log::StreamKey;
use crate::session::Session;
use crate::upstream::owner::SECRET_HEADER;

pub async fn handle(router: &Router, rest: &str, request: Request<Incoming>) -> Response<Body> {
    let Some(redis) = router.store.redis() else {
        return plain(StatusCode::NOT_FOUND, "not found");
    };
    let presented = header_str(request.headers(), SECRET_HEADER).unwrap_or_default();
    if !same(presented.as_bytes(), redis.secret.as_bytes()) {
        return plain(StatusCode::FORBIDDEN, "the cluster secret does not match");
    }
    let Some((server, id)) = rest.split_once("/sessions/") else {
        return plain(StatusCode::NOT_FOUND, "not found");
    };
    let app = match server {
        "default" => router.default.as_ref(),
        name => router.servers.get(name),
    };
    let Some(app) = app else {
        return plain(StatusCode::NOT_FOUND, "no such server");
    };
    if router.shutdown.is_cancelled() {
        // Leaving: the asking replica takes the session over once this one's key is gone.
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "this replica is shutting down",
        );
    }
    let Some(session) = app.registry.owned(id) else {
        return plain(
            StatusCode::NOT_FOUND,
            "this replica does not own that session",
        );
    };
    Metrics::inc(&app.metrics.sessions_forwarded_total);
    match *request.method() {
        Method::DELETE => {
            app.registry.end_everywhere(id).await;
            json(StatusCode::OK, json!({}).to_string().into())
        }
        // A client reads the session on another replica: it is not idle.
        Method::PUT => {
            session.touch();
            json(StatusCode::OK, json!({}).to_string().into())
        }
        Method::POST => {
            let (parts, body) = request.into_parts();
            let body = match read_body(
                &parts.headers,
                body,
                app.http.max_body_bytes,
                app.http.body_timeout,
            )
            .await
            {
                Ok(body) => body,
                Err(rejection) => return rejection.into_response(),
            };
            let message = match Message::parse(body) {
                Ok(message) => message,
                Err(error) => return plain(StatusCode::BAD_REQUEST, &error.to_string()),
            };
            let outcome = match message.kind() {
                Kind::Request => session.call(message).await.map(Some),
                Kind::Notification => session.notify(message).await.map(|()| None),
                Kind::Response => session.answer(message).await.map(|()| None),
            };
            match outcome {
                Ok(Some(stream)) => {
                    let events = first_answer(&session, stream, app.http.json_wait).await;
                    let body = json!({ "stream": stream.to_string(), "events": events });
                    json(StatusCode::OK, body.to_string().into())
                }
                Ok(None) => json(StatusCode::OK, json!({ "stream": null }).to_string().into()),
                // Its server was released as this replica began to leave: the asker takes
                // the session over and the client retries.
                Err(_) if router.shutdown.is_cancelled() => plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "this replica is shutting down",
                ),
                Err(error) => plain(StatusCode::BAD_GATEWAY, &error.to_string()),
            }
        }
        _ => plain(StatusCode::METHOD_NOT_ALLOWED, "POST, PUT or DELETE"),
    }
}

/// What the request's stream holds until its answer, or for at most `wait`: handed back with
/// the hop, so the asking replica need not wait for it to come through Redis (it comes that way
/// too, and is recognized by its position).
async fn first_answer(
    session: &Arc<Session>,
    stream: StreamKey,
    wait: Duration,
) -> Vec<serde_json::Value> {
    let mut reader = session.attach(stream, None);
    let deadline = tokio::time::Instant::now() + wait;
    let mut events = Vec::new();
    while let Ok(Some(delivery)) = tokio::time::timeout_at(deadline, reader.next()).await {
        let mut ended = false;
        for event in delivery.events {
            ended |= event.terminal;
            // Byte for byte (an empty payload, the end marker of a cancelled request: null).
            let payload = String::from_utf8(event.payload.to_vec())
                .ok()
                .and_then(|text| serde_json::value::RawValue::from_string(text).ok());
            events
                .push(json!({ "seq": event.seq, "terminal": event.terminal, "payload": payload }));
        }
        if ended {
            break;
        }
    }
    events
}

/// Compares secrets in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Body::full(format!("{text}\n")));
    *response.status_mut() = status;
    response
}
