//! `sse::Decoder` fed arbitrary bytes in arbitrary pieces, and the `sse` encoders round-tripped.
//!
//! Input: `[max selector, chunking seed, stream bytes...]`.
//! - The events (and whether decoding stops on an error) do not depend on how the stream was
//!   cut: fed whole, one byte at a time and in seeded random pieces give the same result.
//! - No decoded event is larger than the decoder's `max_event`.
//! - `sse::event(id, data)` decodes back to `id` and `data` (data without `\r`, ids without line
//!   breaks), as do `priming`, `endpoint`, `retry` and `keep_alive`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::wire::sse::{self, DecodeError, Decoder, Event};

fuzz_target!(|data: &[u8]| {
    let [selector, seed, stream @ ..] = data else {
        return;
    };
    // Small bounds (0..=127 bytes) to reach the limit often, else the 64 KiB of a real stream.
    let max = if selector & 0x80 == 0 {
        usize::from(*selector)
    } else {
        1 << 16
    };

    let whole = decode(stream, max, &[stream.len()]);
    check_bounds(&whole, max);
    let bytewise = decode(stream, max, &vec![1; stream.len()]);
    compare(&bytewise, &whole, "one byte at a time");
    let pieces = decode(stream, max, &chunk_sizes(*seed, stream.len()));
    compare(&pieces, &whole, "in pieces");

    round_trip(stream);
});

/// What a decoder made of a stream: its events, and the error it stopped on with the number of
/// bytes fed when it did.
#[derive(Debug)]
struct Outcome {
    events: Vec<Event>,
    error: Option<(DecodeError, usize)>,
}

fn decode(stream: &[u8], max: usize, sizes: &[usize]) -> Outcome {
    let mut decoder = Decoder::new(max);
    let mut events = Vec::new();
    let mut fed = 0;
    for &size in sizes {
        let size = size.min(stream.len() - fed);
        decoder.feed(&stream[fed..fed + size]);
        fed += size;
        loop {
            match decoder.next_event() {
                Ok(Some(event)) => events.push(event),
                Ok(None) => break,
                Err(error) => {
                    return Outcome {
                        events,
                        error: Some((error, fed)),
                    }
                }
            }
        }
    }
    Outcome {
        events,
        error: None,
    }
}

/// Piece sizes from 1 to 2^k bytes (k from the seed), xorshift-chosen.
fn chunk_sizes(seed: u8, len: usize) -> Vec<usize> {
    let mut state = 0x9e37_79b9_u32 ^ u32::from(seed).wrapping_mul(0x0101_0101);
    let limit = 1usize << (seed % 8);
    let mut sizes = Vec::new();
    let mut total = 0;
    while total < len {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let size = 1 + (state as usize) % limit;
        sizes.push(size);
        total += size;
    }
    sizes
}

fn check_bounds(outcome: &Outcome, max: usize) {
    for event in &outcome.events {
        let size = event.data.len()
            + event.id.as_ref().map_or(0, String::len)
            + event.event.as_ref().map_or(0, String::len);
        assert!(
            size <= max,
            "an event of {size} bytes passed a {max}-byte bound: {event:?}"
        );
    }
}

/// `cut` was decoded from the stream cut in pieces, `whole` with fewer cuts.
fn compare(cut: &Outcome, whole: &Outcome, how: &str) {
    assert_eq!(cut.events, whole.events, "events differ when fed {how}");
    match (&cut.error, &whole.error) {
        (None, None) => {}
        // A line both over the bound and not UTF-8 is refused for either reason, depending on
        // whether its end had arrived.
        (Some((a, _)), Some((b, _))) => assert!(
            a == b || matches!((a, b), (DecodeError::TooLarge(_), DecodeError::NotUtf8)),
            "fed {how}: {a:?}, fed whole: {b:?}"
        ),
        (a, b) => panic!("fed {how}: {a:?}, fed whole: {b:?}"),
    }
}

fn decode_one(wire: &[u8]) -> Event {
    let outcome = decode(wire, 1 << 20, &[wire.len()]);
    assert!(outcome.error.is_none(), "{outcome:?} from {wire:?}");
    let bytewise = decode(wire, 1 << 20, &vec![1; wire.len()]);
    assert_eq!(bytewise.events, outcome.events);
    assert_eq!(
        outcome.events.len(),
        1,
        "from {:?}",
        String::from_utf8_lossy(wire)
    );
    outcome.events.into_iter().next().unwrap()
}

/// The encoders, with the stream's first line as the id and the rest as the data.
fn round_trip(stream: &[u8]) {
    let split = stream
        .iter()
        .position(|b| *b == b'\n')
        .unwrap_or(stream.len());
    let Ok(id) = std::str::from_utf8(&stream[..split]) else {
        return;
    };
    let data = stream.get(split + 1..).unwrap_or(&[]);
    let id_ok = !id.contains(['\r', '\n']);
    let data_text = std::str::from_utf8(data).ok();

    if let Some(text) = data_text {
        for id in [None, Some(id).filter(|_| id_ok)] {
            let event = decode_one(&sse::event(id, data));
            if !text.contains('\r') {
                assert_eq!(event.data, text);
            }
            // The decoder drops ids with NUL, as the SSE standard says.
            assert_eq!(event.id.as_deref(), id.filter(|id| !id.contains('\0')));
            assert_eq!(event.event.as_deref(), Some("message"));
        }
        if !text.contains(['\r', '\n']) {
            let event = decode_one(&sse::endpoint(text));
            assert_eq!(event.event.as_deref(), Some("endpoint"));
            assert_eq!(event.data, text);
        }
    }
    if id_ok && !id.contains('\0') {
        let retry = u64::from_le_bytes(
            data.get(..8)
                .and_then(|b| b.try_into().ok())
                .unwrap_or([7; 8]),
        );
        for retry in [None, Some(retry)] {
            let event = decode_one(&sse::priming(id, retry));
            assert_eq!(event.id.as_deref(), Some(id));
            assert_eq!(event.data, "");
            assert_eq!(event.retry, retry);
        }
    }
    // Field-only blocks dispatch nothing.
    let mut quiet = sse::keep_alive().to_vec();
    quiet.extend_from_slice(&sse::retry(u64::from(stream.len() as u32)));
    let outcome = decode(&quiet, 64, &[quiet.len()]);
    assert!(outcome.events.is_empty() && outcome.error.is_none());
}
