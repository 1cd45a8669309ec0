//! What the proxy prints of values that carry secrets, in logs, spans and errors: a URL
//! without its user info (`redis://:password@host` → `redis://***@host`), and a session id (a
//! bearer token for whoever holds it) as a short keyed digest, the same in every line so a
//! session can still be followed, and the same on every replica sharing a cluster secret.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use crate::base::keys::Key;

/// `url` with the user info of its authority replaced by `***`.
pub fn url(url: &str) -> Cow<'_, str> {
    match user_info(url) {
        Some((start, end)) => Cow::Owned(format!("{}***{}", &url[..start], &url[end..])),
        None => Cow::Borrowed(url),
    }
}

/// The password in `url`'s user info (`redis://:password@host`), as written; `None` without
/// one.
pub fn url_password(url: &str) -> Option<&str> {
    let (start, end) = user_info(url)?;
    let (_, password) = url[start..end].split_once(':')?;
    (!password.is_empty()).then_some(password)
}

/// Where the user info of `url`'s authority is: from after `://` to its `@` (not included).
fn user_info(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..authority_len].rfind('@')?;
    Some((start, start + at))
}

/// The key session digests are made with: set once at start (from the cluster secret when
/// there is one), else minted on first use.
static DIGEST_KEY: OnceLock<Key> = OnceLock::new();

/// Sets the key of [`session`]'s digests; the first key set stays.
pub fn set_digest_key(key: Key) {
    let _ = DIGEST_KEY.set(key);
}

/// A session id as logs, access lines and spans show it.
pub fn session(id: &str) -> SessionDigest {
    let key = DIGEST_KEY.get_or_init(Key::minted);
    let mac = key.mac(&[b"session", id.as_bytes()]);
    SessionDigest(u64::from_be_bytes(mac[..8].try_into().unwrap_or_default()))
}

/// A session id's digest: `s-` and 16 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionDigest(u64);

impl fmt::Display for SessionDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s-{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_is_hidden_and_nothing_else_changes() {
        assert_eq!(
            url("redis://:pw@10.0.0.5:6379/0"),
            "redis://***@10.0.0.5:6379/0"
        );
        assert_eq!(
            url("http://user:p%40ss@h/mcp?a=b@c"),
            "http://***@h/mcp?a=b@c"
        );
        assert_eq!(url("redis://127.0.0.1:6379/0"), "redis://127.0.0.1:6379/0");
        assert_eq!(url("http://h/path@x"), "http://h/path@x");
        assert_eq!(url("memory"), "memory");
    }

    #[test]
    fn a_password_is_found_in_the_user_info_only() {
        assert_eq!(url_password("redis://:pw@10.0.0.5:6379/0"), Some("pw"));
        assert_eq!(url_password("http://user:p%40ss@h/mcp"), Some("p%40ss"));
        assert_eq!(url_password("http://user@h/mcp"), None);
        assert_eq!(url_password("http://h/mcp?a=b:c@d"), None);
        assert_eq!(url_password("redis://:@h:6379/0"), None);
        assert_eq!(url_password("memory"), None);
    }

    #[test]
    fn a_session_digest_is_stable_and_hides_the_id() {
        let id = "sess-abcdefghijklmnop";
        let digest = session(id).to_string();
        assert_eq!(digest, session(id).to_string());
        assert_ne!(digest, session("sess-other").to_string());
        assert!(digest.starts_with("s-") && digest.len() == 18, "{digest}");
        assert!(!digest.contains(id));
    }
}
