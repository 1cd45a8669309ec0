//! The Streamable HTTP upstream's server-to-client streams: the held GET stream, reopened and
//! resumed after cuts until the session is released or re-initialized, and the reading of any
//! SSE stream (a GET's or a POST's) into `UpstreamEvent`s.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode};
use hyper::body::Incoming;
use tracing::debug;

use super::Inner;
use crate::upstream::http_client::{self, is_event_stream, EventStream};
use crate::upstream::UpstreamEvent;
use crate::wire::jsonrpc::Message;

/// Reconnection delay for the GET stream when the server names none.
pub(super) const DEFAULT_RETRY: Duration = Duration::from_secs(1);
pub(super) const MAX_RETRY: Duration = Duration::from_secs(5);

impl Inner {
    /// Reads SSE events from `body` until it ends, forwarding each message; why it stopped
    /// early when an event could not be decoded (one over the bound, say).
    pub(super) async fn read_stream(
        &self,
        body: impl http_body::Body<Data = Bytes> + Unpin,
        last_id: &mut Option<String>,
        retry: &mut Option<Duration>,
        mut seen: impl FnMut(&Message),
    ) -> Option<crate::wire::sse::DecodeError> {
        let mut events = EventStream::new(body, self.spec.max_event_bytes);
        while crate::upstream::room_to_read_unless(self.events.as_ref(), &self.released).await {
            let Some(event) = events.next(&self.released).await else {
                break;
            };
            if let Some(id) = event.id {
                *last_id = Some(id);
            }
            if let Some(ms) = event.retry {
                *retry = Some(Duration::from_millis(ms));
            }
            if event.data.is_empty() {
                continue;
            }
            if let Ok(message) = Message::parse_from_server(Bytes::from(event.data)) {
                seen(&message);
                self.events
                    .deliver(UpstreamEvent::Message(Box::new(message)));
            }
        }
        events.take_unreadable()
    }

    /// Holds the session's GET stream, resuming it after cuts, until released or superseded.
    /// While it is being (re)opened, requests wait (`stream_settles`); a stream that ended is
    /// reopened at once (or after the server's `retry:`), so little can be sent meanwhile.
    pub(super) async fn listen(self: Arc<Self>, generation: u64) {
        if std::mem::replace(&mut self.lock().listening, generation) == generation {
            self.stream_settled.send_replace(true); // held already
            return;
        }
        let mut last_id: Option<String> = None;
        let mut retry = None;
        let mut failures = 0u32;
        while !self.released.is_cancelled() && self.lock().generation == generation {
            self.stream_settled.send_replace(false);
            let session = self.lock().session.clone();
            let opened = self.get_stream(session.clone(), last_id.as_deref()).await;
            self.stream_settled.send_replace(true);
            match opened {
                Ok(Some(response)) => {
                    failures = 0;
                    // An unreadable event ends the stream: it is opened again.
                    self.read_stream(response.into_body(), &mut last_id, &mut retry, |_| {})
                        .await;
                }
                Ok(None) => return, // no GET stream offered (405)
                Err(StatusCode::NOT_FOUND) => {
                    self.lost(session.as_ref());
                    return; // the new generation listens
                }
                Err(status) => {
                    failures += 1;
                    debug!(%status, failures, "upstream GET stream refused");
                }
            }
            let pause = match (failures, retry) {
                (0, None) => Duration::ZERO,
                (0, Some(retry)) => retry.min(MAX_RETRY),
                (n, retry) => retry.unwrap_or(DEFAULT_RETRY).min(MAX_RETRY) * n.min(5),
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.released.cancelled() => return,
            }
        }
    }

    /// Opens (or resumes) the GET stream: `Ok(None)` when the server offers none.
    pub(super) async fn get_stream(
        &self,
        session: Option<HeaderValue>,
        last_event_id: Option<&str>,
    ) -> Result<Option<Response<Incoming>>, StatusCode> {
        let mut request = self.request(Method::GET, session, None, Bytes::new());
        if let Some(id) = last_event_id.and_then(|id| HeaderValue::from_str(id).ok()) {
            request.headers_mut().insert("last-event-id", id);
        }
        let response = http_client::send(&self.client, &self.spec, request)
            .await
            .map_err(|_| StatusCode::BAD_GATEWAY)?;
        match response.status() {
            StatusCode::METHOD_NOT_ALLOWED => Ok(None),
            status if status.is_success() && is_event_stream(&response) => Ok(Some(response)),
            status => Err(status),
        }
    }
}
