//! `auth::jwk::parse_set`: an issuer's JWK Set document read into the public keys that verify
//! tokens.
//!
//! Input `[selector, document…]`. No document panics, and no key of it does when it verifies.
//! A set read agrees with an oracle written from RFC 7517/7518/8037: one key per entry that is
//! an object with a string `kty` and string (or absent) members, not for another use than
//! `sig`, and whole: RSA with `n` and `e`, EC P-256/P-384 with `x` and `y` of the curve's width,
//! OKP Ed25519 with a 32-byte `x` (base64url; trailing `=` tolerated); each with its kid, fitting
//! exactly the algorithms of its kind that its `alg` (if any) names. The same document written
//! out again reads the same. Odd selectors also put a known RSA key (written as the input says:
//! leading zero bytes on `n` or `e`, padding, members around it) into a set: it verifies its
//! RS256 signature over its message, and not another message.
#![no_main]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::auth::jwk::{self, Algorithm, PublicKey};
use serde_json::{json, Value};

/// A 2048-bit RSA public key (generated for this target; its private half is not kept) and its
/// RS256 signature over [`MESSAGE`].
const N: &str = "uVoBVRsfdj7LP56BvbCOmJ_csY0n0onRxuAj0mP7bbZ4dBn_6cChJoVsndIF5-hc67mr7E8e2dxNj3e5u59eJh_RhfeWll5ZO9_nefA0_e_0iIc906_eUxy69R-J1-298XJm8-mws_WG48IBsxiNly6r97KWaY9utUqgzKN3okv72mHbUgqkKfF-zq8-sRf30Kymds_iUILw8g9TYagchvh33BlBuhC3Ee-sKoSBlDHPHaDwnQShx2PjlD4tXdfBk-K2fJemwFG72_hGhqbqLS1hpLMMXIHB3BMJFTgHlyE62YD0OHy2HuigTdhPby2P6HtAJmrkZuskXLPSAA7zHQ";
const E: &str = "AQAB";
const SIGNATURE: &str = "q_q5hZIOSdRfZATtXxuBgyhvbr3aXbFqi_CDUUI_8-IEx0WMfpWo3EBvA0Dw5wZc_SiaClGX1CTqBoobo-iQNdDhAoajiP85HI2K5w8_HPfqCdx0lofQOhhj4ahm9NFNda-8wSB7Wbb8gsV3iAsLQ372Pq-53B6iyTWgcOcBnH2TAApjQeROvbq3u4QcKrSCkbKR00ihl-BGSobJIBg55pA0eYBF_9UVe_Y7zEG9PYYskDUa_ctvPEt8hMkdVju1h14mDtSMypipze48b2v5PS8w0df60g7l1AneFWccvidFOmGepSmehAlDshmq1dfzvO-EhwINcRBbm1GgsKYbxA";
const MESSAGE: &[u8] = b"a message signed with RS256";

fuzz_target!(|data: &[u8]| {
    let Some((&selector, document)) = data.split_first() else {
        return;
    };
    if let Some(keys) = jwk::parse_set(document) {
        let value: Value = serde_json::from_slice(document).expect("a set read is JSON");
        let expected = oracle(&value["keys"]);
        assert_eq!(
            described(&keys),
            expected,
            "{}",
            String::from_utf8_lossy(document)
        );
        let again = jwk::parse_set(&serde_json::to_vec(&value).unwrap()).expect("read again");
        assert_eq!(described(&again), expected, "written out again");
        for key in &keys {
            for alg in Algorithm::ALL {
                let _ = key.verifies(alg, document, document);
                let _ = key.verifies(alg, MESSAGE, &URL_SAFE_NO_PAD.decode(SIGNATURE).unwrap());
            }
        }
    }
    if selector % 2 == 1 {
        known_rsa_key(selector, document);
    }
});

/// What the proxy keeps of a key: its kid and the algorithms it fits.
type Described = (Option<String>, Vec<Algorithm>);

fn described(keys: &[PublicKey]) -> Vec<Described> {
    keys.iter()
        .map(|key| {
            let fits = Algorithm::ALL
                .into_iter()
                .filter(|alg| key.fits(*alg))
                .collect();
            (key.kid.clone(), fits)
        })
        .collect()
}

