//! The internal hop between replicas, as both sides speak it: `POST
//! /internal/<server>/sessions/<id>` hands a client message to the replica owning the session
//! (answer: [`Taken`]); `PUT` (body: [`ReadingStreams`]) says clients read the session on
//! another replica (answer: [`Reading`]); `DELETE` ends it. Every hop names the replica it is
//! meant for and is signed with the hop key (derived from the cluster secret, which never goes
//! on the wire): an HMAC over the method, the path, a digest of the body, the time and that
//! replica, taken only within [`MAX_SKEW`] of the receiver's clock. Every answer names the
//! replica that gave it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::event::{EventId, Logged, StreamKey};
use crate::keys::Key;

/// The hop's signature: `t=<unix seconds>,v1=<HMAC-SHA256, URL-safe base64>`.
pub const SIGNATURE_HEADER: &str = "x-mcp-proxy-signature";
/// How far a hop's time may be from the receiver's clock: an older hop is refused, so a
/// captured one cannot be replayed past it.
pub const MAX_SKEW: Duration = Duration::from_secs(30);
/// The replica that answered a hop.
pub const NODE_HEADER: &str = "x-mcp-proxy-node";
/// The replica a hop is meant for: another one at its address refuses it before doing anything
/// (421), so a message never runs on a replica the asker did not mean.
pub const FOR_NODE_HEADER: &str = "x-mcp-proxy-for-node";

/// The principal the asking replica verified for the message (a client's token, or its
/// credential's digest), with a tag binding it to the hop's signature:
/// `<principal>;<tag>`. The owner serves the hop only for the session's own principal. A
/// replica that does not know the header ignores it (rolling upgrades keep working).
pub const PRINCIPAL_HEADER: &str = "x-mcp-proxy-principal";

/// The principal header's value for a hop signed with `signature`.
pub fn principal_header(key: &Key, signature: &str, principal: &str) -> String {
    format!(
        "{principal};{}",
        key.tag(&["hop principal", signature, principal])
    )
}

/// The principal a principal header names, if its tag binds it to `signature`.
pub fn checked_principal<'h>(key: &Key, signature: &str, header: &'h str) -> Option<&'h str> {
    let (principal, tag) = header.rsplit_once(';')?;
    (key.tag(&["hop principal", signature, principal]) == tag).then_some(principal)
}

/// Where a session's hops go on the replica at a base URL.
pub fn path(server: &str, session: &str) -> String {
    format!("/internal/{server}/sessions/{session}")
}

/// What a hop's signature covers.
pub struct Signed<'a> {
    pub method: &'a str,
    /// The hop's path ([`path`]), whatever base URL it was sent to.
    pub path: &'a str,
    pub body: &'a [u8],
    /// The replica the hop is meant for.
    pub node: &'a str,
}

/// Why a hop's signature is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the hop carries no signature")]
    Missing,
    #[error("the hop's signature is malformed")]
    Malformed,
    #[error("the hop was signed {0} s away from this replica's clock (at most {max} s)", max = MAX_SKEW.as_secs())]
    Skewed(u64),
    #[error("the hop's signature does not match (another cluster secret?)")]
    Mismatch,
}

impl Signed<'_> {
    /// The signature header's value, at `now`.
    pub fn sign(&self, key: &Key, now: SystemTime) -> String {
        let time = unix_seconds(now).to_string();
        let digest = Sha256::digest(self.body);
        let mac = key.mac(&self.parts(&time, &digest));
        format!("t={time},v1={}", URL_SAFE_NO_PAD.encode(mac))
    }

    /// Checks `header` at `now`: its time (which [`check_time`] can check before the body is
    /// read), then the MAC, compared in constant time.
    pub fn check(&self, key: &Key, header: &str, now: SystemTime) -> Result<(), SignatureError> {
        let (time, mac) = parse(header)?;
        check_time(time, now)?;
        let mac = URL_SAFE_NO_PAD
            .decode(mac)
            .map_err(|_| SignatureError::Malformed)?;
        let digest = Sha256::digest(self.body);
        match mac.len() == 32 && key.verify(&self.parts(&time.to_string(), &digest), &mac) {
            true => Ok(()),
            false => Err(SignatureError::Mismatch),
        }
    }

    fn parts<'a>(&'a self, time: &'a str, body_digest: &'a [u8]) -> [&'a [u8]; 6] {
        [
            b"mcp-session-proxy hop v1",
            self.method.as_bytes(),
            self.path.as_bytes(),
            body_digest,
            time.as_bytes(),
            self.node.as_bytes(),
        ]
    }
}

/// Whether a hop signed at `time` is recent enough to be taken.
pub fn check_time(time: u64, now: SystemTime) -> Result<(), SignatureError> {
    let skew = unix_seconds(now).abs_diff(time);
    match skew <= MAX_SKEW.as_secs() {
        true => Ok(()),
        false => Err(SignatureError::Skewed(skew)),
    }
}

/// `t=<seconds>,v1=<mac>`.
pub fn parse(header: &str) -> Result<(u64, &str), SignatureError> {
    let mut time = None;
    let mut mac = None;
    for field in header.split(',') {
        match field.trim().split_once('=') {
            Some(("t", value)) => time = value.parse::<u64>().ok(),
            Some(("v1", value)) => mac = Some(value),
            _ => return Err(SignatureError::Malformed),
        }
    }
    time.zip(mac).ok_or(SignatureError::Malformed)
}

fn unix_seconds(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(body: &[u8]) -> Signed<'_> {
        Signed {
            method: "POST",
            path: "/internal/default/sessions/s1",
            body,
            node: "a",
        }
    }

    #[test]
    fn a_signature_holds_for_its_hop_alone_and_only_while_recent() {
        let key = Key::minted();
        let now = SystemTime::now();
        let signature = hop(b"{}").sign(&key, now);
        assert_eq!(hop(b"{}").check(&key, &signature, now), Ok(()));
        let later = now + MAX_SKEW;
        assert_eq!(hop(b"{}").check(&key, &signature, later), Ok(()));
        let other = |signed: Signed<'_>| signed.check(&key, &signature, now);
        assert_eq!(other(hop(b"{ }")), Err(SignatureError::Mismatch));
        assert_eq!(
            other(Signed {
                method: "DELETE",
                ..hop(b"{}")
            }),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            other(Signed {
                node: "b",
                ..hop(b"{}")
            }),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            other(Signed {
                path: "/internal/default/sessions/s2",
                ..hop(b"{}")
            }),
            Err(SignatureError::Mismatch)
        );
        let replayed = now + MAX_SKEW + Duration::from_secs(2);
        assert!(matches!(
            hop(b"{}").check(&key, &signature, replayed),
            Err(SignatureError::Skewed(_))
        ));
        assert_eq!(
            hop(b"{}").check(&Key::minted(), &signature, now),
            Err(SignatureError::Mismatch)
        );
        for garbled in ["", "t=1", "v1=abc", "t=x,v1=abc", "t=1,v1=abc,z=2"] {
            assert!(hop(b"{}").check(&key, garbled, now).is_err(), "{garbled}");
        }
    }
}
