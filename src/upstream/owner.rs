//! The upstream of a session another replica owns: client messages go to the owner over the
//! internal hop (`<owner>/internal/<server>/sessions/<id>`, signed with the hop key, a nonce
//! each); what the owner's server answers comes back through the shared log (and, for a
//! request, with the hop). Every answer names the replica that gave it, so a link that reaches
//! another replica at the owner's old address (restarted, or replaced) knows it, and is taken
//! only within the answer bound and signed with the hop key for this very hop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use tracing::warn;

use super::body::{self, BodyError};
use super::http_client::{error_chain, HttpClient};
use crate::base::event::{Logged, StreamKey};
use crate::base::keys::Key;
use crate::hop::{
    self, Answer, AnswerRefused, Reading, ReadingStreams, Signed, Taken, ANSWER_SIGNATURE_HEADER,
    FOR_NODE_HEADER, NODE_HEADER, PRINCIPAL_HEADER, SIGNATURE_HEADER,
};
use crate::telemetry::metrics::ServerMetrics;
use crate::wire::jsonrpc::Message;

/// How long the owner has to take a message in (it answers once the message is queued, not
/// when its server has answered).
const HOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A view's way to the replica owning its session. Cloning shares it; `retarget` moves every
/// clone to a new owner (after a takeover by a third replica).
#[derive(Debug, Clone)]
pub struct OwnerLink {
    inner: Arc<Link>,
}

#[derive(Debug)]
struct Link {
    client: HttpClient,
    key: Key,
    /// The most bytes an answer may take.
    max_answer_bytes: usize,
    metrics: Arc<ServerMetrics>,
    /// `/internal/<server>/sessions/<id>`.
    path: String,
    /// The session's principal, which every hop names (signed).
    principal: String,
    owner: Mutex<Owner>,
    /// Set when a hop failed: the owner may be dead or gone, and the next lookup checks.
    suspect: AtomicBool,
    /// Set when the last hop could not connect to the owner at all.
    unreachable: AtomicBool,
}

/// Which replica owns the session, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub node: String,
    /// Its internal base URL.
    pub url: String,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum HopError {
    /// The owner could not be reached, or refused before taking the message: it may be dead,
    /// and the message was not carried out (it may be sent again).
    #[error("the replica owning this session is unreachable: {0}")]
    Unreachable(String),
    /// The owner went away after the message was sent: it may or may not have been carried
    /// out, so it must not be sent again blindly.
    #[error("the replica that owned this session went away while this request was in flight; it may or may not have been carried out ({0})")]
    Interrupted(String),
    /// The owner says it does not have the session (any more).
    #[error("the replica owning this session no longer has it")]
    Gone,
    /// Another replica answered at the owner's address, refusing the message (the owner was
    /// restarted or replaced): it was not carried out.
    #[error("replica {answered} answered at the address of {expected}, the session's owner")]
    Moved { expected: String, answered: String },
    #[error("the replica owning this session refused the message: {0}")]
    Refused(String),
    /// The owner took a request and opened no stream for its answer.
    #[error("the owner opened no stream")]
    NoStream,
    /// What came back is not the owner's answer to this hop (not signed with the hop key for
    /// it), or is over the answer bound: the message may or may not have been carried out.
    #[error("the answer of the replica owning this session was refused: {0}; the message may or may not have been carried out")]
    AnswerRefused(AnswerRefused),
}

/// Where a link is and what it may take.
#[derive(Debug, Clone)]
pub struct LinkSettings {
    pub key: Key,
    /// The most bytes an answer may take ([`hop::max_answer_bytes`]).
    pub max_answer_bytes: usize,
    pub metrics: Arc<ServerMetrics>,
}

impl OwnerLink {
    pub fn new(
        client: HttpClient,
        settings: LinkSettings,
        server: &str,
        session: &str,
        principal: &str,
        owner: Owner,
    ) -> OwnerLink {
        OwnerLink {
            inner: Arc::new(Link {
                client,
                key: settings.key,
                max_answer_bytes: settings.max_answer_bytes,
                metrics: settings.metrics,
                principal: principal.to_owned(),
                path: hop::path(server, session),
                owner: Mutex::new(owner),
                suspect: AtomicBool::new(false),
                unreachable: AtomicBool::new(false),
            }),
        }
    }

