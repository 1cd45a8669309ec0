//! The internal hop between replicas: `POST /internal/<server>/sessions/<id>` hands a client
//! message to the replica owning the session (answer: `{"stream", "events"}`, the stream its
//! answer is logged on and what was logged there within the JSON wait); `PUT` says clients read
//! the session on another replica (body `{"reading": [stream keys]}`: the owner keeps it alive
//! and sends those streams every message, uncoalesced; answer `{"head"}`); `DELETE` ends it.
//! A hop names the replica it is meant for (`x-mcp-proxy-for-node`); another replica at that
//! address (the owner restarted) refuses it with 421 before doing anything, and every answer
//! names this replica (`x-mcp-proxy-node`). Only with a Redis store, and only a hop signed
//! with the hop key (`x-mcp-proxy-signature`, see [`crate::hop`]) and not taken before (its
//! nonce, kept while the signature is valid): anything else gets 403 (503 while the nonces kept
//! are at their bound). Every answer is signed for the hop it answers
//! (`x-mcp-proxy-answer-signature`), and a request's stays within the answer bound.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;
use tracing::warn;

use super::rejection::Rejection;
use super::request::{header_str, json, read_body};
use super::{App, Router};
use crate::base::carry::Carrying;
use crate::base::event::StreamKey;
use crate::hop::{
    self, Answer, NonceRefused, Reading, ReadingStreams, SignatureError, Signed, Taken, TakenEvent,
    ANSWER_SIGNATURE_HEADER, FOR_NODE_HEADER, NODE_HEADER, PRINCIPAL_HEADER, SIGNATURE_HEADER,
};
use crate::session::cluster::ThisReplica;
use crate::session::Session;
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::{Kind, Message};

pub async fn handle(router: &Router, rest: &str, request: Request<Incoming>) -> Response<Body> {
    let Some(member) = router.cluster.member() else {
        return plain(StatusCode::NOT_FOUND, "not found");
    };
    let asked = header_str(request.headers(), SIGNATURE_HEADER)
        .unwrap_or_default()
        .to_owned();
    let mut response = answer(router, rest, request).await;
    let body = match response.body() {
        Body::Full(body) => body.clone().unwrap_or_default(),
        // Every answer here is whole: one that is not could not be signed.
        Body::Stream(_) => {
            response = plain(StatusCode::INTERNAL_SERVER_ERROR, "an unsigned answer");
            Bytes::from_static(b"an unsigned answer\n")
        }
    };
    let signature = Answer {
        request_signature: &asked,
        status: response.status().as_u16(),
        node: member.node_id,
        body: &body,
    }
    .sign(member.hop_key);
    let headers = response.headers_mut();
    if let Ok(node) = HeaderValue::from_str(member.node_id) {
        headers.insert(NODE_HEADER, node);
    }
    if let Ok(signature) = HeaderValue::from_str(&signature) {
        headers.insert(ANSWER_SIGNATURE_HEADER, signature);
    }
    response
}

async fn answer(router: &Router, rest: &str, request: Request<Incoming>) -> Response<Body> {
    match take(router, rest, request).await {
        Ok(response) => response,
        Err(Refused::Plain(status, text)) => plain(status, &text),
        Err(Refused::Body(rejection)) => rejection.into_response(),
    }
}

