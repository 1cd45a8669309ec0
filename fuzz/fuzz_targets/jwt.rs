//! `auth::jwt::parse` and the signature check the proxy makes of a JWT access token
//! (`auth::keys::KeyCache::verify`, with the issuer's JWK Set from `auth::jwk::parse_set`).
//!
//! Input `[mode, …]`. Mode even, `[mode, token… 0x00 JWK Set…]`: any token and any key set;
//! nothing panics; a token that parses has three parts, its signed part is everything before
//! the last dot, its signature re-encodes to the text it came from (no second spelling of one
//! signature), it parses alike when only its own algorithm is allowed and is refused by name
//! when that one is not; and if some key verifies it, the same token with one signature bit
//! flipped or one signed byte changed does not verify. Mode odd: a token signed by this target
//! (Ed25519 from an input seed, or a fixed P-256 key) over input claims, against a set holding
//! the signer's key or not, decoys of the same kid or none, with or without its kid: it
//! verifies exactly when the key the rules pick (the kid's, or the only one that fits) is the
//! signer's; what it verifies to are the claims that were signed; a flipped signature bit, a
//! changed claim, a lying `alg` or another key never verify.
#![no_main]

use std::future::Future;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::auth::jwk::{self, Algorithm};
use mcp_session_proxy::auth::jwt;
use mcp_session_proxy::auth::keys::{KeyCache, KeyMiss, KeyPolicy};
use mcp_session_proxy::auth::TokenError;
use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 2 {
        0 => any_token(rest),
        _ => signed_here(mode, rest),
    }
});

/// The key set's check, as the proxy runs it: a cache that fetches `set` (every time: no age).
fn verify(
    set: &[u8],
    jws: &jwt::Jws<'_>,
    signed: &[u8],
    signature: &[u8],
) -> Result<bool, KeyMiss> {
    let cache = KeyCache::new(KeyPolicy {
        refetch_floor: Duration::ZERO,
        max_age: Duration::ZERO,
        stale_grace: Duration::ZERO,
    });
    let document = set.to_vec();
    let fetch =
        move || async move { Ok::<_, mcp_session_proxy::auth::keys::KeySetError>(document) };
    let check = cache.verify(jws.alg, jws.kid.as_deref(), signed, signature, fetch);
    // Nothing in it waits: the fetch is ready, the lock free.
    let mut check = std::pin::pin!(check);
    match check.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(verdict) => verdict.map(|verdict| verdict.genuine),
        Poll::Pending => panic!("the key check waited on nothing"),
    }
}

fn any_token(data: &[u8]) {
    let (token, set) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b"{\"keys\":[]}"[..]),
    };
    let Ok(token) = std::str::from_utf8(token) else {
        return;
    };
    let _ = jwk::parse_set(set);
    let Ok(jws) = jwt::parse(token, &Algorithm::ALL) else {
        return;
    };
    // Three parts; the signed part is what precedes the last dot.
    assert!(jwt::looks_like_jwt(token), "{token}");
    let (signed, signature_text) = token.rsplit_once('.').unwrap();
    assert_eq!(jws.signed, signed.as_bytes());
    assert_eq!(
        URL_SAFE_NO_PAD.encode(&jws.signature),
        signature_text,
        "one spelling"
    );
    // The allowed algorithms decide alone.
    let alone = jwt::parse(token, &[jws.alg]).expect("parses with its own algorithm");
    assert_eq!(alone.alg, jws.alg);
    let others: Vec<Algorithm> = Algorithm::ALL
        .into_iter()
        .filter(|a| *a != jws.alg)
        .collect();
    assert!(matches!(
        jwt::parse(token, &others),
        Err(TokenError::Algorithm(named)) if named == jws.alg.name()
    ));
    let _ = jws.claims.scopes();
    let _ = jws.claims.aud.clone().into_vec();
    if verify(set, &jws, jws.signed, &jws.signature) == Ok(true) {
        tampered_never_verify(set, &jws, data.len());
    }
}

