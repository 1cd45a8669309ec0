//! `upstream::lines::LineReader` over a `tokio::io::BufReader` of arbitrary capacity.
//!
//! Input: `[capacity selector, max selector, bytes...]`. The lines read are compared with an
//! oracle that splits the bytes at `\n`:
//! - a line of at most `max` bytes (its `\r` counted) comes back as `Text`, without the `\r`
//!   before its `\n`; so for input without `\r` and without over-long lines, the `Text` lines
//!   joined with `\n` are the input;
//! - no `Text` line is longer than `max`;
//! - a longer one comes back as `TooLong { max, head }`, `head` a prefix of it of at most 512
//!   bytes (exactly its first 512 when `max >= 512`, at least `min(max + 1, 512)` otherwise);
//! - the result is the same for buffer capacities 1, the fuzzer's and 8 KiB.
#![no_main]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::upstream::lines::{Line, LineReader};
use tokio::io::BufReader;

const HEAD: usize = 512;

fuzz_target!(|data: &[u8]| {
    let [capacity, max, input @ ..] = data else {
        return;
    };
    let capacity = match capacity >> 6 {
        0 | 1 => 1 + usize::from(capacity & 0x7f),
        2 => 500 + usize::from(capacity & 0x3f),
        _ => 8192,
    };
    let max = match max >> 6 {
        0 => usize::from(max & 0x3f),
        1 => 480 + usize::from(max & 0x3f),
        2 => 1000 + usize::from(max & 0x3f),
        _ => 4 << 20,
    };

    let expected = oracle(input, max);
    for capacity in [capacity, 1, 8192] {
        let got = read_all(input, capacity, max);
        assert_eq!(got.len(), expected.len(), "capacity {capacity}: {got:?}");
        for (got, want) in got.iter().zip(&expected) {
            match (got, want) {
                (Line::Text(got), Line::Text(want)) => {
                    assert!(got.len() <= max);
                    assert_eq!(got, want, "capacity {capacity}");
                }
                (Line::TooLong { max: m, head }, Line::TooLong { head: line, .. }) => {
                    assert_eq!(*m, max);
                    assert!(head.len() <= HEAD, "a head of {} bytes", head.len());
                    assert!(line.starts_with(head), "head is not a prefix of the line");
                    let least = if max >= HEAD { HEAD } else { max + 1 };
                    assert!(
                        head.len() >= least.min(line.len()),
                        "a head of {} bytes",
                        head.len()
                    );
                }
                _ => panic!("capacity {capacity}: {got:?} where {want:?} was due"),
            }
        }
    }

    // No `\r`, nothing too long: the lines are the input.
    if !input.contains(&b'\r') && expected.iter().all(|l| matches!(l, Line::Text(_))) {
        let mut joined = Vec::with_capacity(input.len());
        for line in &expected {
            let Line::Text(text) = line else {
                unreachable!()
            };
            joined.extend_from_slice(text);
            joined.push(b'\n');
        }
        if input.last() != Some(&b'\n') {
            joined.pop();
        }
        assert_eq!(joined, input);
    }
});

/// The lines `input` holds. `TooLong` carries the whole line, for the comparison.
fn oracle(input: &[u8], max: usize) -> Vec<Line> {
    let mut lines: Vec<&[u8]> = input.split(|b| *b == b'\n').collect();
    // After a final `\n` (or in empty input) there is no line.
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let terminated = input.last() == Some(&b'\n');
    let count = lines.len();
    lines
        .into_iter()
        .enumerate()
        .map(|(i, line)| {
            if line.len() > max {
                Line::TooLong {
                    max,
                    head: line.to_vec(),
                }
            } else if terminated || i + 1 < count {
                Line::Text(line.strip_suffix(b"\r").unwrap_or(line).to_vec())
            } else {
                // A last line without `\n` is kept as it is.
                Line::Text(line.to_vec())
            }
        })
        .collect()
}

fn read_all(input: &[u8], capacity: usize, max: usize) -> Vec<Line> {
    let mut reader = LineReader::new(BufReader::with_capacity(capacity, input), max);
    let mut lines = Vec::new();
    while let Some(line) = block_on(reader.next_line()).expect("reading a slice failed") {
        lines.push(line);
        assert!(lines.len() <= input.len() + 1, "more lines than bytes");
    }
    lines
}

/// A `&[u8]` never makes a reader wait, so one poll must do.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a reader over a slice returned Pending"),
    }
}
