//! A response as the client reads it: whole, or as an SSE stream of messages; and the
//! refusals several tests check alike.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use mcp_session_proxy::wire::sse::{self, Decoder};
use serde_json::Value;

use super::within;

/// A response, read as a whole or as an SSE stream.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub(super) body: Incoming,
    pub(super) decoder: Decoder,
    pub(super) ended: bool,
}

/// One SSE message: its event id and its JSON-RPC payload.
#[derive(Debug, Clone)]
pub struct Received {
    pub id: Option<String>,
    pub message: Value,
}

impl Reply {
    pub fn is_sse(&self) -> bool {
        self.headers
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"))
    }

    /// The whole body (bounded).
    pub async fn bytes(self) -> Bytes {
        within("the whole body", self.body.collect())
            .await
            .expect("body")
            .to_bytes()
    }

    pub async fn json(self) -> Value {
        let bytes = self.bytes().await;
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))
    }

    /// The raw next chunk of the body (`None` at its end); fails the test if none comes within
    /// the usual bound. To see a stream stay silent for a while, bound it more tightly outside
    /// (`tokio::time::timeout(short, reply.next_chunk())`): the tighter bound ends first.
    pub async fn next_chunk(&mut self) -> Option<Bytes> {
        within("the next chunk of the body", async {
            loop {
                let frame = self.body.frame().await?.ok()?;
                if let Ok(data) = frame.into_data() {
                    return Some(data);
                }
            }
        })
        .await
    }

    /// The next SSE event, priming events included; `None` when the stream ends. Each read is
    /// bounded ([`Reply::next_chunk`]).
    pub async fn next_event(&mut self) -> Option<sse::Event> {
        loop {
            if let Some(event) = self.decoder.next_event().expect("valid SSE") {
                return Some(event);
            }
            if self.ended {
                return None;
            }
            match self.next_chunk().await {
                Some(chunk) => self.decoder.feed(&chunk),
                None => self.ended = true,
            }
        }
    }

    /// The next SSE event that carries a message (priming events skipped); each read is bounded
    /// ([`Reply::next_chunk`]).
    pub async fn next_message(&mut self) -> Option<Received> {
        loop {
            let event = self.next_event().await?;
            if event.data.is_empty() {
                continue;
            }
            let message = serde_json::from_str(&event.data).expect("SSE data is JSON");
            return Some(Received {
                id: event.id,
                message,
            });
        }
    }

    /// The next message with `method`, skipping others; fails the test if the stream ends first
    /// or none comes within the usual bound.
    pub async fn next_with_method(&mut self, method: &str) -> Value {
        within(method, async {
            loop {
                let received = self.next_message().await.expect("the stream stays open");
                if received.message["method"] == method {
                    return received.message;
                }
            }
        })
        .await
    }

    /// Every remaining message until the stream ends (within the usual bound).
    pub async fn remaining_messages(&mut self) -> Vec<Received> {
        within("the stream to end", async {
            let mut all = Vec::new();
            while let Some(received) = self.next_message().await {
                all.push(received);
            }
            all
        })
        .await
    }

    /// The response message: the JSON body, or the response on the SSE stream (within the usual
    /// bound, however many other messages come first).
    pub async fn response(mut self) -> Value {
        if !self.is_sse() {
            return self.json().await;
        }
        within("the response on the SSE stream", async {
            while let Some(received) = self.next_message().await {
                if received.message.get("method").is_none() {
                    return received.message;
                }
            }
            panic!("the SSE stream ended without a response");
        })
        .await
    }
}

/// A new session refused over a limit: 503 with `Retry-After`, no session id, and a JSON-RPC
/// error that names the limit.
pub async fn assert_refused_for(reply: Reply, limit: &str) {
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reply.headers.contains_key("retry-after"));
    assert!(reply.headers.get("mcp-session-id").is_none());
    let answer = reply.json().await;
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(limit), "{answer}");
}

/// A message with a duplicated member name refused whole: 400, -32600 naming the member, the
/// request's id, and nothing of what its server would have answered.
pub async fn assert_duplicate_refused(reply: Reply, id: u64, member: &str) {
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let answer = reply.json().await;
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(answer["id"], id, "{answer}");
    assert_eq!(
        answer["error"]["data"]["duplicateMember"], member,
        "{answer}"
    );
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(member), "{answer}");
    assert!(answer.get("result").is_none(), "{answer}");
}

/// Reads `reply`'s raw chunks until `count` SSE keep-alive comments came (bounded).
pub async fn keep_alives(reply: &mut Reply, count: usize) {
    let mut seen = 0;
    within("the keep-alive comments", async {
        while seen < count {
            let chunk = reply.next_chunk().await.expect("the stream stays open");
            seen += chunk
                .windows(b": keep-alive".len())
                .filter(|w| w == b": keep-alive")
                .count();
        }
    })
    .await;
}