fn decode(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')).ok()
}

/// The keys of a set's `keys`, by the RFCs.
fn oracle(keys: &Value) -> Vec<Described> {
    let Some(keys) = keys.as_array() else {
        return Vec::new();
    };
    keys.iter().filter_map(one).collect()
}

fn one(key: &Value) -> Option<Described> {
    let key = key.as_object()?;
    let member = |name: &str| -> Result<Option<&str>, ()> {
        match key.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(_) => Err(()),
        }
    };
    let names = ["kid", "use", "alg", "crv", "n", "e", "x", "y"];
    if names.iter().any(|name| member(name).is_err()) || !key.get("kty")?.is_string() {
        return None;
    }
    let get = |name: &str| member(name).ok().flatten();
    if get("use").is_some_and(|usage| usage != "sig") {
        return None;
    }
    let kinds: &[Algorithm] = match (key["kty"].as_str()?, get("crv")) {
        ("RSA", _) => {
            decode(get("n")?)?;
            decode(get("e")?)?;
            &[
                Algorithm::Rs256,
                Algorithm::Rs384,
                Algorithm::Rs512,
                Algorithm::Ps256,
                Algorithm::Ps384,
                Algorithm::Ps512,
            ]
        }
        ("EC", Some(curve @ ("P-256" | "P-384"))) => {
            let width = if curve == "P-256" { 32 } else { 48 };
            let (x, y) = (decode(get("x")?)?, decode(get("y")?)?);
            if x.len() != width || y.len() != width {
                return None;
            }
            if curve == "P-256" {
                &[Algorithm::Es256]
            } else {
                &[Algorithm::Es384]
            }
        }
        ("OKP", Some("Ed25519")) => {
            (decode(get("x")?)?.len() == 32).then_some(())?;
            &[Algorithm::EdDsa]
        }
        _ => return None,
    };
    let fits = kinds
        .iter()
        .copied()
        .filter(|alg| get("alg").is_none_or(|named| named == alg.name()))
        .collect();
    Some((get("kid").map(str::to_owned), fits))
}

/// The known RSA key, written as the input says, verifies its signature and no other message.
fn known_rsa_key(selector: u8, extra: &[u8]) {
    let pad = |bytes: &[u8], zeros: usize| {
        let mut padded = vec![0u8; zeros];
        padded.extend_from_slice(bytes);
        padded
    };
    let n = pad(
        &URL_SAFE_NO_PAD.decode(N).unwrap(),
        usize::from(selector >> 1 & 3),
    );
    let e = pad(
        &URL_SAFE_NO_PAD.decode(E).unwrap(),
        usize::from(selector >> 3 & 3),
    );
    let mut n = URL_SAFE_NO_PAD.encode(n);
    if selector & 32 != 0 {
        n.push_str("==");
    }
    let mut key = json!({ "kty": "RSA", "n": n, "e": URL_SAFE_NO_PAD.encode(e), "use": "sig" });
    if selector & 64 != 0 {
        key["alg"] = "RS256".into();
    }
    // Members of the input's own beside it, when it gives an object of them.
    if let Ok(Value::Object(members)) = serde_json::from_slice::<Value>(extra) {
        for (name, value) in members {
            if !["kty", "n", "e", "use", "alg", "crv", "kid", "x", "y"].contains(&name.as_str()) {
                key[name] = value;
            }
        }
    }
    let set = json!({ "keys": [key] }).to_string();
    let keys = jwk::parse_set(set.as_bytes()).expect("a set");
    assert_eq!(keys.len(), 1, "{set}");
    let signature = URL_SAFE_NO_PAD.decode(SIGNATURE).unwrap();
    assert!(
        keys[0].verifies(Algorithm::Rs256, MESSAGE, &signature),
        "{set}"
    );
    assert!(!keys[0].verifies(Algorithm::Rs256, b"another message", &signature));
    assert!(!keys[0].verifies(Algorithm::Ps256, MESSAGE, &signature));
    assert!(!keys[0].verifies(Algorithm::Rs384, MESSAGE, &signature));
}
