//! An issuer's signing keys (RFC 7517 JSON Web Keys) as public keys that verify a token's
//! signature (RFC 7518 §3): RSA (`RS256/384/512`, `PS256/384/512`), P-256 and P-384
//! (`ES256`, `ES384`) and Ed25519 (`EdDSA`). Keys of other kinds, and keys for encryption,
//! are skipped: a set may hold them.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::signature::{self, UnparsedPublicKey, VerificationAlgorithm};
use serde::Deserialize;

/// A signature algorithm the proxy verifies, as a token's `alg` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Rs256,
    Rs384,
    Rs512,
    Ps256,
    Ps384,
    Ps512,
    Es256,
    Es384,
    EdDsa,
}

impl Algorithm {
    /// Every algorithm, by name.
    pub const ALL: [Algorithm; 9] = [
        Algorithm::Rs256,
        Algorithm::Rs384,
        Algorithm::Rs512,
        Algorithm::Ps256,
        Algorithm::Ps384,
        Algorithm::Ps512,
        Algorithm::Es256,
        Algorithm::Es384,
        Algorithm::EdDsa,
    ];

    pub fn named(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|alg| alg.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Rs256 => "RS256",
            Algorithm::Rs384 => "RS384",
            Algorithm::Rs512 => "RS512",
            Algorithm::Ps256 => "PS256",
            Algorithm::Ps384 => "PS384",
            Algorithm::Ps512 => "PS512",
            Algorithm::Es256 => "ES256",
            Algorithm::Es384 => "ES384",
            Algorithm::EdDsa => "EdDSA",
        }
    }

    fn verification(self) -> &'static dyn VerificationAlgorithm {
        match self {
            Algorithm::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
            Algorithm::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
            Algorithm::Rs512 => &signature::RSA_PKCS1_2048_8192_SHA512,
            Algorithm::Ps256 => &signature::RSA_PSS_2048_8192_SHA256,
            Algorithm::Ps384 => &signature::RSA_PSS_2048_8192_SHA384,
            Algorithm::Ps512 => &signature::RSA_PSS_2048_8192_SHA512,
            Algorithm::Es256 => &signature::ECDSA_P256_SHA256_FIXED,
            Algorithm::Es384 => &signature::ECDSA_P384_SHA384_FIXED,
            Algorithm::EdDsa => &signature::ED25519,
        }
    }
}

/// The kind of key an algorithm needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl Family {
    fn of(alg: Algorithm) -> Family {
        match alg {
            Algorithm::Rs256
            | Algorithm::Rs384
            | Algorithm::Rs512
            | Algorithm::Ps256
            | Algorithm::Ps384
            | Algorithm::Ps512 => Family::Rsa,
            Algorithm::Es256 => Family::P256,
            Algorithm::Es384 => Family::P384,
            Algorithm::EdDsa => Family::Ed25519,
        }
    }
}

/// One public key of the set.
#[derive(Debug, Clone)]
pub struct PublicKey {
    pub kid: Option<String>,
    /// The one algorithm the key is for, when the set says (`alg`).
    alg: Option<String>,
    family: Family,
    /// What `ring` verifies with: an RSA key as DER `RSAPublicKey`, an EC point uncompressed,
    /// an Ed25519 key as its 32 bytes.
    bytes: Vec<u8>,
}

impl PublicKey {
    /// Whether this key may verify a token signed with `alg`.
    pub fn fits(&self, alg: Algorithm) -> bool {
        Family::of(alg) == self.family && self.alg.as_deref().is_none_or(|own| own == alg.name())
    }

    /// Whether `signature` signs `message` under this key with `alg`.
    pub fn verifies(&self, alg: Algorithm, message: &[u8], signature: &[u8]) -> bool {
        self.fits(alg)
            && UnparsedPublicKey::new(alg.verification(), &self.bytes)
                .verify(message, signature)
                .is_ok()
    }
}

/// A JWK as a set spells it; only what is read.
#[derive(Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default, rename = "use")]
    usage: Option<String>,
    #[serde(default)]
    alg: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

#[derive(Deserialize)]
struct JwkSet {
    keys: Vec<serde_json::Value>,
}