/// A token that verifies stops verifying with any signature bit flipped or signed byte changed.
fn tampered_never_verify(set: &[u8], jws: &jwt::Jws<'_>, seed: usize) {
    let bits = jws.signature.len() * 8;
    for bit in [0, seed % bits.max(1), bits.saturating_sub(1)] {
        let mut signature = jws.signature.clone();
        if signature.is_empty() {
            break;
        }
        signature[bit / 8] ^= 1 << (bit % 8);
        assert_ne!(
            verify(set, jws, jws.signed, &signature),
            Ok(true),
            "bit {bit}"
        );
    }
    let mut signed = jws.signed.to_vec();
    let at = seed % signed.len().max(1);
    if let Some(byte) = signed.get_mut(at) {
        *byte ^= 0x01;
        assert_ne!(
            verify(set, jws, &signed, &jws.signature),
            Ok(true),
            "byte {at}"
        );
    }
    let mut truncated = jws.signature.clone();
    truncated.pop();
    assert_ne!(verify(set, jws, jws.signed, &truncated), Ok(true));
}

/// A fixed P-256 key (generated once per run; any key does).
fn p256() -> &'static EcdsaKeyPair {
    static KEY: OnceLock<EcdsaKeyPair> = OnceLock::new();
    KEY.get_or_init(|| {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap()
    })
}

/// One of this target's signing keys.
enum Signer {
    Ed25519(Ed25519KeyPair),
    P256,
}

impl Signer {
    fn ed25519(seed: &[u8]) -> Signer {
        let mut bytes = [0u8; 32];
        for (at, b) in seed.iter().enumerate() {
            bytes[at % 32] ^= b;
        }
        Signer::Ed25519(Ed25519KeyPair::from_seed_unchecked(&bytes).unwrap())
    }

    fn alg(&self) -> Algorithm {
        match self {
            Signer::Ed25519(_) => Algorithm::EdDsa,
            Signer::P256 => Algorithm::Es256,
        }
    }

    fn sign(&self, message: &[u8]) -> Vec<u8> {
        match self {
            Signer::Ed25519(key) => key.sign(message).as_ref().to_vec(),
            Signer::P256 => p256()
                .sign(&ring::rand::SystemRandom::new(), message)
                .unwrap()
                .as_ref()
                .to_vec(),
        }
    }

    /// The public key as a JWK (with `kid` and `alg` when given).
    fn jwk(&self, kid: Option<&str>, alg: Option<&str>) -> Value {
        let mut jwk = match self {
            Signer::Ed25519(key) => json!({
                "kty": "OKP", "crv": "Ed25519",
                "x": URL_SAFE_NO_PAD.encode(key.public_key().as_ref()),
            }),
            Signer::P256 => {
                let point = p256().public_key().as_ref();
                json!({
                    "kty": "EC", "crv": "P-256",
                    "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                    "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
                })
            }
        };
        if let Some(kid) = kid {
            jwk["kid"] = kid.into();
        }
        if let Some(alg) = alg {
            jwk["alg"] = alg.into();
        }
        jwk
    }
}

/// A cursor over the input.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let Some((&first, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        first
    }

    fn text(&mut self) -> String {
        let len = usize::from(self.byte() % 24).min(self.0.len());
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8_lossy(taken).into_owned()
    }
}

