//! What a GET does: attaches the session's stream, or, with `Last-Event-ID`, resumes the
//! stream that id belongs to from the position after it (a replay, then live).

use http::{HeaderMap, Response};

use super::{
    check_protocol_version, find_session, open_stream, refuse_protocol_header, LAST_EVENT_ID,
};
use crate::base::caller::Caller;
use crate::front::rejection::Rejection;
use crate::front::request::{header_str, require_accept};
use crate::front::traced;
use crate::front::App;
use crate::session::log::{EventId, StreamKey};
use crate::session::ReadError;
use crate::wire::http_body::Body;

pub(super) async fn get(
    app: &App,
    headers: &HeaderMap,
    caller: &Caller,
) -> Result<Response<Body>, Rejection> {
    refuse_protocol_header(headers)?;
    require_accept(headers, &["text/event-stream"])?;
    let session = find_session(app, headers, caller).await?;
    check_protocol_version(headers)?;
    let (stream, after) = match header_str(headers, LAST_EVENT_ID) {
        None => (StreamKey::Standalone, None),
        Some(text) => {
            let id: EventId = text.parse().map_err(|()| {
                Rejection::bad_request(format!(
                    "Bad Request: Last-Event-ID {text:?} is not an event id of this proxy"
                ))
            })?;
            (id.stream, Some(id.seq))
        }
    };
    if !session.has_stream(stream) {
        return Err(Rejection::bad_request(
            "Bad Request: Last-Event-ID names no stream of this session",
        ));
    }
    session
        .ready_reader(stream, after)
        .await
        .map_err(|ReadError::Ahead { after, head }| {
            Rejection::bad_request(format!(
                "Bad Request: Last-Event-ID {} is ahead of this session's newest event ({}); \
                 resume from an id this proxy sent",
                EventId { stream, seq: after },
                EventId { stream, seq: head },
            ))
        })?;
    let mut reader = session.attach(stream, after);
    if after.is_some() {
        let parent = traced::context_from_headers(headers);
        reader.trace_replay(
            traced::replay_span(app, parent.as_ref(), session.id()),
            false,
        );
    }
    let start = reader.position();
    Ok(open_stream(app, &session, reader, start, None))
}
