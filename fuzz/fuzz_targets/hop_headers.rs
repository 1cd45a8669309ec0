//! The replica hop's headers: its signature (`hop::parse`, `hop::check_time`,
//! `hop::Signed::{sign_with, check}`), the nonces a receiver keeps (`hop::Nonces`), the answer's
//! signature (`hop::Answer::{sign, check}`) and the principal header
//! (`hop::principal_header`, `hop::checked_principal`).
//!
//! Input `[time (8 bytes), nonce (16 bytes), lengths (3 bytes), method, path, node, body…]`.
//! Any header text parses or is refused without a panic, and what parses reads back the same
//! from its canonical form; no header of the input's verifies, as a hop or as an answer. A hop
//! this target signs checks at its time and up to `MAX_SKEW` away with its own nonce, is
//! refused as skewed beyond, and as a mismatch with its method, path, node, body, nonce, time,
//! key or MAC changed; its nonce is taken once; its answer checks only for it, unchanged; its
//! principal header names its principal, and only under its own signature.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::base::keys::Keys;
use mcp_session_proxy::hop::{
    self, Answer, AnswerRefused, NonceRefused, Nonces, SignatureError, Signed, MAX_SKEW,
};

fuzz_target!(|data: &[u8]| {
    if data.len() < 27 {
        return;
    }
    let (time, rest) = data.split_at(8);
    // Within what a SystemTime holds, skew included.
    let seconds = u64::from_le_bytes(time.try_into().unwrap()) % (1 << 40) + 3600;
    let now = UNIX_EPOCH + Duration::from_secs(seconds);
    let (nonce_bytes, rest) = rest.split_at(16);
    let (lengths, rest) = rest.split_at(3);
    let mut parts = Vec::new();
    let mut rest = rest;
    for &len in lengths {
        let (part, after) = rest.split_at(usize::from(len % 32).min(rest.len()));
        parts.push(String::from_utf8_lossy(part).into_owned());
        rest = after;
    }
    let body = rest;
    let (method, path, node) = (&parts[0], &parts[1], &parts[2]);
    let keys = Keys::derived("a secret the fuzz target's replicas share");

    // Any text as a header: parsed or refused, never taken.
    let header = String::from_utf8_lossy(data);
    if let Ok(stamp) = hop::parse(&header) {
        let canonical = format!("t={},n={},v2={}", stamp.time, stamp.nonce, stamp.mac);
        assert_eq!(hop::parse(&canonical), Ok(stamp));
    }
    let _ = hop::check_time(seconds, now);
    let hop = Signed {
        method,
        path,
        body,
        node,
    };
    assert!(hop.check(&keys.hop, &header, now).is_err(), "{header}");

    // A signed hop: taken at its time and within the skew, refused beyond and when changed.
    let nonce = hop::parse(&format!(
        "t=0,n={},v2=x",
        base64_url(nonce_bytes.try_into().unwrap())
    ))
    .expect("16 bytes are a nonce")
    .nonce;
    let signature = hop.sign_with(&keys.hop, now, nonce);
    let stamp = hop
        .check(&keys.hop, &signature, now)
        .expect("its own signature");
    assert_eq!((stamp.time, stamp.nonce), (seconds, nonce));
    assert!(hop.check(&keys.hop, &signature, now + MAX_SKEW).is_ok());
    assert!(hop.check(&keys.hop, &signature, now - MAX_SKEW).is_ok());
    let beyond = MAX_SKEW + Duration::from_secs(1);
    for at in [now + beyond, now - beyond] {
        assert!(matches!(
            hop.check(&keys.hop, &signature, at),
            Err(SignatureError::Skewed(_))
        ));
    }
    let mismatch = |changed: Signed<'_>, signature: &str| {
        assert_eq!(
            changed.check(&keys.hop, signature, now).map(|_| ()),
            Err(SignatureError::Mismatch)
        )
    };
    let other = |text: &str| format!("{text}x");
    let (method2, path2, node2) = (other(method), other(path), other(node));
    let mut body2 = body.to_vec();
    body2.push(b'x');
    for changed in [
        Signed {
            method: &method2,
            ..hop_of(&hop)
        },
        Signed {
            path: &path2,
            ..hop_of(&hop)
        },
        Signed {
            node: &node2,
            ..hop_of(&hop)
        },
        Signed {
            body: &body2,
            ..hop_of(&hop)
        },
    ] {
        mismatch(changed, &signature);
    }
    // Parts are delimited: moving a character from one to the next changes the signature.
    if let Some(last) = method.chars().last() {
        let head = &method[..method.len() - last.len_utf8()];
        let moved = format!("{last}{path}");
        mismatch(
            Signed {
                method: head,
                path: &moved,
                ..hop_of(&hop)
            },
            &signature,
        );
    }
    assert_eq!(
        hop.check(&keys.request_state, &signature, now).map(|_| ()),
        Err(SignatureError::Mismatch),
        "another purpose's key"
    );
    let mut flipped_nonce = nonce_bytes.to_vec();
    flipped_nonce[usize::from(data[0]) % 16] ^= 1;
    let other_nonce = format!(
        "t={seconds},n={},v2={}",
        base64_url(flipped_nonce.as_slice().try_into().unwrap()),
        stamp.mac
    );
    mismatch(hop_of(&hop), &other_nonce);
    let later = format!("t={},n={nonce},v2={}", seconds + 1, stamp.mac);
    mismatch(hop_of(&hop), &later);

    // Its nonce is taken once.
    let mut nonces = Nonces::new(4, seconds.saturating_sub(1));
    assert_eq!(nonces.take(seconds, nonce, seconds), Ok(()));
    assert_eq!(
        nonces.take(seconds, nonce, seconds),
        Err(NonceRefused::Replayed)
    );

    // Its answer: checked for this request only, unchanged.
    let answer = Answer {
        request_signature: &signature,
        status: 200,
        node,
        body,
    };
    let signed = answer.sign(&keys.hop);
    assert_eq!(answer.check(&keys.hop, Some(&signed)), Ok(()));
    assert_eq!(answer.check(&keys.hop, None), Err(AnswerRefused::Unsigned));
    assert!(answer.check(&keys.hop, Some(&header)).is_err(), "{header}");
    for changed in [
        Answer {
            status: 201,
            ..answer_of(&answer)
        },
        Answer {
            node: &node2,
            ..answer_of(&answer)
        },
        Answer {
            body: &body2,
            ..answer_of(&answer)
        },
        Answer {
            request_signature: &other_nonce,
            ..answer_of(&answer)
        },
    ] {
        assert_eq!(
            changed.check(&keys.hop, Some(&signed)),
            Err(AnswerRefused::Mismatch)
        );
    }

    // The principal header: bound to its signature.
    let principal = String::from_utf8_lossy(body);
    let named = hop::principal_header(&keys.hop, &signature, &principal);
    assert_eq!(
        hop::checked_principal(&keys.hop, &signature, &named),
        Some(principal.as_ref())
    );
    assert_eq!(
        hop::checked_principal(&keys.hop, &other_nonce, &named),
        None
    );
    assert_eq!(
        hop::checked_principal(&keys.request_state, &signature, &named),
        None
    );
    let _ = hop::checked_principal(&keys.hop, &signature, &header);
});

/// The same hop (a `Signed` is not `Clone`).
fn hop_of<'a>(hop: &Signed<'a>) -> Signed<'a> {
    Signed {
        method: hop.method,
        path: hop.path,
        body: hop.body,
        node: hop.node,
    }
}

/// The same answer (an `Answer` is not `Clone`).
fn answer_of<'a>(answer: &Answer<'a>) -> Answer<'a> {
    Answer {
        request_signature: answer.request_signature,
        status: answer.status,
        node: answer.node,
        body: answer.body,
    }
}

/// URL-safe base64 without padding, as the hop writes its nonces.
fn base64_url(bytes: &[u8; 16]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, &b| n << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}
