//! The proxy's keys, one per purpose: the replica hop's signatures, `requestState`, the
//! data-layer `state`, and the digests that stand for session ids in logs. Replicas derive them from the cluster secret (HKDF-SHA256, RFC 5869,
//! each with its own label), so no key does two jobs and the secret itself is never used, sent
//! or handed on; a lone proxy mints them at start.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type Signer = Hmac<Sha256>;

/// The shortest cluster secret accepted.
pub const MIN_SECRET_BYTES: usize = 32;

/// How a cluster secret is made.
pub const MAKE_A_SECRET: &str = "openssl rand -hex 32";

/// One purpose's key (HMAC-SHA256).
#[derive(Clone)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(…)")
    }
}

impl Default for Key {
    fn default() -> Key {
        Key::minted()
    }
}

impl Key {
    /// A random key, from the operating system's CSPRNG.
    pub fn minted() -> Key {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).expect("the operating system's random source failed");
        Key(key)
    }

    /// The MAC of `parts`, each ended by a zero byte, a zero or one byte within a part written
    /// as two (`01 01`, `01 02`): no two lists of parts sign alike, and a part without either
    /// signs as its bytes.
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        self.signer(parts).finalize().into_bytes().into()
    }

    /// Whether `tag` is the MAC of `parts` (or its first bytes, at least 16), compared in
    /// constant time.
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        tag.len() >= 16 && self.signer(parts).verify_truncated_left(tag).is_ok()
    }

    /// A short tag over `parts` (144 bits, URL-safe base64): proves this proxy made what it
    /// is attached to.
    pub fn tag(&self, parts: &[&str]) -> String {
        let parts: Vec<&[u8]> = parts.iter().map(|part| part.as_bytes()).collect();
        URL_SAFE_NO_PAD.encode(&self.mac(&parts)[..18])
    }

    /// Whether `tag` is [`Key::tag`] of `parts`, compared in constant time.
    pub fn verify_tag(&self, parts: &[&str], tag: &str) -> bool {
        let parts: Vec<&[u8]> = parts.iter().map(|part| part.as_bytes()).collect();
        URL_SAFE_NO_PAD
            .decode(tag)
            .is_ok_and(|tag| tag.len() == 18 && self.verify(&parts, &tag))
    }

    fn signer(&self, parts: &[&[u8]]) -> Signer {
        let mut signer = Signer::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        for part in parts {
            if !part.iter().any(|&byte| byte <= 1) {
                signer.update(part);
            } else {
                for &byte in part.iter() {
                    match byte {
                        0 => signer.update(&[1, 1]),
                        1 => signer.update(&[1, 2]),
                        other => signer.update(&[other]),
                    }
                }
            }
            signer.update(&[0]);
        }
        signer
    }
}

/// Every key the proxy signs with.
#[derive(Debug, Clone)]
pub struct Keys {
    /// Signs and checks the internal hop between replicas.
    pub hop: Key,
    /// Signs `requestState` (2026-07-28 `input_required`).
    pub request_state: Key,
    /// Signs the `state` of data-layer sessions.
    pub layer_state: Key,
    /// Makes the digests that stand for session ids in logs and spans.
    pub log_digest: Key,
}

impl Keys {
    /// Keys of this process alone.
    pub fn minted() -> Keys {
        Keys {
            hop: Key::minted(),
            request_state: Key::minted(),
            layer_state: Key::minted(),
            log_digest: Key::minted(),
        }
    }

    /// The keys every replica sharing `secret` derives alike.
    pub fn derived(secret: &str) -> Keys {
        let root = Signer::new_from_slice(b"mcp-session-proxy cluster secret")
            .expect("HMAC takes a key of any length")
            .chain_update(secret.as_bytes())
            .finalize()
            .into_bytes();
        let expand = |label: &str| {
            let block = Signer::new_from_slice(&root)
                .expect("HMAC takes a key of any length")
                .chain_update(label.as_bytes())
                .chain_update([1u8])
                .finalize()
                .into_bytes();
            Key(block.into())
        };
        Keys {
            hop: expand("mcp-session-proxy hop"),
            request_state: expand("mcp-session-proxy requestState"),
            layer_state: expand("mcp-session-proxy data-layer state"),
            log_digest: expand("mcp-session-proxy log digest"),
        }
    }

    /// From the cluster secret when there is one, else minted.
    pub fn from_secret(secret: &str) -> Keys {
        match secret.is_empty() {
            true => Keys::minted(),
            false => Keys::derived(secret),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn each_purpose_has_its_own_key_and_replicas_derive_the_same_ones() {
        let (a, b) = (Keys::derived(SECRET), Keys::derived(SECRET));
        let tag = |key: &Key| key.tag(&["x"]);
        assert_eq!(tag(&a.hop), tag(&b.hop));
        assert_eq!(tag(&a.request_state), tag(&b.request_state));
        assert_ne!(tag(&a.hop), tag(&a.request_state));
        assert_ne!(tag(&a.request_state), tag(&a.layer_state));
        assert_ne!(tag(&a.hop), tag(&Keys::derived("another secret").hop));
        assert_ne!(tag(&Keys::minted().hop), tag(&Keys::minted().hop));
    }

    #[test]
    fn a_tag_verifies_only_over_its_own_parts() {
        let key = Keys::derived(SECRET).layer_state;
        let tag = key.tag(&["a", "b"]);
        assert!(key.verify_tag(&["a", "b"], &tag));
        assert!(!key.verify_tag(&["ab"], &tag), "parts are delimited");
        assert!(!key.verify_tag(&["a", "c"], &tag));
        assert!(!key.verify_tag(&["a", "b"], &tag[..10]), "no short tags");
        assert!(!key.verify_tag(&["a", "b"], "not base64!"));
    }

    /// Found by the `hop_headers` fuzz target: a zero byte within a part read as the end of
    /// it, so `["a\0", "b"]` signed like `["a", "\0b"]`.
    #[test]
    fn parts_holding_zero_or_one_bytes_are_still_delimited() {
        let key = Keys::derived(SECRET).hop;
        let sign = |parts: &[&[u8]]| key.mac(parts);
        assert_ne!(sign(&[b"a\0", b"b"]), sign(&[b"a", b"\0b"]));
        assert_ne!(sign(&[b"a\x01\x01"]), sign(&[b"a\0"]));
        assert_ne!(sign(&[b"a\x01\x02"]), sign(&[b"a\x01"]));
        // A part without either signs as its bytes, as before: what was signed still verifies.
        let mut plain = Signer::new_from_slice(&key.0).unwrap();
        plain.update(b"a\0b\0");
        let plain: [u8; 32] = plain.finalize().into_bytes().into();
        assert_eq!(sign(&[b"a", b"b"]), plain);
    }

    /// RFC 5869 A.1 would need a salt; this checks the construction against HMAC directly.
    #[test]
    fn derivation_is_hkdf_sha256_with_one_block() {
        let prk = Signer::new_from_slice(b"mcp-session-proxy cluster secret")
            .unwrap()
            .chain_update(SECRET.as_bytes())
            .finalize()
            .into_bytes();
        let okm = Signer::new_from_slice(&prk)
            .unwrap()
            .chain_update(b"mcp-session-proxy hop\x01")
            .finalize()
            .into_bytes();
        assert_eq!(Keys::derived(SECRET).hop.0, <[u8; 32]>::from(okm));
    }
}