/// Checks the hop, finds the session, and carries out what it asks.
async fn take(
    router: &Router,
    rest: &str,
    request: Request<Incoming>,
) -> Result<Response<Body>, Refused> {
    let member = router
        .cluster
        .member()
        .ok_or_else(|| refused(StatusCode::NOT_FOUND, "not found"))?;
    check(request.headers(), member)?;
    let (app, id) = served(router, rest)?;
    let (parts, body) = request.into_parts();
    let signature = header_str(&parts.headers, SIGNATURE_HEADER).unwrap_or_default();
    let body = read_body(
        &parts.headers,
        body,
        app.http.now().max_body_bytes,
        app.http.now().body_timeout,
    )
    .await
    .map_err(|rejection| Refused::Body(Box::new(rejection)))?;
    let signed = Signed {
        method: parts.method.as_str(),
        path: &format!("/internal/{rest}"),
        body: &body,
        node: member.node_id,
    };
    let now = SystemTime::now();
    let stamp = signed
        .check(member.hop_key, signature, now)
        .map_err(|error| refused(StatusCode::FORBIDDEN, &error.to_string()))?;
    take_once(router, member, &stamp, now)?;
    let session = owned(router, app, id).await?;
    check_principal(
        &parts.headers,
        member,
        signature,
        session.principal().as_str(),
    )?;
    app.metrics.sessions_forwarded_total.inc();
    // Streams read through the asker stay live here for a few of its heartbeats.
    let (lease, max_answer_bytes) = (member.lease, member.max_answer_bytes);
    match parts.method {
        Method::DELETE => {
            app.registry.end_everywhere(id).await;
            Ok(json(StatusCode::OK, json!({}).to_string().into()))
        }
        // Clients read the session on another replica: it is in use, and those streams get
        // every message as it comes.
        Method::PUT => {
            let reading: ReadingStreams = serde_json::from_slice(&body).unwrap_or_default();
            let head = session.read_elsewhere(&reading.streams(), lease);
            let record = serde_json::to_value(session.record()).unwrap_or_default();
            Ok(encoded(&Reading { head, record }))
        }
        Method::POST => {
            let message = Message::parse(body)
                .map_err(|error| refused(StatusCode::BAD_REQUEST, &error.to_string()))?;
            if router.shutdown.is_cancelled() && message.kind() == Kind::Request {
                // Leaving: the asking replica takes the session over once this one's key is
                // gone. Answers and notifications still reach the requests being drained.
                return Err(refused(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "this replica is shutting down",
                ));
            }
            // Its server's work (an HTTP server's POST) carried by this task until the answer
            // is read.
            let forwarded = forward(router, app, &session, message, lease, max_answer_bytes);
            Carrying::new(forwarded).await
        }
        _ => Err(refused(
            StatusCode::METHOD_NOT_ALLOWED,
            "POST, PUT or DELETE",
        )),
    }
}

/// The asker checked the principal against the session's record; a hop naming another one
/// finds nothing, as a client would, and one whose principal tag is not its own is refused.
fn check_principal(
    headers: &http::HeaderMap,
    member: ThisReplica<'_>,
    signature: &str,
    principal: &str,
) -> Result<(), Refused> {
    let Some(header) = header_str(headers, PRINCIPAL_HEADER) else {
        return Ok(());
    };
    let named = hop::checked_principal(member.hop_key, signature, header).ok_or_else(|| {
        refused(
            StatusCode::FORBIDDEN,
            "the hop's principal tag does not match",
        )
    })?;
    match named == principal {
        true => Ok(()),
        false => Err(refused(StatusCode::NOT_FOUND, "not found")),
    }
}

/// The hop is meant for this replica (not for the one that used to be at this address: then
/// nothing is done here) and carries a recent signature, whose MAC is checked once the body is
/// read.
fn check(headers: &http::HeaderMap, member: ThisReplica<'_>) -> Result<(), Refused> {
    if header_str(headers, FOR_NODE_HEADER).is_some_and(|node| node != member.node_id) {
        return Err(refused(
            StatusCode::MISDIRECTED_REQUEST,
            "this replica is not the one the hop is meant for",
        ));
    }
    let forbidden = |error: SignatureError| refused(StatusCode::FORBIDDEN, &error.to_string());
    let signature =
        header_str(headers, SIGNATURE_HEADER).ok_or_else(|| forbidden(SignatureError::Missing))?;
    let stamp = hop::parse(signature).map_err(forbidden)?;
    hop::check_time(stamp.time, SystemTime::now()).map_err(forbidden)
}

/// Takes the hop's nonce, once: a replay is refused (403); a hop signed before this replica
/// started, and every hop while the nonces kept are at their bound, with 503 (the message was
/// not carried out: the asker may send it again, signed anew).
fn take_once(
    router: &Router,
    member: ThisReplica<'_>,
    stamp: &hop::Stamp<'_>,
    now: SystemTime,
) -> Result<(), Refused> {
    let metrics = &router.metrics.hop;
    match member.take_nonce(stamp, now) {
        Ok(kept) => {
            metrics
                .nonces_kept
                .set(i64::try_from(kept).unwrap_or(i64::MAX));
            Ok(())
        }
        Err(error) => {
            let status = match error {
                NonceRefused::Replayed => {
                    metrics.replays_refused.inc();
                    StatusCode::FORBIDDEN
                }
                NonceRefused::TooOld => {
                    metrics.too_old_refused.inc();
                    StatusCode::SERVICE_UNAVAILABLE
                }
                NonceRefused::Full(_) => {
                    metrics.nonces_full.inc();
                    StatusCode::SERVICE_UNAVAILABLE
                }
            };
            warn!(%error, "a hop was refused");
            Err(refused(status, &error.to_string()))
        }
    }
}

