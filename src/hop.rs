//! The internal hop between replicas, as both sides speak it: `POST
//! /internal/<server>/sessions/<id>` hands a client message to the replica owning the session
//! (answer: [`Taken`]); `PUT` (body: [`ReadingStreams`]) says clients read the session on
//! another replica (answer: [`Reading`]); `DELETE` ends it. Every hop carries the shared secret
//! and names the replica it is meant for; every answer names the replica that gave it.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::event::{EventId, Logged, StreamKey};

/// The replicas' shared secret.
pub const SECRET_HEADER: &str = "x-mcp-proxy-secret";
/// The replica that answered a hop.
pub const NODE_HEADER: &str = "x-mcp-proxy-node";
/// The replica a hop is meant for: another one at its address refuses it before doing anything
/// (421), so a message never runs on a replica the asker did not mean.
pub const FOR_NODE_HEADER: &str = "x-mcp-proxy-for-node";

/// Where a session's hops go on the replica at a base URL.
pub fn path(server: &str, session: &str) -> String {
    format!("/internal/{server}/sessions/{session}")
}

/// The answer to a `POST`: the stream the request's answer is logged on (none for a
/// notification or a response) and what the owner logged there within its JSON wait.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Taken {
    pub stream: Option<String>,
    #[serde(default)]
    pub events: Vec<TakenEvent>,
}

/// A message the owner logged for the request, byte for byte (an empty payload, the end
/// marker of a cancelled request: null).
#[derive(Debug, Serialize, Deserialize)]
pub struct TakenEvent {
    pub seq: u64,
    pub terminal: bool,
    pub payload: Option<Box<RawValue>>,
}

impl TakenEvent {
    pub fn new(seq: u64, terminal: bool, payload: &[u8]) -> TakenEvent {
        let payload = String::from_utf8(payload.to_vec())
            .ok()
            .and_then(|text| RawValue::from_string(text).ok());
        TakenEvent {
            seq,
            terminal,
            payload,
        }
    }
}

impl Taken {
    pub fn new(stream: Option<StreamKey>, events: Vec<TakenEvent>) -> Taken {
        Taken {
            stream: stream.map(|stream| stream.to_string()),
            events,
        }
    }

    /// The stream, and its events as the asker's log files them.
    pub fn into_logged(self) -> (Option<StreamKey>, Vec<Logged>) {
        let Some(stream) = self.stream.as_deref().and_then(stream_key) else {
            return (None, Vec::new());
        };
        let logged = self
            .events
            .into_iter()
            .map(|event| Logged {
                seq: event.seq,
                stream,
                terminal: event.terminal,
                coalesce: None, // the asker files it by its payload
                payload: event
                    .payload
                    .map(|p| Bytes::from(p.get().to_owned()))
                    .unwrap_or_default(),
            })
            .collect();
        (Some(stream), logged)
    }
}

/// The body of a `PUT`: the streams clients read on the asking replica.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ReadingStreams {
    #[serde(default)]
    pub reading: Vec<String>,
}

impl ReadingStreams {
    pub fn new(streams: &[StreamKey]) -> ReadingStreams {
        ReadingStreams {
            reading: streams.iter().map(ToString::to_string).collect(),
        }
    }

    /// The streams named (unreadable names are left out).
    pub fn streams(&self) -> Vec<StreamKey> {
        self.reading
            .iter()
            .filter_map(|key| stream_key(key))
            .collect()
    }
}

/// The answer to a `PUT`: the owner's newest position, and the session as its record
/// describes it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reading {
    pub head: u64,
    #[serde(default)]
    pub record: serde_json::Value,
}

/// A stream key as the hop writes it (`g`, or a request stream's number).
fn stream_key(key: &str) -> Option<StreamKey> {
    format!("{key}.0")
        .parse::<EventId>()
        .ok()
        .map(|id| id.stream)
}
