//! The internal hop between replicas: `POST /internal/<server>/sessions/<id>` hands a client
//! message to the replica owning the session (answer: `{"stream", "events"}`, the stream its
//! answer is logged on and what was logged there within the JSON wait); `PUT` says clients read
//! the session on another replica (body `{"reading": [stream keys]}`: the owner keeps it alive
//! and sends those streams every message, uncoalesced; answer `{"head"}`); `DELETE` ends it.
//! A hop names the replica it is meant for (`x-mcp-proxy-for-node`); another replica at that
//! address (the owner restarted) refuses it with 421 before doing anything, and every answer
//! names this replica (`x-mcp-proxy-node`). Only with a Redis store, only with the secret.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use super::body::Body;
use super::request::{header_str, json, read_body};
use super::Router;
use crate::event::StreamKey;
use crate::hop::{ReadingStreams, Taken, TakenEvent, FOR_NODE_HEADER, NODE_HEADER, SECRET_HEADER};
use crate::jsonrpc::{Kind, Message};
use crate::metrics::Metrics;
use crate::session::Session;

pub async fn handle(router: &Router, rest: &str, request: Request<Incoming>) -> Response<Body> {
    let Some(member) = router.cluster.member() else {
        return plain(StatusCode::NOT_FOUND, "not found");
    };
    let mut response = answer(router, rest, request).await;
    if let Ok(node) = HeaderValue::from_str(member.node_id) {
        response.headers_mut().insert(NODE_HEADER, node);
    }
    response
}

async fn answer(router: &Router, rest: &str, request: Request<Incoming>) -> Response<Body> {
    let Some(member) = router.cluster.member() else {
        return plain(StatusCode::NOT_FOUND, "not found");
    };
    let presented = header_str(request.headers(), SECRET_HEADER).unwrap_or_default();
    if !same(presented.as_bytes(), member.secret.as_bytes()) {
        return plain(StatusCode::FORBIDDEN, "the cluster secret does not match");
    }
    // Meant for the replica that used to be at this address: nothing is done here.
    if header_str(request.headers(), FOR_NODE_HEADER).is_some_and(|node| node != member.node_id) {
        return plain(
            StatusCode::MISDIRECTED_REQUEST,
            "this replica is not the one the hop is meant for",
        );
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
    let session = match app.registry.owned_or_reclaimed(id).await {
        Ok(Some(session)) => session,
        Ok(None) => {
            return plain(
                StatusCode::NOT_FOUND,
                "this replica does not own that session",
            )
        }
        Err(error) => return plain(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
    };
    Metrics::inc(&app.metrics.sessions_forwarded_total);
    // Streams read through the asker stay live here for a few of its heartbeats.
    let lease = member.lease;
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
    match parts.method {
        Method::DELETE => {
            app.registry.end_everywhere(id).await;
            json(StatusCode::OK, json!({}).to_string().into())
        }
        // Clients read the session on another replica: it is in use, and those streams get
        // every message as it comes.
        Method::PUT => {
            let reading: ReadingStreams = serde_json::from_slice(&body).unwrap_or_default();
            let head = session.read_elsewhere(&reading.streams(), lease);
            let body = json!({ "head": head, "record": session.record() });
            json(StatusCode::OK, body.to_string().into())
        }
        Method::POST => {
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
                    // The asker reads the answer there.
                    session.read_elsewhere(&[stream], lease);
                    let events = first_answer(&session, stream, app.http.json_wait).await;
                    taken(Taken::new(Some(stream), events))
                }
                Ok(None) => taken(Taken::default()),
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
) -> Vec<TakenEvent> {
    let mut reader = session.attach(stream, None);
    let deadline = tokio::time::Instant::now() + wait;
    let mut events = Vec::new();
    while let Ok(Some(delivery)) = tokio::time::timeout_at(deadline, reader.next()).await {
        let mut ended = false;
        for event in delivery.events {
            ended |= event.terminal;
            events.push(TakenEvent::new(event.seq, event.terminal, &event.payload));
        }
        if ended {
            break;
        }
    }
    events
}

fn taken(taken: Taken) -> Response<Body> {
    let body = serde_json::to_vec(&taken).unwrap_or_default();
    json(StatusCode::OK, body.into())
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