fn signed_here(mode: u8, data: &[u8]) {
    let mut input = Input(data);
    let signer = match mode & 2 {
        0 => Signer::ed25519(&[input.byte(), input.byte(), input.byte(), input.byte()]),
        _ => Signer::P256,
    };
    let shape = input.byte();
    let kid = (shape & 1 != 0).then(|| input.text());
    let subject = input.text();
    let scope = input.text();
    let audience = input.text();
    let header = json!({ "alg": signer.alg().name(), "typ": "at+jwt", "kid": kid });
    let claims = json!({ "iss": "https://issuer.example", "sub": subject, "aud": audience,
                         "scope": scope, "exp": 4102444800u64 });
    let encode = |value: &Value| URL_SAFE_NO_PAD.encode(value.to_string());
    let signed = format!("{}.{}", encode(&header), encode(&claims));
    let signature = signer.sign(signed.as_bytes());
    let token = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(&signature));

    // The set: the signer's key or not, a decoy (another Ed25519 key, the P-256 key when
    // the signer is not it), with this kid, another or none, before or after it.
    let decoy = match signer {
        Signer::P256 => Signer::ed25519(b"decoy"),
        Signer::Ed25519(_) => match shape & 64 {
            0 => Signer::ed25519(&[input.byte() ^ 0x5a, 1, 2, 3, 4]),
            _ => Signer::P256,
        },
    };
    let other_kid = format!("{}-other", kid.as_deref().unwrap_or_default());
    let signer_kid = match shape & 6 {
        0 => None,
        2 => Some(other_kid.as_str()),
        _ => kid.as_deref(),
    };
    let decoy_kid = match shape & 24 {
        0 => None,
        8 => Some(other_kid.as_str()),
        _ => kid.as_deref(),
    };
    // A key the set says is for another algorithm does not fit.
    let signer_alg = (shape & 128 != 0).then_some("RS256");
    let mut keys = Vec::new();
    let with_signer = shape & 32 == 0 || input.byte() & 1 == 0;
    let decoy_first = input.byte() & 1 == 0;
    if decoy_first {
        keys.push(decoy.jwk(decoy_kid, None));
    }
    if with_signer {
        keys.push(signer.jwk(signer_kid, signer_alg));
    }
    if !decoy_first {
        keys.push(decoy.jwk(decoy_kid, None));
    }
    let set = json!({ "keys": keys }).to_string().into_bytes();

    // The key the rules pick: the first of the token's kid that fits, or the only one that fits.
    let fits = |jwk: &Value| {
        let family = match (jwk["kty"].as_str(), signer.alg()) {
            (Some("OKP"), Algorithm::EdDsa) | (Some("EC"), Algorithm::Es256) => true,
            _ => false,
        };
        family
            && jwk["alg"]
                .as_str()
                .is_none_or(|alg| alg == signer.alg().name())
    };
    let fitting: Vec<&Value> = keys
        .iter()
        .filter(|jwk| fits(jwk))
        .filter(|jwk| kid.is_none() || jwk["kid"].as_str() == kid.as_deref())
        .collect();
    let picked = match (&kid, fitting.as_slice()) {
        (Some(_), [first, ..]) => Some(*first),
        (None, [only]) => Some(*only),
        _ => None,
    };
    let expected = match picked {
        None => Err(KeyMiss::Unknown),
        Some(jwk) => Ok(*jwk == signer.jwk(signer_kid, signer_alg)),
    };

    let jws = jwt::parse(&token, &Algorithm::ALL).expect("a token this target signed parses");
    assert_eq!(jws.claims.sub.as_deref(), Some(subject.as_str()));
    assert_eq!(
        jws.claims.scopes(),
        scope.split_ascii_whitespace().collect::<Vec<_>>()
    );
    assert_eq!(jws.claims.aud.clone().into_vec(), [audience.clone()]);
    assert_eq!(jws.kid, kid);
    let verified = verify(&set, &jws, jws.signed, &jws.signature);
    assert_eq!(
        verified,
        expected,
        "{token} against {}",
        String::from_utf8_lossy(&set)
    );

    // Never with anything changed.
    let mut flipped = jws.signature.clone();
    let bit = usize::from(input.byte()) % (flipped.len() * 8);
    flipped[bit / 8] ^= 1 << (bit % 8);
    assert_ne!(
        verify(&set, &jws, jws.signed, &flipped),
        Ok(true),
        "flipped bit {bit}"
    );
    let changed = json!({ "iss": "https://issuer.example", "sub": format!("{subject}!"),
                          "aud": audience, "scope": scope, "exp": 4102444800u64 });
    let forged = format!("{}.{}", encode(&header), encode(&changed));
    assert_ne!(
        verify(&set, &jws, forged.as_bytes(), &jws.signature),
        Ok(true),
        "claims"
    );
    let lying = match signer.alg() {
        Algorithm::EdDsa => Algorithm::Es256,
        _ => Algorithm::EdDsa,
    };
    let lied = json!({ "alg": lying.name(), "typ": "at+jwt", "kid": kid });
    let lied = format!(
        "{}.{}.{}",
        encode(&lied),
        encode(&claims),
        URL_SAFE_NO_PAD.encode(&signature)
    );
    let lied = jwt::parse(&lied, &Algorithm::ALL).expect("parses");
    assert_ne!(
        verify(&set, &lied, lied.signed, &lied.signature),
        Ok(true),
        "alg {lying:?}"
    );
    let stranger = Signer::ed25519(b"a stranger's key");
    let strangers = json!({ "keys": [stranger.jwk(kid.as_deref(), None)] }).to_string();
    assert_ne!(
        verify(strangers.as_bytes(), &jws, jws.signed, &jws.signature),
        Ok(true)
    );
}
