//! The internal hop between replicas, as both sides speak it: `POST
//! /internal/<server>/sessions/<id>` hands a client message to the replica owning the session
//! (answer: [`Taken`]); `PUT` (body: [`ReadingStreams`]) says clients read the session on
//! another replica (answer: [`Reading`]); `DELETE` ends it. Every hop names the replica it is
//! meant for and is signed with the hop key (derived from the cluster secret, which never goes
//! on the wire): an HMAC over the method, the path, a digest of the body, the time, that
//! replica and a random nonce, taken only within [`MAX_SKEW`] of the receiver's clock and only
//! once (the receiver remembers the nonces it took for as long, [`nonces`]). Every answer names
//! the replica that gave it and is signed with the same key over its status, that replica, a
//! digest of its body and the request's signature ([`Answer`]): the asker takes no answer that
//! was not given to its own request, nor one over [`max_answer_bytes`].

mod nonces;

pub use nonces::{NonceRefused, Nonces, DEFAULT_MAX_NONCES};

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::base::event::{EventId, Logged, StreamKey};
use crate::base::keys::Key;

/// The hop's signature: `t=<unix seconds>,n=<nonce>,v2=<HMAC-SHA256>` (nonce and HMAC in
/// URL-safe base64).
pub const SIGNATURE_HEADER: &str = "x-mcp-proxy-signature";
/// How far a hop's time may be from the receiver's clock: an older hop is refused, and a
/// younger one is refused when its nonce was seen, so a captured hop cannot be replayed.
pub const MAX_SKEW: Duration = Duration::from_secs(30);
/// The replica that answered a hop.
pub const NODE_HEADER: &str = "x-mcp-proxy-node";
/// The answer's signature: `v2=<HMAC-SHA256, URL-safe base64>` ([`Answer`]).
pub const ANSWER_SIGNATURE_HEADER: &str = "x-mcp-proxy-answer-signature";
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

/// The most bytes a hop answer may take, on both sides: a [`Taken`] holds what the owner
/// logged for one request within its JSON wait, which the owner keeps under this bound (it
/// always fits one server message, `upstream.max_line_bytes`; what does not fit reaches the
/// asker through the shared log); a [`Reading`] holds a session's record, whose large parts are
/// the client's `initialize` params (a request body, at most `http.max_body_bytes`) and its
/// subscribed URIs (at most 1 MiB), each JSON-escaped in the record (at most twice as long).
pub fn max_answer_bytes(max_message_bytes: usize, max_body_bytes: usize) -> usize {
    let record = 2usize
        .saturating_mul(max_body_bytes.saturating_add(1 << 20))
        .saturating_add(64 << 10);
    max_message_bytes.max(record).saturating_add(64 << 10)
}

/// A hop's nonce: 128 random bits, never used twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nonce([u8; 16]);

impl Nonce {
    /// A fresh one, from the operating system's CSPRNG.
    pub fn minted() -> Nonce {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).expect("the operating system's random source failed");
        Nonce(nonce)
    }

    fn parse(text: &str) -> Option<Nonce> {
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        bytes.try_into().ok().map(Nonce)
    }
}

impl std::fmt::Display for Nonce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&URL_SAFE_NO_PAD.encode(self.0))
    }
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
    /// A `v1` signature, which has no nonce: a replay of it could not be told.
    #[error("the hop's signature has no nonce (a replica of an older version signed it): refused, as a replay of it could not be told")]
    NoNonce,
    #[error("the hop was signed {0} s away from this replica's clock (at most {max} s)", max = MAX_SKEW.as_secs())]
    Skewed(u64),
    #[error("the hop's signature does not match (another cluster secret?)")]
    Mismatch,
}

/// A signature header's fields: when it was made, its nonce, its MAC (still encoded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp<'h> {
    pub time: u64,
    pub nonce: Nonce,
    pub mac: &'h str,
}

