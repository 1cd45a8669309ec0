//! What stands for a bearer token in the proxy's maps: its HMAC-SHA256 under a key minted at
//! start (and never used for anything else), so no map holds a client's token in clear and no
//! one outside the process can make two tokens share an entry.

use crate::base::keys::Key;

/// A token's digest: equal for equal tokens (and the same purpose), distinct otherwise.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenDigest([u8; 32]);

impl std::fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenDigest(…)")
    }
}

/// Makes the digests of one proxy.
#[derive(Debug, Default)]
pub struct Digests(Key);

impl Digests {
    /// `token`, as verified tokens and inactive ones are kept.
    pub fn of_token(&self, token: &str) -> TokenDigest {
        TokenDigest(self.0.mac(&[b"bearer token", token.as_bytes()]))
    }

    /// `token` exchanged for a server (`parts` name it: resource, audience, scope), as the
    /// exchanged tokens are kept: one entry per client token and server.
    pub fn of_exchange(&self, token: &str, parts: &[&str]) -> TokenDigest {
        let mut all: Vec<&[u8]> = vec![b"token exchange", token.as_bytes()];
        all.extend(parts.iter().map(|part| part.as_bytes()));
        TokenDigest(self.0.mac(&all))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_token_and_purpose_has_its_own_digest() {
        let digests = Digests::default();
        assert_eq!(digests.of_token("a"), digests.of_token("a"));
        assert_ne!(digests.of_token("a"), digests.of_token("b"));
        assert_ne!(
            digests.of_exchange("a", &["https://s/mcp"]),
            digests.of_exchange("a", &["https://t/mcp"])
        );
        assert_ne!(
            digests.of_exchange("a", &["x", ""]),
            digests.of_exchange("a", &["", "x"]),
            "parts are kept apart"
        );
        assert_ne!(
            Digests::default().of_token("a"),
            digests.of_token("a"),
            "a key of each proxy's own"
        );
        assert_eq!(format!("{:?}", digests.of_token("a")), "TokenDigest(…)");
    }
}
