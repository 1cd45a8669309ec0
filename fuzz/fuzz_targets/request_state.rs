//! `front::modern::state::HeldRequest::{sign, verify}`: the signed `requestState` of the
//! 2026-07-28 front (`input_required` answers and their retries), and `state::token`.
//!
//! Input `[mode, …]`. Mode even: the rest, as text, is a `requestState` a client sent: it never
//! verifies (under the key, for any principal) and `token` reads it without a panic. Mode odd:
//! a held request built from the input, signed: it verifies for its principal to exactly what
//! was signed; any one character of it changed, a character cut or added, another principal,
//! another purpose's key or an expiry passed is refused.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::base::ids::Principal;
use mcp_session_proxy::base::keys::Keys;
use mcp_session_proxy::front::modern::state::{self, HeldRequest, StateKey};
use serde_json::Value;

const SECRET: &str = "a secret the fuzz target's replicas share";

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let key = StateKey::new(Keys::derived(SECRET).request_state);
    let alice = Principal::from_credential(b"Bearer alice");
    if mode % 2 == 0 {
        let sent = String::from_utf8_lossy(rest);
        let _ = state::token(&sent);
        assert!(HeldRequest::verify(&sent, &key, &alice).is_err(), "{sent}");
        assert!(HeldRequest::verify(&sent, &key, &Principal::anonymous()).is_err());
        return;
    }
    let mut input = Input(rest);
    let principal = match mode & 2 {
        0 => alice.clone(),
        _ => Principal::from_subject("https://issuer.example", &input.text()),
    };
    let expired = mode & 4 != 0;
    let held = HeldRequest {
        session: input.text(),
        principal: principal.as_str().to_owned(),
        own_session: mode & 8 != 0,
        method: input.text(),
        name: input.text(),
        stream: input.number(),
        after: input.number(),
        request_id: input.json(),
        waiting: (0..input.byte() % 4)
            .map(|_| (input.text(), input.json()))
            .collect::<BTreeMap<_, _>>(),
        expires_ms: match expired {
            true => state::now_ms().saturating_sub(1 + input.number() % 1_000_000),
            false => state::expiry(std::time::Duration::from_secs(600)),
        },
    };
    let signed = held.sign(&key);
    assert_eq!(state::token(&signed), signed.rsplit_once('.').unwrap().1);
    let verified = HeldRequest::verify(&signed, &key, &principal);
    if expired {
        let refused = verified.expect_err("an expired state");
        assert!(refused.message.contains("expired"), "{}", refused.message);
        return;
    }
    assert_eq!(verified.expect("a state this proxy signed"), held);

    let refused = |text: &str, key: &StateKey, who: &Principal| {
        HeldRequest::verify(text, key, who).expect_err(text).message
    };
    // One character changed, wherever.
    let at = usize::from(input.byte()) * signed.len() / 256;
    let mut changed = signed.clone().into_bytes();
    changed[at] = match changed[at] {
        b'A' => b'B',
        _ => b'A',
    };
    let changed = String::from_utf8(changed).unwrap();
    refused(&changed, &key, &principal);
    refused(&signed[..signed.len() - 1], &key, &principal);
    refused(&signed[1..], &key, &principal);
    refused(&format!("{signed}A"), &key, &principal);
    refused(&format!("A{signed}"), &key, &principal);
    let other = Principal::from_credential(b"Bearer mallory");
    if other != principal {
        assert!(refused(&signed, &key, &other).contains("another principal"));
    }
    let layer_key = StateKey::new(Keys::derived(SECRET).layer_state);
    assert!(refused(&signed, &layer_key, &principal).contains("integrity"));
    let elsewhere =
        StateKey::new(Keys::derived("another cluster's secret, long enough").request_state);
    assert!(refused(&signed, &elsewhere, &principal).contains("integrity"));
});

/// A cursor over the input.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let Some((&first, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        first
    }

    fn number(&mut self) -> u64 {
        let mut bytes = [0u8; 8];
        for byte in bytes.iter_mut().take(usize::from(self.byte() % 9)) {
            *byte = self.byte();
        }
        u64::from_le_bytes(bytes)
    }

    fn text(&mut self) -> String {
        let len = usize::from(self.byte() % 32).min(self.0.len());
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8_lossy(taken).into_owned()
    }

    /// A JSON value: the next text when it is one, else a string or a number of the input's.
    fn json(&mut self) -> Value {
        let text = self.text();
        match serde_json::from_str::<Value>(&text) {
            Ok(value) => value,
            Err(_) if text.len() % 2 == 0 => Value::String(text),
            Err(_) => Value::from(text.len() as u64),
        }
    }
}