impl Signed<'_> {
    /// The signature header's value, at `now`, with a fresh nonce.
    pub fn sign(&self, key: &Key, now: SystemTime) -> String {
        self.sign_with(key, now, Nonce::minted())
    }

    /// The signature header's value, at `now`, with `nonce`.
    pub fn sign_with(&self, key: &Key, now: SystemTime, nonce: Nonce) -> String {
        let time = unix_seconds(now).to_string();
        let digest = Sha256::digest(self.body);
        let mac = key.mac(&self.parts(&time, &nonce, &digest));
        format!("t={time},n={nonce},v2={}", URL_SAFE_NO_PAD.encode(mac))
    }

    /// Checks `header` at `now`: its time (which [`check_time`] can check before the body is
    /// read), then the MAC, compared in constant time. The stamp is what the receiver
    /// remembers, so that the hop is taken once.
    pub fn check<'h>(
        &self,
        key: &Key,
        header: &'h str,
        now: SystemTime,
    ) -> Result<Stamp<'h>, SignatureError> {
        let stamp = parse(header)?;
        check_time(stamp.time, now)?;
        let mac = URL_SAFE_NO_PAD
            .decode(stamp.mac)
            .map_err(|_| SignatureError::Malformed)?;
        let digest = Sha256::digest(self.body);
        let time = stamp.time.to_string();
        let parts = self.parts(&time, &stamp.nonce, &digest);
        match mac.len() == 32 && key.verify(&parts, &mac) {
            true => Ok(stamp),
            false => Err(SignatureError::Mismatch),
        }
    }

    fn parts<'a>(
        &'a self,
        time: &'a str,
        nonce: &'a Nonce,
        body_digest: &'a [u8],
    ) -> [&'a [u8]; 7] {
        [
            b"mcp-session-proxy hop v2",
            self.method.as_bytes(),
            self.path.as_bytes(),
            body_digest,
            time.as_bytes(),
            self.node.as_bytes(),
            &nonce.0,
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

/// `t=<seconds>,n=<nonce>,v2=<mac>`, each field once, in any order; nothing else. Pure and
/// bounded by its input: what a fuzzer may feed.
pub fn parse(header: &str) -> Result<Stamp<'_>, SignatureError> {
    let (mut time, mut nonce, mut mac, mut v1) = (None, None, None, false);
    for field in header.split(',') {
        match field.trim().split_once('=') {
            Some(("t", value)) => {
                vacant(&time)?;
                time = Some(
                    value
                        .parse::<u64>()
                        .map_err(|_| SignatureError::Malformed)?,
                );
            }
            Some(("n", value)) => {
                vacant(&nonce)?;
                nonce = Some(Nonce::parse(value).ok_or(SignatureError::Malformed)?);
            }
            Some(("v2", value)) => {
                vacant(&mac)?;
                mac = Some(value);
            }
            Some(("v1", _)) => v1 = true,
            _ => return Err(SignatureError::Malformed),
        }
    }
    match (time, nonce, mac) {
        (Some(time), Some(nonce), Some(mac)) if !v1 => Ok(Stamp { time, nonce, mac }),
        (Some(_), None, None) if v1 => Err(SignatureError::NoNonce),
        _ => Err(SignatureError::Malformed),
    }
}

/// A field given twice is ambiguous: refused.
fn vacant<T>(slot: &Option<T>) -> Result<(), SignatureError> {
    match slot.is_some() {
        true => Err(SignatureError::Malformed),
        false => Ok(()),
    }
}

/// The Unix time of `now`, in seconds (what a signature's `t` is).
pub fn unix_seconds(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// What an answer's signature covers: the request it answers (its signature header as sent,
/// which holds that request's nonce and MAC), its status, the replica that gave it and its body.
pub struct Answer<'a> {
    pub request_signature: &'a str,
    pub status: u16,
    pub node: &'a str,
    pub body: &'a [u8],
}

/// Why an answer to a hop is refused by the asker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerRefused {
    #[error("it carries no answer signature")]
    Unsigned,
    #[error("its signature is malformed")]
    Malformed,
    #[error("its signature does not match this request (altered, or another request's answer)")]
    Mismatch,
    #[error("it exceeded {0} bytes")]
    TooLarge(usize),
}

impl Answer<'_> {
    /// The answer signature header's value.
    pub fn sign(&self, key: &Key) -> String {
        let digest = Sha256::digest(self.body);
        let status = self.status.to_string();
        format!(
            "v2={}",
            URL_SAFE_NO_PAD.encode(key.mac(&self.parts(&status, &digest)))
        )
    }

    /// Checks an answer signature header (absent: `None`), in constant time.
    pub fn check(&self, key: &Key, header: Option<&str>) -> Result<(), AnswerRefused> {
        let header = header.ok_or(AnswerRefused::Unsigned)?;
        let mac = header
            .trim()
            .strip_prefix("v2=")
            .and_then(|mac| URL_SAFE_NO_PAD.decode(mac).ok())
            .filter(|mac| mac.len() == 32)
            .ok_or(AnswerRefused::Malformed)?;
        let digest = Sha256::digest(self.body);
        let status = self.status.to_string();
        match key.verify(&self.parts(&status, &digest), &mac) {
            true => Ok(()),
            false => Err(AnswerRefused::Mismatch),
        }
    }

    fn parts<'a>(&'a self, status: &'a str, body_digest: &'a [u8]) -> [&'a [u8]; 5] {
        [
            b"mcp-session-proxy hop answer v2",
            self.request_signature.as_bytes(),
            status.as_bytes(),
            self.node.as_bytes(),
            body_digest,
        ]
    }
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
/// marker of a cancelled request: null). In a [`Taken`] it takes its payload's bytes and at most
/// [`TakenEvent::FRAMING`] more.
#[derive(Debug, Serialize, Deserialize)]
pub struct TakenEvent {
    pub seq: u64,
    pub terminal: bool,
    pub payload: Option<Box<RawValue>>,
}

impl TakenEvent {
    /// The most bytes an event takes in a [`Taken`] besides its payload
    /// (`{"seq":…,"terminal":false,"payload":…},`, with a sequence number of 20 digits).
    pub const FRAMING: usize = 64;

    /// The bytes an event of `payload` takes in a [`Taken`], at most.
    pub fn cost(payload: &[u8]) -> usize {
        payload.len() + TakenEvent::FRAMING
    }

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
mod tests;