/// The served server and session id the path names (`<server>/sessions/<id>`).
fn served<'a>(router: &'a Router, rest: &'a str) -> Result<(&'a App, &'a str), Refused> {
    let (server, id) = rest
        .split_once("/sessions/")
        .ok_or_else(|| refused(StatusCode::NOT_FOUND, "not found"))?;
    let app = match server {
        "default" => router.default.as_ref(),
        name => router.servers.get(name),
    };
    let app = app.ok_or_else(|| refused(StatusCode::NOT_FOUND, "no such server"))?;
    Ok((app, id))
}

/// The session, if this replica owns it (or reclaims it).
async fn owned(router: &Router, app: &App, id: &str) -> Result<Arc<Session>, Refused> {
    match app.registry.owned_or_reclaimed(id).await {
        Ok(Some(session)) => Ok(session),
        // Leaving, it has handed its sessions over (or is about to): the asker takes them over
        // once this replica's key is gone, and is told to wait until then, not that they are gone.
        _ if router.shutdown.is_cancelled() => Err(refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "this replica is shutting down",
        )),
        Ok(None) => Err(refused(
            StatusCode::NOT_FOUND,
            "this replica does not own that session",
        )),
        Err(error) => Err(refused(StatusCode::SERVICE_UNAVAILABLE, &error.to_string())),
    }
}

/// Hands a client message to the session, here where it lives (no lookup elsewhere, as
/// `Registry::deliver` does): for a request, the stream its answer goes on and what is logged
/// there within the JSON wait.
async fn forward(
    router: &Router,
    app: &App,
    session: &Arc<Session>,
    message: Message,
    lease: Duration,
    max_answer_bytes: usize,
) -> Result<Response<Body>, Refused> {
    let before = session.head();
    let delivered = match message.kind() {
        Kind::Request => session.call(message).await.map(Some),
        Kind::Notification | Kind::Response => session.send(message).await.map(|()| None),
    };
    match delivered {
        Ok(Some(stream)) => {
            // The asker reads the answer there.
            session.read_elsewhere(&[stream], lease);
            let room = max_answer_bytes.saturating_sub(1 << 10); // the rest of the answer
            let wait = app.http.now().json_wait;
            let events = first_answer(session, stream, before, wait, room).await;
            Ok(encoded(&Taken::new(Some(stream), events)))
        }
        Ok(None) => Ok(encoded(&Taken::default())),
        // Its server was released as this replica began to leave: the asker takes the session
        // over and the client retries.
        Err(_) if router.shutdown.is_cancelled() => Err(refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "this replica is shutting down",
        )),
        Err(error) => Err(refused(StatusCode::BAD_GATEWAY, &error.to_string())),
    }
}

/// What the request's stream holds until its answer, or for at most `wait`, in at most `room`
/// bytes: handed back with the hop, so the asking replica need not wait for it to come through
/// Redis (it comes that way too, and is recognized by its position, as does what did not fit).
/// A request stream is read by a reader of its own. The standalone stream, where every message
/// of a session with one stream goes (2024-11-05 SSE, WebSocket, protocol-level), is read from
/// `before` (the log's head before the request) beside its client's reader, which may be attached
/// here: attaching another would end the client's stream, and with it a 2024-11-05 session.
async fn first_answer(
    session: &Arc<Session>,
    stream: StreamKey,
    before: u64,
    wait: Duration,
    mut room: usize,
) -> Vec<TakenEvent> {
    let mut reader = match stream {
        StreamKey::Standalone => {
            session.tap_after(Some(before.min(session.delivered_through(stream))))
        }
        StreamKey::Request(_) => session.attach(stream, None),
    };
    let deadline = crate::base::clock::from_now(wait);
    let mut events = Vec::new();
    while let Ok(Some(delivery)) = tokio::time::timeout_at(deadline, reader.next()).await {
        let mut ended = false;
        for event in delivery.events {
            let Some(left) = room.checked_sub(TakenEvent::cost(&event.payload)) else {
                return events;
            };
            room = left;
            ended |= event.terminal;
            events.push(TakenEvent::new(event.seq, event.terminal, &event.payload));
        }
        if ended {
            break;
        }
    }
    events
}

/// A hop answer, as JSON.
fn encoded(answer: &impl serde::Serialize) -> Response<Body> {
    let body = serde_json::to_vec(answer).unwrap_or_default();
    json(StatusCode::OK, body.into())
}

/// Why a hop was not carried out: a status and a line of text, or a refused body.
enum Refused {
    Plain(StatusCode, String),
    Body(Box<Rejection>),
}

fn refused(status: StatusCode, text: &str) -> Refused {
    Refused::Plain(status, text.to_owned())
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Body::full(format!("{text}\n")));
    *response.status_mut() = status;
    response
}
