//! What a session's log holds, named the same way on the wire (SSE event ids), in the store and
//! on the hop between replicas: stream keys, event ids and logged messages.

use std::fmt;

use bytes::Bytes;

/// Which stream of a session a message belongs to (Streamable HTTP: the GET stream, or the
/// POST stream that answers one request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StreamKey {
    /// The standalone GET stream: session-wide messages.
    Standalone,
    /// The stream of the n-th request of the session.
    Request(u64),
}

impl fmt::Display for StreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamKey::Standalone => f.write_str("g"),
            StreamKey::Request(n) => write!(f, "{n}"),
        }
    }
}

/// A position in a session's log: the SSE event id is `"<stream>.<seq>"`, so a `Last-Event-ID`
/// names both the stream to resume and where in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventId {
    pub stream: StreamKey,
    pub seq: u64,
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.stream, self.seq)
    }
}

impl std::str::FromStr for EventId {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        let (stream, seq) = s.split_once('.').ok_or(())?;
        let stream = match stream {
            "g" => StreamKey::Standalone,
            n => StreamKey::Request(n.parse().map_err(|_| ())?),
        };
        Ok(EventId {
            stream,
            seq: seq.parse().map_err(|_| ())?,
        })
    }
}

/// A logged message with everything another log needs to file it at the same position (a
/// view's copy of its owner's log, a log rebuilt by a replica taking a session over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub seq: u64,
    pub stream: StreamKey,
    pub terminal: bool,
    pub coalesce: Option<String>,
    pub payload: Bytes,
}
