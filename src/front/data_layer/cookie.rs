//! The cookie a request names its data-layer session with: `_meta["io.modelcontextprotocol/session"]
//! = {sessionId, state?, expiresAt?}` (seed `002`'s final form), or the earlier drafts'
//! `_meta["mcp/session"] = {id, data?, expiry?}`. A cookie that is present but unreadable is
//! refused as an unknown session (-32043), one whose `state` is over the bound as invalid params.

use serde_json::{Map, Value};

use crate::front::rejection::Rejection;
use crate::session::data_layer::{NamedBy, META_KEY};

/// The earlier drafts' key.
pub use crate::wire::era::DRAFT_SESSION_META_KEY as DRAFT_META_KEY;

/// The longest session id taken (the proxy's own are far shorter).
const MAX_ID_BYTES: usize = 256;

/// A data-layer session as a request names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cookie {
    pub session_id: String,
    /// The `state` the client echoes, if it sent one.
    pub state: Option<String>,
    /// The earlier drafts' form, which carries no `state`.
    pub draft: bool,
}

impl Cookie {
    /// The session this cookie names, as the table of named sessions reads it.
    pub fn named(&self) -> NamedBy<'_> {
        NamedBy {
            session_id: &self.session_id,
            state: self.state.as_deref(),
            draft: self.draft,
        }
    }
}

/// Whether `_meta` (as its JSON text) may hold a cookie: a substring search, so requests without
/// one are not parsed for it. A text with an escape may spell a key otherwise
/// (`"io.modelcontextprotocol\/session"`), so it may hold one too.
pub fn may_hold(text: &str) -> bool {
    text.contains(META_KEY) || text.contains(DRAFT_META_KEY) || text.contains('\\')
}

/// The cookie in a request's `_meta`, if any. A `null` cookie is no cookie.
pub fn read(
    meta: Option<&Map<String, Value>>,
    max_state: usize,
) -> Result<Option<Cookie>, Rejection> {
    let Some(meta) = meta else {
        return Ok(None);
    };
    let (value, id_field, state_field) = match (meta.get(META_KEY), meta.get(DRAFT_META_KEY)) {
        (Some(value), _) if !value.is_null() => (value, "sessionId", "state"),
        (_, Some(value)) if !value.is_null() => (value, "id", "data"),
        _ => return Ok(None),
    };
    let named = value.get(id_field).and_then(Value::as_str);
    let Some(session_id) = named.filter(|id| is_session_id(id)) else {
        return Err(Rejection::data_session_not_found(named.unwrap_or_default()));
    };
    let state = match value.get(state_field) {
        None | Some(Value::Null) => None,
        Some(Value::String(_)) if state_field == "data" => None,
        Some(Value::String(state)) if state.len() > max_state => {
            return Err(Rejection::state_too_large(state.len(), max_state))
        }
        Some(Value::String(state)) => Some(state.clone()),
        // The drafts' `data` is the client's own (any JSON), not a state the proxy issued.
        Some(other) if state_field == "data" => {
            let len = other.to_string().len();
            if len > max_state {
                return Err(Rejection::state_too_large(len, max_state));
            }
            None
        }
        Some(_) => return Err(Rejection::data_session_not_found(session_id)),
    };
    Ok(Some(Cookie {
        session_id: session_id.to_owned(),
        state,
        draft: state_field == "data",
    }))
}

/// Removes the cookie from `_meta`; whether there was one.
pub fn strip(meta: &mut Map<String, Value>) -> bool {
    let current = meta.remove(META_KEY).is_some();
    let draft = meta.remove(DRAFT_META_KEY).is_some();
    current || draft
}

/// A session id as the seed allows it: visible ASCII (0x21–0x7E), bounded.
fn is_session_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_BYTES && id.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn both_forms_are_read() {
        let current = meta(json!({ META_KEY: { "sessionId": "sess-a", "state": "eyJ9" } }));
        assert_eq!(
            read(Some(&current), 4096).unwrap(),
            Some(Cookie {
                session_id: "sess-a".into(),
                state: Some("eyJ9".into()),
                draft: false,
            })
        );
        let draft = meta(json!({ DRAFT_META_KEY: { "id": "sess-b" } }));
        let draft = read(Some(&draft), 4096).unwrap().unwrap();
        assert_eq!((draft.session_id.as_str(), draft.draft), ("sess-b", true));
        let revoked = meta(json!({ META_KEY: null }));
        assert_eq!(read(Some(&revoked), 4096).unwrap(), None);
    }

    /// Found by the `data_layer_cookie` fuzz target (input in
    /// fuzz/regressions/data_layer_cookie/): a key spelled with an escape was read as a cookie
    /// by the parse, but the substring test let the request skip the parse.
    #[test]
    fn a_key_spelled_with_escapes_may_hold_a_cookie() {
        for text in [
            r#"{"io.modelcontextprotocol\/session":{"sessionId":"a"}}"#,
            r#"{"\u0069o.modelcontextprotocol/session":{"sessionId":"a"}}"#,
            r#"{"mcp\/session":{"id":"a"}}"#,
        ] {
            let meta: Map<String, Value> = serde_json::from_str(text).unwrap();
            assert!(read(Some(&meta), 4096).unwrap().is_some(), "{text}");
            assert!(may_hold(text), "{text}");
        }
        assert!(!may_hold(r#"{"progressToken":1}"#));
    }

    #[test]
    fn garbled_cookies_are_unknown_sessions() {
        for garbled in [
            json!({ META_KEY: "sess-a" }),
            json!({ META_KEY: {} }),
            json!({ META_KEY: { "sessionId": 7 } }),
            json!({ META_KEY: { "sessionId": "has space" } }),
            json!({ META_KEY: { "sessionId": "" } }),
            json!({ META_KEY: { "sessionId": "ok", "state": 5 } }),
        ] {
            let refused = read(Some(&meta(garbled.clone())), 4096).unwrap_err();
            assert_eq!(
                refused.code,
                crate::wire::jsonrpc::SESSION_NOT_FOUND,
                "{garbled}"
            );
        }
        let big = meta(json!({ META_KEY: { "sessionId": "ok", "state": "x".repeat(10) } }));
        assert_eq!(
            read(Some(&big), 8).unwrap_err().code,
            crate::wire::jsonrpc::INVALID_PARAMS
        );
    }
}
