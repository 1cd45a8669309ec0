//! One 2026-07-28 request through a legacy session: sent with the request's own `_meta` fields
//! left out, answered as JSON when the answer is ready within `json_wait`, else on an SSE
//! stream (no event ids: nothing is resumable) carrying only what concerns it: its progress,
//! its log messages at or above the level it asked for, then its result. A client that closes
//! the stream cancels the request. Requests of the server's (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) are held and the client gets `input_required`
//! (`input`); one for a capability the request did not declare is refused upstream and
//! answered -32021.
//!
//! Here the exchange that ties them: `call` (the call and what its stream's messages become),
//! `server_requests` (what the server asks of the client).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;
use tokio::time::Instant;

use super::call::{Call, Outcome, Translation};
use super::input;
use super::state::HeldRequest;
use crate::base::carry::Carrying;
use crate::front::event_stream::{self, Ended, KeepAlive, Options, Source};
use crate::front::rejection::{failed_request, Rejection};
use crate::front::request::json;
use crate::front::App;
use crate::session::correlate::{Correlated, Ending};
use crate::session::log::{LogEvent, StreamKey};
use crate::session::Reader;
use crate::telemetry::spans::{Span, Spans};
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::Message;
use crate::wire::sse;

/// Chunks buffered towards a slow client before the writer waits.
const CHUNKS: usize = 64;

/// Sends a call and answers it; its server's work (an HTTP server's POST) is carried by this
/// task until the answer begins.
pub async fn exchange(
    app: &App,
    correlated: Correlated,
    forwarded: Message,
    call: Call,
) -> Result<http::Response<Body>, Rejection> {
    Carrying::new(send_and_answer(app, correlated, forwarded, call)).await
}

async fn send_and_answer(
    app: &App,
    correlated: Correlated,
    forwarded: Message,
    call: Call,
) -> Result<http::Response<Body>, Rejection> {
    let session = correlated.session.clone();
    let stream = match app.registry.call(&session, forwarded).await {
        Ok(stream) => stream,
        Err(error) if error.not_taken() => {
            return Err(Rejection::session(&error).with_id(Some(&call.client_id)))
        }
        Err(error) => {
            return Ok(json(
                StatusCode::OK,
                failed_request(&call.client_id, &error),
            ))
        }
    };
    let reader = session.attach(stream, None);
    Ok(respond(app, correlated, call, stream, reader).await)
}

/// Answers a call whose request is (again) in flight on `stream`, read by `reader`.
pub async fn respond(
    app: &App,
    correlated: Correlated,
    call: Call,
    stream: StreamKey,
    reader: Reader,
) -> http::Response<Body> {
    let mut relay = Relay {
        translation: Translation {
            registry: app.registry.clone(),
            session: correlated.session.clone(),
            initialized: correlated.initialized.clone(),
            hints: app.modern.hints,
            own_session: correlated.ending.is_some(),
            state_key: app.modern.state_key.clone(),
            input_ttl: app.modern.input_ttl,
            held_calls: app.modern.held_calls.clone(),
            call,
            stream,
        },
        reader,
        buffered: VecDeque::new(),
        inputs: BTreeMap::new(),
        gather_until: None,
        read_through: 0,
        spans: app.spans.clone(),
        keep_alive: app.http.now().sse_keep_alive,
        round: None,
    };
    let mut pending = Vec::new();
    let until = crate::base::clock::from_now(app.http.now().json_wait);
    loop {
        match relay.next(Some(until)).await {
            Next::Frame(frame) => pending.push(frame),
            Next::Done(answer, status, held) => {
                let going_on = held.is_some();
                let ending = settle(correlated.ending, held, &relay.translation);
                if pending.is_empty() {
                    if !going_on {
                        // Over, and answered as JSON: nothing of it is read again.
                        relay.translation.session.forget(stream);
                    }
                    drop(ending);
                    return json(status, answer);
                }
                pending.push(answer);
                return stream_response(pending, None, ending);
            }
            Next::Idle => break,
        }
    }
    let ending = correlated.ending;
    stream_response(pending, Some(relay), ending)
}

/// After the answer: a request held for input keeps its session (and is released if the
/// client never comes back); one that is over ends a session of its own, or gives back one
/// lent to it.
fn settle(
    ending: Option<Box<dyn Ending>>,
    held: Option<HeldRequest>,
    translation: &Translation,
) -> Option<Box<dyn Ending>> {
    let Some(held) = held else {
        return ending;
    };
    if let Some(ending) = ending {
        ending.disarm();
    }
    translation.session.hold_for_input(held.stream);
    input::release_later(
        translation.registry.clone(),
        translation.session.clone(),
        held,
        translation.input_ttl,
        translation.held_calls.clone(),
    );
    None
}

