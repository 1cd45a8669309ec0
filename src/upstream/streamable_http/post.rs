//! Delivering one client message to the Streamable HTTP upstream: the POST, its answer (JSON,
//! or an SSE stream resumed with the upstream's own `Last-Event-ID` when it breaks), a second
//! try under a new upstream session after a 404, the hand-over to a 2026-07-28 successor, and
//! the failure its request is answered with when none of that works.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::BodyExt;
use tracing::{warn, Instrument};

use super::streams::{DEFAULT_RETRY, MAX_RETRY};
use super::Inner;
use crate::upstream::body::{self, BodyError};
use crate::upstream::driven::DrivenBody;
use crate::upstream::era_switch;
use crate::upstream::http_client::is_event_stream;
use crate::upstream::{UpstreamError, UpstreamEvent};
use crate::wire::era::Era;
use crate::wire::jsonrpc::{Kind, Message};
use crate::wire::methods;

/// Resumptions of one POST stream that broke before its response.
const POST_RESUMPTIONS: usize = 3;
/// Bytes of a refusal's body read for its text.
const ERROR_TEXT_BYTES: usize = 800;

/// A POST's outcome that needs more than forwarding.
enum Outcome {
    Done,
    SessionLost,
    /// The server refused `initialize` naming 2026-07-28: it speaks that now.
    SpeaksModern,
}

impl Inner {
    /// Sends one message under the current upstream session: again under a new one when the
    /// server forgot it, through the successor when the server speaks 2026-07-28 instead.
    pub(super) async fn deliver(self: Arc<Self>, message: Message, wire: Bytes) {
        let initializing = message.method() == Some(methods::INITIALIZE);
        let starting = initializing || message.method() == Some(methods::INITIALIZED);
        if !starting {
            self.stream_settles().await;
        }
        for attempt in 0..2 {
            let session = match initializing {
                true => None,
                false => match self.current_session().await {
                    Ok(session) => session,
                    Err(cause) => {
                        self.fail(&message, cause).await;
                        break;
                    }
                },
            };
            if attempt > 0 && !starting {
                // After notifications/initialized: the new session's GET stream is being opened.
                self.stream_settles().await;
            }
            match self.post(&message, wire.clone(), session.clone()).await {
                Ok(Outcome::Done) => break,
                Ok(Outcome::SessionLost) if attempt == 0 => self.lost(session.as_ref()),
                Ok(Outcome::SessionLost) => {
                    self.fail(&message, UpstreamError::LostAgain).await;
                    break;
                }
                Ok(Outcome::SpeaksModern) => {
                    self.hand_over(message.clone()).await;
                    break;
                }
                Err(cause) => {
                    self.fail(&message, cause).await;
                    break;
                }
            }
        }
        if message.method() == Some(methods::INITIALIZED) {
            let generation = self.lock().generation;
            tokio::spawn(self.clone().listen(generation).in_current_span());
        }
    }

    /// POSTs one message and forwards what comes back.
    async fn post(
        &self,
        message: &Message,
        wire: Bytes,
        session: Option<HeaderValue>,
    ) -> Result<Outcome, UpstreamError> {
        let had_session = session.is_some();
        let request = self.request(Method::POST, session, Some(message), wire);
        let response = self.connections.send(&self.spec, request).await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND && had_session {
            return Ok(Outcome::SessionLost);
        }
        if !status.is_success() {
            let head = body::head(
                response.into_body(),
                ERROR_TEXT_BYTES,
                self.spec.request_timeout,
            )
            .await;
            let refused_initialize = message.method() == Some(methods::INITIALIZE)
                && status == StatusCode::BAD_REQUEST
                && self.modern.is_some();
            if refused_initialize && era_switch::named_instead(&head) == Some(Era::Modern) {
                return Ok(Outcome::SpeaksModern);
            }
            let text: String = String::from_utf8_lossy(&head).chars().take(200).collect();
            return Err(UpstreamError::Refused { status, text });
        }
        if message.method() == Some(methods::INITIALIZE) {
            self.adopt_session(&response);
        }
        if is_event_stream(&response) {
            self.forward_post_stream(message, response).await;
        } else if status != StatusCode::ACCEPTED {
            let body = body::read(
                response.into_body(),
                self.spec.max_event_bytes,
                self.spec.request_timeout,
            )
            .await?;
            if !body.is_empty() {
                self.forward(body).await;
            }
        }
        Ok(Outcome::Done)
    }

    /// Forwards a POST's SSE stream; if it breaks before the response, resumes it with GET +
    /// Last-Event-ID (the upstream's own id, never the client's).
    async fn forward_post_stream(&self, message: &Message, response: Response<DrivenBody>) {
        let wanted = message.id().cloned();
        let mut answered = false;
        let mut last_id = None;
        let mut retry = None;
        let mut body = response.into_body().boxed_unsync();
        for resumption in 0..=POST_RESUMPTIONS {
            let unreadable = self
                .read_stream(body, &mut last_id, &mut retry, |m| {
                    if m.kind() == Kind::Response && m.id() == wanted.as_ref() {
                        answered = true;
                    }
                })
                .await;
            if let (Some(error), false) = (unreadable, answered) {
                // An event over the bound: resuming would meet it again.
                self.fail(message, BodyError::from(error).into()).await;
                return;
            }
            if answered || wanted.is_none() || resumption == POST_RESUMPTIONS {
                break;
            }
            let Some(from) = last_id.clone() else { break };
            tokio::time::sleep(retry.unwrap_or(DEFAULT_RETRY).min(MAX_RETRY)).await;
            let session = self.lock().session.clone();
            match self.get_stream(session, Some(&from)).await {
                Ok(Some(resumed)) => body = resumed.into_body().boxed_unsync(),
                _ => break,
            }
        }
        if !answered && wanted.is_some() && !self.released.is_cancelled() {
            self.fail(message, UpstreamError::StreamEnded).await;
        }
    }

    async fn forward(&self, body: Bytes) {
        match Message::parse_from_server(body) {
            Ok(message) => {
                self.events
                    .deliver(UpstreamEvent::Message(Box::new(message)));
            }
            Err(error) => {
                warn!(%error, "the upstream server answered with something that is not JSON-RPC")
            }
        }
    }

    /// The server refused `initialize` naming 2026-07-28: new sessions speak that, and this
    /// one goes on through a bridge to it, `initialize` first.
    async fn hand_over(&self, initialize: Message) {
        let Some(modern) = &self.modern else {
            return;
        };
        modern.era().switch_to(Era::Modern);
        let successor = self
            .successor
            .get_or_init(|| modern.build(self.events.clone()));
        if let Err(error) = successor.send_boxed(initialize.clone()).await {
            self.fail(&initialize, error).await;
        }
    }

    /// Reports a request that could not be delivered, with the cause, to its session.
    async fn fail(&self, message: &Message, cause: UpstreamError) {
        warn!(%cause, method = message.method().unwrap_or("response"), "upstream delivery failed");
        if let (Kind::Request, Some(id)) = (message.kind(), message.id()) {
            self.events.deliver(UpstreamEvent::Failed {
                id: Box::new(id.clone()),
                cause,
            });
        }
    }
}