    pub fn owner(&self) -> Owner {
        self.inner
            .owner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Points the link at a new owner; it is trusted again.
    pub fn retarget(&self, owner: Owner) {
        *self.inner.owner.lock().unwrap_or_else(|e| e.into_inner()) = owner;
        self.inner.suspect.store(false, Ordering::Release);
        self.inner.unreachable.store(false, Ordering::Release);
    }

    /// Whether a hop failed since the link was last checked.
    pub fn suspect(&self) -> bool {
        self.inner.suspect.load(Ordering::Acquire)
    }

    /// Whether the last hop could not connect to the owner at all (refused, no route): with a
    /// missed heartbeat, the owner is dead.
    pub fn unreachable(&self) -> bool {
        self.inner.unreachable.load(Ordering::Acquire)
    }

    /// Hands a client message to the owner; for a request, the stream its answer is logged on
    /// and what the owner logged there within its JSON wait (often the whole answer).
    pub async fn forward(
        &self,
        message: &Message,
    ) -> Result<(Option<StreamKey>, Vec<Logged>), HopError> {
        let body = self.hop(Method::POST, message.to_bytes()).await?;
        let taken: Taken = serde_json::from_slice(&body)
            .map_err(|e| HopError::Refused(format!("unreadable answer: {e}")))?;
        Ok(taken.into_logged())
    }

    /// Asks the owner to end the session.
    pub async fn end(&self) -> Result<(), HopError> {
        self.hop(Method::DELETE, Bytes::new()).await.map(|_| ())
    }

    /// Tells the owner clients read `streams` here (so it neither expires the session nor
    /// coalesces away what they have not been sent); answers its newest position and record.
    pub async fn read(&self, streams: &[StreamKey]) -> Result<Reading, HopError> {
        let body = serde_json::to_vec(&ReadingStreams::new(streams))
            .map_err(|e| HopError::Refused(e.to_string()))?;
        let answer = self.hop(Method::PUT, body.into()).await?;
        serde_json::from_slice::<Reading>(&answer)
            .map_err(|e| HopError::Refused(format!("unreadable answer: {e}")))
    }

    async fn hop(&self, method: Method, body: Bytes) -> Result<Bytes, HopError> {
        let owner = self.owner();
        let (request, signature) = self.signed_request(&owner, method, body)?;
        // Only a connection never made proves the owner did not get the message.
        let response = tokio::time::timeout(HOP_TIMEOUT, self.inner.client.request(request))
            .await
            .map_err(|_| {
                self.failed(HopError::Interrupted(format!(
                    "no answer within {HOP_TIMEOUT:?}"
                )))
            })?
            .map_err(|e| match e.is_connect() {
                true => self.failed(HopError::Unreachable(error_chain(&e))),
                false => self.failed(HopError::Interrupted(error_chain(&e))),
            })?;
        let status = response.status();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let answered = header(NODE_HEADER).unwrap_or_default();
        let answer_signature = header(ANSWER_SIGNATURE_HEADER);
        let max = self.inner.max_answer_bytes;
        let refuse = |refused: AnswerRefused| {
            self.inner.metrics.hop_answers_refused_total.inc();
            warn!(%refused, owner = %owner.node, "an answer to a hop was refused");
            self.failed(HopError::AnswerRefused(refused))
        };
        let body = body::read(response.into_body(), max, HOP_TIMEOUT)
            .await
            .map_err(|error| match error {
                BodyError::TooLarge(_) => refuse(AnswerRefused::TooLarge(max)),
                BodyError::TooSlow(_) => {
                    self.failed(HopError::Interrupted("the answer did not finish".into()))
                }
                BodyError::Broken(cause) => self.failed(HopError::Interrupted(cause)),
            })?;
        Answer {
            request_signature: &signature,
            status: status.as_u16(),
            node: &answered,
            body: &body,
        }
        .check(&self.inner.key, answer_signature.as_deref())
        .map_err(refuse)?;
        self.outcome(status, body, owner.node, answered)
    }

    /// The hop to `owner`, signed for it, and its signature (its answer is signed over it).
    fn signed_request(
        &self,
        owner: &Owner,
        method: Method,
        body: Bytes,
    ) -> Result<(Request<Full<Bytes>>, String), HopError> {
        let signature = Signed {
            method: method.as_str(),
            path: &self.inner.path,
            body: &body,
            node: &owner.node,
        }
        .sign(&self.inner.key, SystemTime::now());
        let principal = hop::principal_header(&self.inner.key, &signature, &self.inner.principal);
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{}", owner.url, self.inner.path))
            .header(PRINCIPAL_HEADER, principal)
            .header(SIGNATURE_HEADER, &signature)
            .header(FOR_NODE_HEADER, &owner.node)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| HopError::Refused(e.to_string()))?;
        Ok((request, signature))
    }

    /// What a hop that failed says of the owner: anything but a refusal makes it suspect, and
    /// only an owner that could not be reached is taken as unreachable.
    fn failed(&self, error: HopError) -> HopError {
        if !matches!(error, HopError::Refused(_)) {
            self.inner.suspect.store(true, Ordering::Release);
        }
        let unreachable = matches!(error, HopError::Unreachable(_));
        self.inner.unreachable.store(unreachable, Ordering::Release);
        error
    }

    /// What an authentic answer's status means.
    fn outcome(
        &self,
        status: StatusCode,
        body: Bytes,
        expected: String,
        answered: String,
    ) -> Result<Bytes, HopError> {
        match status {
            StatusCode::MISDIRECTED_REQUEST => {
                Err(self.failed(HopError::Moved { expected, answered }))
            }
            StatusCode::OK => Ok(body),
            StatusCode::NOT_FOUND => Err(self.failed(HopError::Gone)),
            StatusCode::SERVICE_UNAVAILABLE => Err(self.failed(HopError::Unreachable(
                String::from_utf8_lossy(&body).trim().to_owned(),
            ))),
            _ => Err(HopError::Refused(
                String::from_utf8_lossy(&body).into_owned(),
            )),
        }
    }
}
