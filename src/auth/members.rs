//! The credentials of a virtual server's members, each made for its own server (passed
//! through, exchanged), carried as the one credential a session keeps: a value of the
//! `Members` scheme holding each member's `Authorization`, which only the members' upstreams
//! read, each its own. Never sent anywhere as it is.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use http::HeaderValue;
use std::collections::BTreeMap;

/// The scheme before the encoded members.
const SCHEME: &str = "Members ";

/// One value holding each member's credential (`(member, Authorization)`); `None` when no
/// member has one.
pub fn encode(members: &[(String, HeaderValue)]) -> Option<HeaderValue> {
    let map: BTreeMap<&str, &str> = members
        .iter()
        .filter_map(|(member, value)| Some((member.as_str(), value.to_str().ok()?)))
        .collect();
    if map.is_empty() {
        return None;
    }
    let json = serde_json::to_vec(&map).ok()?;
    let mut value =
        HeaderValue::try_from(format!("{SCHEME}{}", URL_SAFE_NO_PAD.encode(json))).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// What member `member` gets of a session's credential: its own, where the credential holds
/// the members' (none if it holds none of this member's); the credential as it is otherwise
/// (a client's own, forwarded where its server is configured to take it).
pub fn of_member(credential: &HeaderValue, member: &str) -> Option<HeaderValue> {
    let Some(encoded) = credential
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix(SCHEME))
    else {
        return Some(credential.clone());
    };
    let json = URL_SAFE_NO_PAD.decode(encoded).ok()?;
    let map: BTreeMap<String, String> = serde_json::from_slice(&json).ok()?;
    let mut value = HeaderValue::try_from(map.get(member)?.as_str()).ok()?;
    value.set_sensitive(true);
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_member_reads_its_own_credential_and_no_other() {
        let both = encode(&[
            (
                "github".into(),
                HeaderValue::from_static("Bearer for-github"),
            ),
            (
                "tickets".into(),
                HeaderValue::from_static("Bearer for-tickets"),
            ),
        ])
        .unwrap();
        assert!(both.is_sensitive());
        assert_eq!(of_member(&both, "github").unwrap(), "Bearer for-github");
        assert_eq!(of_member(&both, "tickets").unwrap(), "Bearer for-tickets");
        assert_eq!(of_member(&both, "demo"), None);
        assert_eq!(encode(&[]), None);
        // A client's own credential, not the members': as it is.
        let own = HeaderValue::from_static("Bearer mine");
        assert_eq!(of_member(&own, "github").unwrap(), "Bearer mine");
        // A value of the scheme that does not decode names nobody's.
        let broken = HeaderValue::from_static("Members !!!");
        assert_eq!(of_member(&broken, "github"), None);
    }
}
