//! Session ids (≥128 bits from the OS CSPRNG, base64url) and principals (who owns a session).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// Random bytes in a session id: 144 bits, 24 characters of base64url.
const ID_BYTES: usize = 18;

/// Mints a session id. Never derived from anything a client sends.
pub fn mint() -> String {
    let mut bytes = [0u8; ID_BYTES];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether `id` could be one of ours; anything else is unknown without a lookup.
pub fn is_well_formed(id: &str) -> bool {
    id.len() == 24
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Who created a session: a digest of the credentials the client presented, never the
/// credentials themselves. Requests from another principal find no session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(String);

impl Principal {
    pub fn anonymous() -> Principal {
        Principal("anonymous".into())
    }

    /// The principal for a credential (an `Authorization` header value).
    pub fn from_credential(credential: &[u8]) -> Principal {
        let digest = Sha256::digest(credential);
        Principal(format!("sha256:{}", hex(&digest[..16])))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_unique_and_well_formed() {
        let ids: HashSet<String> = (0..1000).map(|_| mint()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| is_well_formed(id)));
        assert!(!is_well_formed("abc"));
        assert!(!is_well_formed("aaaaaaaaaaaaaaaaaaaaaaa="));
    }

    #[test]
    fn principals_hide_credentials_and_tell_them_apart() {
        let a = Principal::from_credential(b"Bearer alpha");
        let b = Principal::from_credential(b"Bearer beta");
        assert_ne!(a, b);
        assert_eq!(a, Principal::from_credential(b"Bearer alpha"));
        assert!(!a.as_str().contains("alpha"));
    }
}
