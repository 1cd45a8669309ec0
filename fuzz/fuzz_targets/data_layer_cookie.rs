//! `front::data_layer::cookie::{read, may_hold, strip}`: the data-layer session a request names
//! in `_meta["io.modelcontextprotocol/session"]` (or the drafts' `_meta["mcp/session"]`), and
//! the `state` tag that binds it to its principal (`keys::Key::tag`).
//!
//! Input: `[max_state selector, _meta as JSON text…]`. For every `_meta` object: `read` agrees
//! with an oracle written from the rules (the current key first unless null, an id of 1–256
//! visible ASCII characters, a `state` string within the bound, the drafts' `data` only
//! measured); the substring test `may_hold`, which lets a request skip the parse, never says
//! "no cookie" of a text that holds one; a cookie read is gone once stripped. A `state` the
//! proxy did not issue never verifies; one it issued verifies for its id and principal alone.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::base::keys::Keys;
use mcp_session_proxy::front::data_layer::cookie::{self, Cookie, DRAFT_META_KEY};
use mcp_session_proxy::session::data_layer::META_KEY;
use mcp_session_proxy::wire::jsonrpc;
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let max_state = match selector % 4 {
        0 => 0,
        1 => usize::from(selector / 4),
        2 => 4096,
        _ => usize::MAX,
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let Ok(mut meta) = serde_json::from_str::<Map<String, Value>>(text) else {
        return;
    };
    let read = cookie::read(Some(&meta), max_state);
    let outcome = match &read {
        Ok(None) => Outcome::None,
        Ok(Some(cookie)) => Outcome::Cookie(cookie.clone()),
        Err(refused) if refused.code == jsonrpc::SESSION_NOT_FOUND => Outcome::NotFound,
        Err(refused) if refused.code == jsonrpc::INVALID_PARAMS => Outcome::TooLarge,
        Err(refused) => panic!("refused with {}: {}", refused.code, refused.message),
    };
    assert_eq!(outcome, oracle(&meta, max_state), "{text}");
    if outcome != Outcome::None {
        assert!(
            cookie::may_hold(text),
            "may_hold says no cookie, but the text names one: {text}"
        );
    }
    if let Outcome::Cookie(cookie) = &outcome {
        let id = &cookie.session_id;
        assert!(!id.is_empty() && id.len() <= 256);
        assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        assert!(cookie.state.as_ref().is_none_or(|s| s.len() <= max_state));
        state_tags(cookie);
    }
    let had_a_key = meta.contains_key(META_KEY) || meta.contains_key(DRAFT_META_KEY);
    assert_eq!(cookie::strip(&mut meta), had_a_key, "strip: {text}");
    assert_eq!(cookie::read(Some(&meta), max_state).ok(), Some(None));
});

#[derive(Debug, PartialEq)]
enum Outcome {
    None,
    Cookie(Cookie),
    NotFound,
    TooLarge,
}

/// The rules, written out.
fn oracle(meta: &Map<String, Value>, max_state: usize) -> Outcome {
    let present = |key: &str| meta.get(key).filter(|value| !value.is_null());
    let (value, draft) = match (present(META_KEY), present(DRAFT_META_KEY)) {
        (Some(value), _) => (value, false),
        (None, Some(value)) => (value, true),
        (None, None) => return Outcome::None,
    };
    let id_field = if draft { "id" } else { "sessionId" };
    let id = value.get(id_field).and_then(Value::as_str);
    let Some(id) = id.filter(|id| {
        (1..=256).contains(&id.len()) && id.bytes().all(|b| (0x21..=0x7e).contains(&b))
    }) else {
        return Outcome::NotFound;
    };
    let state = if draft {
        // The drafts' `data` is the client's own: only its size is checked.
        match value.get("data") {
            None | Some(Value::Null) | Some(Value::String(_)) => None,
            Some(other) if other.to_string().len() > max_state => return Outcome::TooLarge,
            Some(_) => None,
        }
    } else {
        match value.get("state") {
            None | Some(Value::Null) => None,
            Some(Value::String(state)) if state.len() > max_state => return Outcome::TooLarge,
            Some(Value::String(state)) => Some(state.clone()),
            Some(_) => return Outcome::NotFound,
        }
    };
    Outcome::Cookie(Cookie {
        session_id: id.to_owned(),
        state,
        draft,
    })
}

/// The `state` a client sent verifies only if the proxy issued it for that id and principal.
fn state_tags(cookie: &Cookie) {
    let key = Keys::derived("a secret the fuzz target's replicas share").layer_state;
    let other = Keys::derived("another cluster's secret, long enough").layer_state;
    let id = cookie.session_id.as_str();
    let (alice, bob) = ("principal-alice", "principal-bob");
    let issued = key.tag(&[id, alice]);
    if let Some(state) = &cookie.state {
        assert_eq!(
            key.verify_tag(&[id, alice], state),
            *state == issued,
            "a state the proxy did not issue verified: {state:?}"
        );
    }
    assert!(key.verify_tag(&[id, alice], &issued));
    assert!(!key.verify_tag(&[id, bob], &issued), "another principal");
    assert!(!other.verify_tag(&[id, alice], &issued), "another key");
    assert!(!key.verify_tag(&[&format!("{id}x"), alice], &issued));
    assert!(!key.verify_tag(&[id, alice], &issued[..issued.len() - 1]));
    assert!(!key.verify_tag(&[id, alice], &format!("{issued}A")));
}
