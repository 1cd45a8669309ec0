//! Server-Sent Events framing (WHATWG HTML §9.2): an encoder for the streams the proxy serves and
//! an incremental, bounded decoder for the streams it reads.

use bytes::{BufMut, Bytes, BytesMut};

/// Encodes one event. Multi-line data is split into several `data:` lines, as SSE requires.
pub fn event(id: Option<&str>, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 48);
    if let Some(id) = id {
        out.put_slice(b"id: ");
        out.put_slice(id.as_bytes());
        out.put_u8(b'\n');
    }
    out.put_slice(b"event: message\n");
    for line in data.split(|b| *b == b'\n') {
        out.put_slice(b"data: ");
        out.put_slice(line.strip_suffix(b"\r").unwrap_or(line));
        out.put_u8(b'\n');
    }
    out.put_u8(b'\n');
    out.freeze()
}

/// The legacy transport's (2024-11-05) first event: where to POST messages.
pub fn endpoint(url: &str) -> Bytes {
    Bytes::from(format!("event: endpoint\ndata: {url}\n\n"))
}

/// The priming event of 2025-11-25: an id to resume from and empty data, optionally with the
/// reconnection delay the client should use.
pub fn priming(id: &str, retry_ms: Option<u64>) -> Bytes {
    let mut out = format!("id: {id}\n");
    if let Some(ms) = retry_ms {
        out.push_str(&format!("retry: {ms}\n"));
    }
    out.push_str("data: \n\n");
    Bytes::from(out)
}

/// A field-only block that sets the client's reconnection delay (sent before the proxy closes
/// streams at shutdown; dispatches no event, so any client can take it).
pub fn retry(retry_ms: u64) -> Bytes {
    Bytes::from(format!("retry: {retry_ms}\n\n"))
}

/// A comment line: keeps idle connections (and the load balancers in front of them) alive.
pub fn keep_alive() -> Bytes {
    Bytes::from_static(b": keep-alive\n\n")
}

/// A decoded event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
    pub retry: Option<u64>,
}

/// Why a stream could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("an SSE event is larger than {0} bytes")]
    TooLarge(usize),
    #[error("an SSE line is not UTF-8")]
    NotUtf8,
}

/// Incremental decoder: feed bytes as they arrive, take complete events out.
#[derive(Debug)]
pub struct Decoder {
    buffer: BytesMut,
    pending: Event,
    has_data: bool,
    max_event: usize,
    pending_len: usize,
}

impl Decoder {
    pub fn new(max_event: usize) -> Decoder {
        Decoder {
            buffer: BytesMut::new(),
            pending: Event::default(),
            has_data: false,
            max_event,
            pending_len: 0,
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next complete event, `Ok(None)` when more bytes are needed. Events with neither data
    /// nor id (comments, lone `retry:`) are consumed silently; a priming event (id, empty data)
    /// is returned.
    pub fn next_event(&mut self) -> Result<Option<Event>, DecodeError> {
        loop {
            let Some(end) = self.buffer.iter().position(|b| *b == b'\n') else {
                // A final `\r` may be the first half of a CRLF: it is not part of the line.
                let partial = self.buffer.len() - usize::from(self.buffer.last() == Some(&b'\r'));
                if partial + self.pending_len > self.max_event {
                    return Err(DecodeError::TooLarge(self.max_event));
                }
                return Ok(None);
            };
            let line = self.buffer.split_to(end + 1);
            let line = &line[..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let line = std::str::from_utf8(line).map_err(|_| DecodeError::NotUtf8)?;
            if line.is_empty() {
                let event = std::mem::take(&mut self.pending);
                let complete = self.has_data || event.id.is_some();
                self.has_data = false;
                self.pending_len = 0;
                if complete {
                    return Ok(Some(event));
                }
                continue;
            }
            self.pending_len += line.len();
            if self.pending_len > self.max_event {
                return Err(DecodeError::TooLarge(self.max_event));
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line, ""),
            };
            match field {
                "" => {}
                "data" => {
                    if self.has_data {
                        self.pending.data.push('\n');
                    }
                    self.pending.data.push_str(value);
                    self.has_data = true;
                }
                "id" if !value.contains('\0') => self.pending.id = Some(value.to_owned()),
                "event" => self.pending.event = Some(value.to_owned()),
                "retry" => self.pending.retry = value.parse().ok(),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(chunks: &[&[u8]]) -> Vec<Event> {
        let mut decoder = Decoder::new(1 << 16);
        let mut events = Vec::new();
        for chunk in chunks {
            decoder.feed(chunk);
            while let Some(event) = decoder.next_event().unwrap() {
                events.push(event);
            }
        }
        events
    }

    #[test]
    fn encoded_events_decode_back_even_when_fragmented() {
        let mut wire = Vec::new();
        wire.extend_from_slice(&priming("g.0", Some(1000)));
        wire.extend_from_slice(&keep_alive());
        wire.extend_from_slice(&event(Some("g.1"), b"{\"a\":1}\n{\"b\":2}"));
        wire.extend_from_slice(&event(None, b"x"));
        for split in 0..wire.len() {
            let events = decode_all(&[&wire[..split], &wire[split..]]);
            assert_eq!(events.len(), 3, "split at {split}");
            assert_eq!(events[0].id.as_deref(), Some("g.0"));
            assert_eq!(events[0].retry, Some(1000));
            assert_eq!(events[0].data, "");
            assert_eq!(events[1].data, "{\"a\":1}\n{\"b\":2}");
            assert_eq!(events[1].event.as_deref(), Some("message"));
            assert_eq!(events[2].id, None);
        }
    }

    #[test]
    fn handles_crlf_and_fields_without_space() {
        let events = decode_all(&[b"id:7\r\ndata:hi\r\n\r\n"]);
        assert_eq!(events[0].id.as_deref(), Some("7"));
        assert_eq!(events[0].data, "hi");
    }

    #[test]
    fn the_bound_is_the_same_however_a_crlf_line_arrives() {
        for split in 0..=10 {
            let mut decoder = Decoder::new(8);
            let wire = b"data:123\r\n\r\n";
            decoder.feed(&wire[..split]);
            let early = decoder.next_event();
            decoder.feed(&wire[split..]);
            let late = decoder.next_event();
            assert_eq!(early, Ok(None), "split at {split}");
            assert_eq!(
                late.map(|e| e.map(|e| e.data)),
                Ok(Some("123".into())),
                "split at {split}"
            );
        }
    }

    #[test]
    fn refuses_unbounded_events() {
        let mut decoder = Decoder::new(8);
        decoder.feed(b"data: 0123456789");
        assert_eq!(decoder.next_event(), Err(DecodeError::TooLarge(8)));
    }
}