/// An SSE response: what was already translated, then the rest of the request's stream.
fn stream_response(
    pending: Vec<Bytes>,
    relay: Option<Relay>,
    ending: Option<Box<dyn Ending>>,
) -> http::Response<Body> {
    let keep_alive = match &relay {
        Some(relay) => KeepAlive::AfterSilence(relay.keep_alive),
        None => KeepAlive::Off,
    };
    let source = CallStream {
        pending: pending.into(),
        relay,
        ending,
        held: None,
    };
    event_stream::open(source, Options::until_its_source_ends(keep_alive, CHUNKS))
}

/// A call's SSE stream: what was already translated, then the relay's frames until the answer.
struct CallStream {
    pending: VecDeque<Bytes>,
    relay: Option<Relay>,
    ending: Option<Box<dyn Ending>>,
    /// The request held for input, once the answer says so.
    held: Option<HeldRequest>,
}

impl Source for CallStream {
    async fn next(&mut self, until: Option<Instant>) -> event_stream::Next {
        if let Some(frame) = self.pending.pop_front() {
            return event_stream::Next::Frames(vec![sse::event(None, &frame)]);
        }
        let Some(relay) = &mut self.relay else {
            return event_stream::Next::End(None);
        };
        match relay.next(until).await {
            Next::Frame(frame) => event_stream::Next::Frames(vec![sse::event(None, &frame)]),
            Next::Done(answer, _, held) => {
                self.held = held;
                event_stream::Next::End(Some(sse::event(None, &answer)))
            }
            Next::Idle => event_stream::Next::Idle,
        }
    }

    /// A client that left cancels the request; one that got the answer settles it.
    async fn finish(self, ended: Ended) {
        let mut ending = self.ending;
        if let Some(relay) = self.relay {
            match ended {
                Ended::ClientLeft => relay.translation.cancel().await,
                _ => ending = settle(ending, self.held, &relay.translation),
            }
        }
        drop(ending);
    }
}

/// What the relay has next for the client.
pub(super) enum Next {
    Frame(Bytes),
    /// The answer, its status, and the request held for input if it is `input_required`.
    Done(Bytes, StatusCode, Option<HeldRequest>),
    /// Nothing before the deadline.
    Idle,
}

/// Reads the request's stream and translates it, gathering server requests into one
/// `input_required` answer.
pub(super) struct Relay {
    pub(super) translation: Translation,
    pub(super) reader: Reader,
    pub(super) buffered: VecDeque<LogEvent>,
    pub(super) inputs: BTreeMap<String, (Value, Value)>,
    pub(super) gather_until: Option<Instant>,
    /// The position of the last message translated (where a retry reads on).
    pub(super) read_through: u64,
    pub(super) spans: Spans,
    /// How often an idle response stream gets a comment, so proxies in between keep it open
    /// (`http.sse_keep_alive`).
    pub(super) keep_alive: Duration,
    /// The span of the `input_required` round being gathered (tracing on): from the server's
    /// first request to the answer that hands them to the client.
    pub(super) round: Option<Span>,
}

impl Relay {
    async fn next(&mut self, deadline: Option<Instant>) -> Next {
        loop {
            if let Some(event) = self.buffered.pop_front() {
                self.read_through = event.seq;
                match self.translation.translate(&event.payload).await {
                    Outcome::Send(frame) => return Next::Frame(frame),
                    Outcome::Final(answer, status) => return Next::Done(answer, status, None),
                    Outcome::Input(key, id, request) => self.gather(key, id, request).await,
                    Outcome::Skip => {}
                }
                continue;
            }
            let wait = match (deadline, self.gather_until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let delivery = match wait {
                Some(until) => match tokio::time::timeout_at(until, self.reader.next()).await {
                    Ok(delivery) => delivery,
                    Err(_) if self.gather_until.is_some_and(|g| g <= Instant::now()) => {
                        return self.hand_over().await;
                    }
                    Err(_) => return Next::Idle,
                },
                None => self.reader.next().await,
            };
            match delivery {
                Some(delivery) => self.buffered.extend(delivery.events),
                None => return Next::Done(self.translation.lost(), StatusCode::OK, None),
            }
        }
    }
}
