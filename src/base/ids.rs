//! Session ids (≥128 bits from the OS CSPRNG, base64url; with replicas, after the name of the
//! replica that created the session, so any replica can find its owner without the shared
//! store) and principals (who owns a session).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// Random bytes in a session id: 144 bits, 24 characters of base64url.
const ID_BYTES: usize = 18;

/// Random bytes in a replica name minted at start: 64 bits, 11 characters of base64url.
const NODE_BYTES: usize = 8;

/// Longest replica name.
pub const MAX_NODE_NAME: usize = 32;

/// Mints a session id. Never derived from anything a client sends.
pub fn mint() -> String {
    random(ID_BYTES)
}

/// Mints a session id that names the replica creating it: `<node>.<random>`.
pub fn mint_at(node: &str) -> String {
    format!("{node}.{}", mint())
}

/// Mints a replica name (when none is configured).
pub fn mint_node() -> String {
    random(NODE_BYTES)
}

fn random(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).expect("the operating system's random source failed");
    URL_SAFE_NO_PAD.encode(buffer)
}

/// Whether `name` can name a replica (and so appear in session ids): 1 to 32 letters, digits,
/// `-` and `_`.
pub fn is_node_name(name: &str) -> bool {
    (1..=MAX_NODE_NAME).contains(&name.len()) && name.bytes().all(is_base64url)
}

/// Whether `id` could be one of ours; anything else is unknown without a lookup.
pub fn is_well_formed(id: &str) -> bool {
    let random = match id.split_once('.') {
        Some((node, random)) if is_node_name(node) => random,
        Some(_) => return false,
        None => id,
    };
    random.len() == 24 && random.bytes().all(is_base64url)
}

/// The replica that created session `id`, when the id names one.
pub fn node_of(id: &str) -> Option<&str> {
    id.split_once('.')
        .map(|(node, _)| node)
        .filter(|_| is_well_formed(id))
}

fn is_base64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// Who created a session: a digest of the credentials the client presented, never the
/// credentials themselves. Requests from another principal find no session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(String);

impl Default for Principal {
    fn default() -> Principal {
        Principal::anonymous()
    }
}

impl Principal {
    pub fn anonymous() -> Principal {
        Principal("anonymous".into())
    }

    /// The principal for a credential (an `Authorization` header value).
    pub fn from_credential(credential: &[u8]) -> Principal {
        let digest = Sha256::digest(credential);
        Principal(format!("sha256:{}", hex(&digest[..16])))
    }

    /// The principal an OAuth access token names: its issuer and subject, whatever token
    /// (refreshed, exchanged) names them.
    pub fn from_subject(issuer: &str, subject: &str) -> Principal {
        let digest = Sha256::new()
            .chain_update(issuer.trim_end_matches('/').as_bytes())
            .chain_update([0])
            .chain_update(subject.as_bytes())
            .finalize();
        Principal(format!("sub:{}", hex(&digest[..16])))
    }

    /// The principal a client certificate names: its subject (RFC 4514), which the CA of the
    /// listener's client certificates vouches for.
    pub fn from_certificate(subject: &str) -> Principal {
        let digest = Sha256::new()
            .chain_update(b"x509 subject\0")
            .chain_update(subject.as_bytes())
            .finalize();
        Principal(format!("x509:{}", hex(&digest[..16])))
    }

    /// A principal as the shared store and the internal hop carry it (`as_str`).
    pub fn from_stored(stored: &str) -> Principal {
        Principal(stored.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
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
    fn ids_can_name_the_replica_that_made_them() {
        let node = mint_node();
        assert!(is_node_name(&node), "{node}");
        let id = mint_at(&node);
        assert!(is_well_formed(&id), "{id}");
        assert_eq!(node_of(&id), Some(node.as_str()));
        assert_eq!(node_of(&mint()), None);
        assert_eq!(node_of("a.b"), None, "not one of ours");
        assert!(!is_well_formed(&format!("a.b.{}", mint())));
        assert!(!is_well_formed(&format!(".{}", mint())));
        assert!(!is_node_name(&"x".repeat(33)));
        assert!(!is_node_name("a.b") && !is_node_name(""));
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