/// The signing keys of a JWK Set document; `None` when it is not one.
pub fn parse_set(document: &[u8]) -> Option<Vec<PublicKey>> {
    let set: JwkSet = serde_json::from_slice(document).ok()?;
    Some(
        set.keys
            .into_iter()
            .filter_map(|key| serde_json::from_value::<Jwk>(key).ok())
            .filter_map(public_key)
            .collect(),
    )
}

fn public_key(jwk: Jwk) -> Option<PublicKey> {
    if jwk.usage.as_deref().is_some_and(|usage| usage != "sig") {
        return None;
    }
    let (family, bytes) = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
        ("RSA", _) => (Family::Rsa, rsa_der(&decode(&jwk.n?)?, &decode(&jwk.e?)?)),
        ("EC", Some(curve @ ("P-256" | "P-384"))) => {
            let (family, width) = match curve {
                "P-256" => (Family::P256, 32),
                _ => (Family::P384, 48),
            };
            let (x, y) = (decode(&jwk.x?)?, decode(&jwk.y?)?);
            if x.len() != width || y.len() != width {
                return None;
            }
            (family, [&[4u8][..], &x, &y].concat())
        }
        ("OKP", Some("Ed25519")) => {
            let x = decode(&jwk.x?)?;
            (x.len() == 32).then_some(())?;
            (Family::Ed25519, x)
        }
        _ => return None,
    };
    Some(PublicKey {
        kid: jwk.kid,
        alg: jwk.alg,
        family,
        bytes,
    })
}

fn decode(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')).ok()
}

/// DER `RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }` (RFC 8017).
fn rsa_der(modulus: &[u8], exponent: &[u8]) -> Vec<u8> {
    let mut body = der_integer(modulus);
    body.extend(der_integer(exponent));
    let mut out = vec![0x30];
    out.extend(der_length(body.len()));
    out.extend(body);
    out
}

fn der_integer(magnitude: &[u8]) -> Vec<u8> {
    let trimmed = match magnitude.iter().position(|&b| b != 0) {
        Some(first) => &magnitude[first..],
        None => &[0u8][..],
    };
    let pad = trimmed[0] & 0x80 != 0;
    let mut out = vec![0x02];
    out.extend(der_length(trimmed.len() + usize::from(pad)));
    if pad {
        out.push(0);
    }
    out.extend_from_slice(trimmed);
    out
}

fn der_length(len: usize) -> Vec<u8> {
    if len < 0x80 {
        return vec![len as u8];
    }
    let bytes: Vec<u8> = len
        .to_be_bytes()
        .into_iter()
        .skip_while(|&b| b == 0)
        .collect();
    let mut out = vec![0x80 | bytes.len() as u8];
    out.extend(bytes);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_for_encryption_and_unknown_kinds_are_skipped() {
        let set = br#"{"keys":[
            {"kty":"RSA","use":"enc","n":"AQAB","e":"AQAB"},
            {"kty":"oct","k":"c2VjcmV0"},
            {"kty":"OKP","crv":"Ed25519","kid":"ed","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty":"EC","crv":"P-256","x":"AQ","y":"AQ"}
        ]}"#;
        let keys = parse_set(set).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("ed"));
        assert!(keys[0].fits(Algorithm::EdDsa));
        assert!(!keys[0].fits(Algorithm::Rs256));
        assert!(parse_set(b"not json").is_none());
    }

    #[test]
    fn rsa_integers_are_positive_der() {
        assert_eq!(der_integer(&[0x80]), vec![2, 2, 0, 0x80]);
        assert_eq!(der_integer(&[0, 0, 1]), vec![2, 1, 1]);
        assert_eq!(der_length(300), vec![0x82, 1, 44]);
    }

    #[test]
    fn an_rfc_8037_ed25519_signature_verifies() {
        // RFC 8037 Appendix A.4.
        let set = br#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#;
        let key = &parse_set(set).unwrap()[0];
        let message = b"eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc";
        let signature = decode("hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg").unwrap();
        assert!(key.verifies(Algorithm::EdDsa, message, &signature));
        assert!(!key.verifies(Algorithm::EdDsa, b"another message", &signature));
    }
}
