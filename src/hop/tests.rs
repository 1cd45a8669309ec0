//! Unit tests of the hop on the wire: signatures, nonces, answers and their bounds.

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
    let stamp = hop(b"{}").check(&key, &signature, now).unwrap();
    assert_eq!(stamp.time, unix_seconds(now));
    let later = now + MAX_SKEW;
    assert!(hop(b"{}").check(&key, &signature, later).is_ok());
    let other = |signed: Signed<'_>| signed.check(&key, &signature, now).map(|_| ());
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
}

#[test]
fn each_signature_has_a_nonce_of_its_own_which_it_covers() {
    let key = Key::minted();
    let now = SystemTime::now();
    let (one, two) = (hop(b"{}").sign(&key, now), hop(b"{}").sign(&key, now));
    let (a, b) = (parse(&one).unwrap(), parse(&two).unwrap());
    assert_ne!(a.nonce, b.nonce);
    let swapped = format!("t={},n={},v2={}", a.time, b.nonce, a.mac);
    assert_eq!(
        hop(b"{}").check(&key, &swapped, now),
        Err(SignatureError::Mismatch)
    );
    let nonce = Nonce::minted();
    assert_eq!(
        hop(b"{}").sign_with(&key, now, nonce),
        hop(b"{}").sign_with(&key, now, nonce),
        "deterministic given the nonce"
    );
}

#[test]
fn a_signature_header_is_three_fields_each_once() {
    let nonce = Nonce::minted();
    let mac = "A".repeat(43);
    let good = format!("t=1,n={nonce},v2={mac}");
    assert_eq!(
        parse(&good),
        Ok(Stamp {
            time: 1,
            nonce,
            mac: &mac
        })
    );
    let reordered = format!("v2={mac}, n={nonce}, t=1");
    assert!(parse(&reordered).is_ok());
    assert_eq!(parse("t=1,v1=abc"), Err(SignatureError::NoNonce));
    for garbled in [
        String::new(),
        "t=1".into(),
        "v1=abc".into(),
        "t=x,v1=abc".into(),
        "t=1,v1=abc,z=2".into(),
        format!("t=1,n={nonce}"),
        format!("t=1,t=2,n={nonce},v2={mac}"),
        format!("t=1,n={nonce},n={nonce},v2={mac}"),
        format!("t=1,n={nonce},v2={mac},v2={mac}"),
        format!("t=1,n={nonce},v1={mac},v2={mac}"),
        format!("t=1,n=short,v2={mac}"),
        format!("t=-1,n={nonce},v2={mac}"),
        format!("t=1;n={nonce};v2={mac}"),
    ] {
        assert!(parse(&garbled).is_err(), "{garbled}");
    }
}

#[test]
fn an_answer_holds_only_for_its_request_status_replica_and_body() {
    let key = Key::minted();
    let request = hop(b"{}").sign(&key, SystemTime::now());
    let answer = |body: &'static [u8]| Answer {
        request_signature: &request,
        status: 200,
        node: "a",
        body,
    };
    let signature = answer(b"{}").sign(&key);
    assert_eq!(answer(b"{}").check(&key, Some(&signature)), Ok(()));
    let refused = |answer: Answer<'_>| answer.check(&key, Some(&signature));
    assert_eq!(refused(answer(b"{ }")), Err(AnswerRefused::Mismatch));
    assert_eq!(
        refused(Answer {
            status: 404,
            ..answer(b"{}")
        }),
        Err(AnswerRefused::Mismatch)
    );
    assert_eq!(
        refused(Answer {
            node: "b",
            ..answer(b"{}")
        }),
        Err(AnswerRefused::Mismatch)
    );
    let another = hop(b"{}").sign(&key, SystemTime::now());
    assert_eq!(
        refused(Answer {
            request_signature: &another,
            ..answer(b"{}")
        }),
        Err(AnswerRefused::Mismatch)
    );
    assert_eq!(
        answer(b"{}").check(&Key::minted(), Some(&signature)),
        Err(AnswerRefused::Mismatch)
    );
    assert_eq!(
        answer(b"{}").check(&key, None),
        Err(AnswerRefused::Unsigned)
    );
    assert_eq!(
        answer(b"{}").check(&key, Some("v2=short")),
        Err(AnswerRefused::Malformed)
    );
}

#[test]
fn an_answer_bound_fits_a_server_message_and_a_record() {
    assert_eq!(
        max_answer_bytes(4 << 20, 4 << 20),
        2 * ((4 << 20) + (1 << 20)) + (128 << 10)
    );
    assert_eq!(max_answer_bytes(64 << 20, 1 << 10), (64 << 20) + (64 << 10));
    assert!(max_answer_bytes(usize::MAX, usize::MAX) == usize::MAX);
}
