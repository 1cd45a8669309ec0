//! Unit tests of the write-behind: what a batch writes, merges and undoes.

use std::time::Duration;

use super::*;
use crate::base::event::{Logged, StreamKey};

fn queued(session: &str, op: Op) -> Queued {
    Queued {
        server: "default".into(),
        session: session.into(),
        counted_in: None,
        fence: Fence::new(crate::store::FIRST_EPOCH, 0),
        op,
        at: std::time::Instant::now(),
    }
}

fn append(session: &str, seq: u64) -> Queued {
    queued(
        session,
        Op::Append(Logged {
            seq,
            stream: StreamKey::Request(1),
            terminal: true,
            coalesce: None,
            payload: "{}".into(),
        }),
    )
}

#[test]
fn what_a_batch_undoes_is_not_written_and_the_rest_is() {
    let batch = vec![
        queued(
            "a",
            Op::Inflight {
                stream: 1,
                client_id: "1".into(),
            },
        ),
        append("a", 1),
        queued("a", Op::Answered { stream: 1 }),
        append("a", 2),
        queued("b", Op::Remove { seq: 1 }),
        queued("a", Op::Remove { seq: 1 }),
        queued("a", Op::Answered { stream: 7 }),
    ];
    let mut undone = Undone::of(&batch);
    let kept: Vec<bool> = batch.iter().map(|q| !undone.skips(q)).collect();
    // a's request 1 in flight and answered, its answer logged and removed: none of it; a's
    // message 2 stays; b's removal of a message logged in an earlier batch is written, as
    // is a's answer to a request put in flight earlier.
    assert_eq!(kept, [false, false, false, true, true, false, true]);
}

fn field(session: &str, name: &'static str, value: &str) -> Queued {
    queued(
        session,
        Op::Field {
            name,
            value: value.into(),
        },
    )
}

#[test]
fn a_record_field_written_again_in_a_batch_is_written_once_with_its_last_value() {
    let batch = vec![
        field("a", "next_stream", "2"),
        field("b", "next_stream", "2"),
        field("a", "version", "2025-11-25"),
        field("a", "next_stream", "3"),
        field("a", "next_stream", "4"),
    ];
    let mut undone = Undone::of(&batch);
    let kept: Vec<bool> = batch.iter().map(|q| !undone.skips(q)).collect();
    assert_eq!(kept, [false, true, true, false, true]);
}

#[test]
fn a_sessions_ttls_are_set_for_keys_just_created_and_all_again_only_now_and_then() {
    let mut ttls = Ttls::new(Duration::from_secs(60));
    let a: (Arc<str>, Arc<str>) = ("default".into(), "a".into());
    let start = Instant::now();
    assert_eq!(
        ttls.due(&a, Keys::NONE, start),
        Keys::ALL,
        "first seen: all"
    );
    let soon = start + Duration::from_millis(10);
    assert_eq!(ttls.due(&a, Keys::NONE, soon), Keys::NONE, "just set");
    assert_eq!(
        ttls.due(&a, Keys::INFLIGHT, soon),
        Keys::INFLIGHT,
        "a key the round trip may have created gets its TTL at once"
    );
    let later = start + Duration::from_secs(2);
    assert_eq!(
        ttls.due(&a, Keys::NONE, later),
        Keys::ALL,
        "a second on: all again"
    );
    ttls.forget(&a);
    assert_eq!(
        ttls.due(&a, Keys::NONE, later),
        Keys::ALL,
        "ended and seen again"
    );
    ttls.clear();
    assert_eq!(
        ttls.due(&a, Keys::NONE, later),
        Keys::ALL,
        "after a failed write"
    );
}
