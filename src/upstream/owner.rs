//! The upstream of a session another replica owns: client messages go to the owner over the
//! internal hop (`POST <owner>/internal/<server>/sessions/<id>`, authenticated with the shared
//! secret); what the owner's server answers comes back through the shared log, not here.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde::Deserialize;

use super::http_client::HttpClient;
use crate::jsonrpc::Message;
use crate::session::log::{EventId, StreamKey};
use crate::session::log::Logged;

pub const SECRET_HEADER: &str = "x-mcp-proxy-secret";

/// How long the owner has to take a message in (it answers once the message is queued, not
/// when its server has answered).
const HOP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct OwnerLink {
    pub client: HttpClient,
    /// `<owner's base URL>/internal/<server>/sessions/<id>`.
    pub url: String,
    pub secret: String,
    /// Set when the owner could not be reached: it may be dead, and the next lookup checks.
    pub unreachable: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
pub enum HopError {
    /// The owner could not be reached: it may be dead.
    #[error("the replica owning this session is unreachable: {0}")]
    Unreachable(String),
    /// The owner no longer has the session.
    #[error("the replica owning this session no longer has it")]
    Gone,
    #[error("the replica owning this session refused the message: {0}")]
    Refused(String),
}

#[derive(Deserialize)]
struct Taken {
    stream: Option<String>,
    #[serde(default)]
    events: Vec<TakenEvent>,
}

/// A message the owner logged for the request, handed back with the hop.
#[derive(Deserialize)]
struct TakenEvent {
    seq: u64,
    terminal: bool,
    payload: Option<Box<serde_json::value::RawValue>>,
}

impl OwnerLink {
    /// Hands a client message to the owner; for a request, the stream its answer is logged on
    /// and what the owner logged there within its JSON wait (often the whole answer).
    pub async fn forward(
        &self,
        message: &Message,
    ) -> Result<(Option<StreamKey>, Vec<Logged>), HopError> {
        let body = self.hop(Method::POST, message.to_bytes()).await?;
        let taken: Taken = serde_json::from_slice(&body)
            .map_err(|e| HopError::Refused(format!("unreadable answer: {e}")))?;
        let stream = taken
            .stream
            .and_then(|key| format!("{key}.0").parse::<EventId>().ok())
            .map(|id| id.stream);
        let logged = match stream {
            Some(stream) => taken
                .events
                .into_iter()
                .map(|event| Logged {
                    seq: event.seq,
                    stream,
                    terminal: event.terminal,
                    coalesce: None, // the view files it by its payload
                    payload: event
                        .payload
                        .map(|p| Bytes::from(p.get().to_owned()))
                        .unwrap_or_default(),
                })
                .collect(),
            None => Vec::new(),
        };
        Ok((stream, logged))
    }

    /// Asks the owner to end the session.
    pub async fn end(&self) -> Result<(), HopError> {
        self.hop(Method::DELETE, Bytes::new()).await.map(|_| ())
    }

    /// Tells the owner a client is reading the session here, so it does not expire it.
    pub async fn touch(&self) -> Result<(), HopError> {
        self.hop(Method::PUT, Bytes::new()).await.map(|_| ())
    }

    async fn hop(&self, method: Method, body: Bytes) -> Result<Bytes, HopError> {
        let request = Request::builder()
            .method(method)
            .uri(&self.url)
            .header(SECRET_HEADER, &self.secret)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| HopError::Refused(e.to_string()))?;
        let unreachable = |cause: String| {
            self.unreachable
                .store(true, std::sync::atomic::Ordering::Release);
            HopError::Unreachable(cause)
        };
        let response = tokio::time::timeout(HOP_TIMEOUT, self.client.request(request))
            .await
            .map_err(|_| unreachable(format!("no answer within {HOP_TIMEOUT:?}")))?
            .map_err(|e| unreachable(e.to_string()))?;
        let status = response.status();
        let body = tokio::time::timeout(HOP_TIMEOUT, response.into_body().collect())
            .await
            .map_err(|_| HopError::Unreachable("the answer did not finish".into()))?
            .map_err(|e| HopError::Unreachable(e.to_string()))?
            .to_bytes();
        match status {
            StatusCode::OK => Ok(body),
            StatusCode::NOT_FOUND => Err(HopError::Gone),
            StatusCode::SERVICE_UNAVAILABLE => Err(unreachable("it is shutting down".into())),
            _ => Err(HopError::Refused(
                String::from_utf8_lossy(&body).into_owned(),
            )),
        }
    }
}
