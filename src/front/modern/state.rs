//! `requestState`: what a client's retry of an `input_required` answer needs, carried by the
//! client and signed by the proxy (HMAC-SHA256), so a tampered, foreign or expired one is
//! refused: the session and stream of the held request, its principal, the server requests
//! waiting for the client's answers (by input key), where reading stopped, and an expiry.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::base::ids::Principal;
use crate::base::keys::Key;
use crate::front::rejection::Rejection;

/// The key `requestState` is signed with: derived from the cluster secret when replicas share
/// one (any replica takes any retry), else minted at start.
#[derive(Clone, Debug)]
pub struct StateKey(Key);

impl StateKey {
    pub fn new(key: Key) -> StateKey {
        StateKey(key)
    }

    pub fn minted() -> StateKey {
        StateKey(Key::minted())
    }
}

impl Default for StateKey {
    fn default() -> StateKey {
        StateKey::minted()
    }
}

/// A request held for the client's input, as its `requestState` names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldRequest {
    /// The upstream session serving it.
    pub session: String,
    pub principal: String,
    /// The session ends with the request (a request without a principal).
    pub own_session: bool,
    /// The method and the name (or URI) it was called with: the retry must repeat them.
    pub method: String,
    pub name: String,
    /// The request's stream, and the position read up to.
    pub stream: u64,
    pub after: u64,
    /// The id of the request in flight (the first call's).
    pub request_id: Value,
    /// Input key → the id of the server's request waiting for that answer.
    pub waiting: BTreeMap<String, Value>,
    /// Unix milliseconds after which the state is refused.
    pub expires_ms: u64,
}

impl HeldRequest {
    /// One round of this held call, as the table of held calls counts it: its session and the
    /// server requests it waits on.
    pub fn round(&self) -> String {
        format!(
            "{} {}",
            self.session,
            serde_json::to_string(&self.waiting).unwrap_or_default()
        )
    }

    pub fn sign(&self, key: &StateKey) -> String {
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default());
        let tag = URL_SAFE_NO_PAD.encode(key.0.mac(&[payload.as_bytes()]));
        format!("{payload}.{tag}")
    }

    /// The held request `state` names, if this proxy signed it for `principal` and it has not
    /// expired.
    pub fn verify(
        state: &str,
        key: &StateKey,
        principal: &Principal,
    ) -> Result<HeldRequest, Rejection> {
        let refused = |why: &str| {
            Rejection::invalid_params(format!("requestState {why}; call again without it"))
        };
        let (payload, tag) = state
            .split_once('.')
            .ok_or_else(|| refused("is malformed"))?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| refused("is malformed"))?;
        if tag.len() != 32 || !key.0.verify(&[payload.as_bytes()], &tag) {
            return Err(refused("failed its integrity check"));
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| refused("is malformed"))?;
        let held: HeldRequest =
            serde_json::from_slice(&bytes).map_err(|_| refused("is malformed"))?;
        if held.principal != principal.as_str() {
            return Err(refused("belongs to another principal"));
        }
        if held.expires_ms < now_ms() {
            return Err(refused("has expired"));
        }
        Ok(held)
    }
}

/// Unix milliseconds, `ttl` from now.
pub fn expiry(ttl: Duration) -> u64 {
    now_ms().saturating_add(ttl.as_millis() as u64)
}

/// What identifies a signed `requestState` (its tag): the key it is spent under.
pub fn token(state: &str) -> &str {
    state.rsplit_once('.').map_or(state, |(_, tag)| tag)
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::keys::Keys;
    use serde_json::json;

    fn held(principal: &Principal, ttl: Duration) -> HeldRequest {
        HeldRequest {
            session: "s".into(),
            principal: principal.as_str().to_owned(),
            own_session: false,
            method: "tools/call".into(),
            name: "t".into(),
            stream: 3,
            after: 17,
            request_id: json!(1),
            waiting: BTreeMap::from([("user_name".to_owned(), json!(4))]),
            expires_ms: expiry(ttl),
        }
    }

    #[test]
    fn only_an_intact_unexpired_state_of_the_same_principal_is_taken() {
        let key = StateKey::minted();
        let alice = Principal::from_credential(b"Bearer alice");
        let intact = held(&alice, Duration::from_secs(60));
        let state = intact.sign(&key);
        assert_eq!(HeldRequest::verify(&state, &key, &alice).unwrap(), intact);
        let refused = |state: &str, key: &StateKey, who: &Principal| {
            HeldRequest::verify(state, key, who).unwrap_err().message
        };
        assert!(refused(&format!("{state}-TAMPERED"), &key, &alice).contains("integrity"));
        assert!(refused(&state, &StateKey::minted(), &alice).contains("integrity"));
        let bob = Principal::from_credential(b"Bearer bob");
        assert!(refused(&state, &key, &bob).contains("another principal"));
        let old = held(&alice, Duration::ZERO);
        let old = HeldRequest {
            expires_ms: old.expires_ms - 1,
            ..old
        }
        .sign(&key);
        assert!(refused(&old, &key, &alice).contains("expired"));
        assert!(refused("no-dot", &key, &alice).contains("malformed"));
        let secret = "a secret the replicas share, 32 bytes or more";
        let shared = StateKey::new(Keys::derived(secret).request_state);
        let state = held(&alice, Duration::from_secs(60)).sign(&shared);
        let elsewhere = StateKey::new(Keys::derived(secret).request_state);
        assert!(HeldRequest::verify(&state, &elsewhere, &alice).is_ok());
        let layer_key = StateKey::new(Keys::derived(secret).layer_state);
        assert!(refused(&state, &layer_key, &alice).contains("integrity"));
    }
}
