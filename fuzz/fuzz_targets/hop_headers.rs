//! The replica hop's signature header (`hop::parse`, `hop::check_time`, `hop::Signed::{sign,
//! check}`) and its principal header (`hop::principal_header`, `hop::checked_principal`).
//!
//! Input `[time (8 bytes), lengths (3 bytes), method, path, node, body…]`. Any header text
//! parses or is refused without a panic, and what parses reads back the same from its canonical
//! form; no header of the input's verifies. A hop this target signs checks at its time and up
//! to `MAX_SKEW` away, is refused as skewed beyond, and as a mismatch with its method, path,
//! node, body, key or MAC changed; its principal header names its principal, and only under
//! its own signature.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::hop::{self, SignatureError, Signed, MAX_SKEW};
use mcp_session_proxy::keys::Keys;

fuzz_target!(|data: &[u8]| {
    if data.len() < 11 {
        return;
    }
    let (time, rest) = data.split_at(8);
    // Within what a SystemTime holds, skew included.
    let seconds = u64::from_le_bytes(time.try_into().unwrap()) % (1 << 40) + 3600;
    let now = UNIX_EPOCH + Duration::from_secs(seconds);
    let (lengths, rest) = rest.split_at(3);
    let mut parts = Vec::new();
    let mut rest = rest;
    for &len in lengths {
        let (part, after) = rest.split_at(usize::from(len % 32).min(rest.len()));
        // An HTTP method, path or header value never holds a zero byte.
        parts.push(String::from_utf8_lossy(part).replace('\0', ""));
        rest = after;
    }
    let body = rest;
    let (method, path, node) = (&parts[0], &parts[1], &parts[2]);
    let keys = Keys::derived("a secret the fuzz target's replicas share");

    // Any text as a header: parsed or refused, never taken.
    let header = String::from_utf8_lossy(data);
    if let Ok((time, mac)) = hop::parse(&header) {
        assert_eq!(hop::parse(&format!("t={time},v1={mac}")), Ok((time, mac)));
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
    let signature = hop.sign(&keys.hop, now);
    assert_eq!(hop.check(&keys.hop, &signature, now), Ok(()));
    assert_eq!(hop.check(&keys.hop, &signature, now + MAX_SKEW), Ok(()));
    assert_eq!(hop.check(&keys.hop, &signature, now - MAX_SKEW), Ok(()));
    let beyond = MAX_SKEW + Duration::from_secs(1);
    for at in [now + beyond, now - beyond] {
        assert!(matches!(
            hop.check(&keys.hop, &signature, at),
            Err(SignatureError::Skewed(_))
        ));
    }
    let mismatch = |changed: Signed<'_>| {
        assert_eq!(
            changed.check(&keys.hop, &signature, now),
            Err(SignatureError::Mismatch)
        )
    };
    let other = |text: &str| format!("{text}x");
    let (method2, path2, node2) = (other(method), other(path), other(node));
    let mut body2 = body.to_vec();
    body2.push(b'x');
    mismatch(Signed {
        method: &method2,
        ..hop_of(&hop)
    });
    mismatch(Signed {
        path: &path2,
        ..hop_of(&hop)
    });
    mismatch(Signed {
        node: &node2,
        ..hop_of(&hop)
    });
    mismatch(Signed {
        body: &body2,
        ..hop_of(&hop)
    });
    // Parts are delimited: moving a byte from one to the next changes the signature.
    if !method.is_empty() && method.is_char_boundary(method.len() - 1) {
        let (head, last) = method.split_at(method.len() - 1);
        let moved = format!("{last}{path}");
        mismatch(Signed {
            method: head,
            path: &moved,
            ..hop_of(&hop)
        });
    }
    assert_eq!(
        hop.check(&keys.request_state, &signature, now),
        Err(SignatureError::Mismatch),
        "another purpose's key"
    );
    let (stamp, mac) = hop::parse(&signature).expect("a signature this proxy wrote");
    assert_eq!(stamp, seconds);
    let mut flipped = mac.as_bytes().to_vec();
    let at = usize::from(data[0]) % flipped.len();
    flipped[at] = if flipped[at] == b'A' { b'B' } else { b'A' };
    let flipped = format!("t={stamp},v1={}", String::from_utf8(flipped).unwrap());
    assert!(hop.check(&keys.hop, &flipped, now).is_err(), "{flipped}");
    let later = format!("t={},v1={mac}", stamp + 1);
    assert!(hop.check(&keys.hop, &later, now).is_err(), "another time");

    // The principal header: bound to its signature.
    let principal = String::from_utf8_lossy(body);
    let named = hop::principal_header(&keys.hop, &signature, &principal);
    assert_eq!(
        hop::checked_principal(&keys.hop, &signature, &named),
        Some(principal.as_ref())
    );
    assert_eq!(hop::checked_principal(&keys.hop, &flipped, &named), None);
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
