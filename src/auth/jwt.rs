//! A JWT access token (RFC 9068, RFC 7519) taken apart: its header, its claims, and the
//! signed part its signature covers. Checking the signature against the issuer's keys and the
//! claims against the configuration is [`super::Authority`]'s job.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;

use super::jwk::Algorithm;
use super::TokenError;

/// A compact JWS, split.
pub struct Jws<'t> {
    pub alg: Algorithm,
    pub kid: Option<String>,
    /// `header.payload`, what the signature signs.
    pub signed: &'t [u8],
    pub signature: Vec<u8>,
    pub claims: Claims,
}

/// What a token says, as far as the proxy reads it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Claims {
    #[serde(default)]
    pub iss: Option<String>,
    #[serde(default)]
    pub sub: Option<String>,
    #[serde(default)]
    pub aud: Audience,
    #[serde(default)]
    pub exp: Option<f64>,
    #[serde(default)]
    pub nbf: Option<f64>,
    #[serde(default)]
    pub iat: Option<f64>,
    /// Space-separated scopes (RFC 8693 §4.2, RFC 9068).
    #[serde(default)]
    pub scope: Option<String>,
    /// Scopes as a list (Azure AD, Okta).
    #[serde(default)]
    pub scp: Option<Scopes>,
}

/// `aud`: one string or several.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl Audience {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Audience::None => Vec::new(),
            Audience::One(one) => vec![one],
            Audience::Many(many) => many,
        }
    }
}

/// `scp`: a list, or one space-separated string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Scopes {
    Spaced(String),
    Listed(Vec<String>),
}

impl Claims {
    /// Every scope the token grants.
    pub fn scopes(&self) -> Vec<String> {
        let spaced = |text: &str| -> Vec<String> {
            text.split_ascii_whitespace().map(str::to_owned).collect()
        };
        match (&self.scope, &self.scp) {
            (Some(scope), _) => spaced(scope),
            (None, Some(Scopes::Spaced(scp))) => spaced(scp),
            (None, Some(Scopes::Listed(scp))) => scp.clone(),
            (None, None) => Vec::new(),
        }
    }
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    crit: Option<serde_json::Value>,
}

/// Whether `token` has the shape of a compact JWS (three base64url parts); anything else is
/// an opaque token, for introspection.
pub fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
}

/// Splits and decodes `token`; `allowed` are the algorithms the configuration accepts.
pub fn parse<'t>(token: &'t str, allowed: &[Algorithm]) -> Result<Jws<'t>, TokenError> {
    let mut parts = token.splitn(3, '.');
    let (Some(header), Some(payload), Some(signature)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let header: Header = decode_json(header)?;
    if header.crit.is_some() {
        // No extension is understood, so none may be critical (RFC 7515 §4.1.11).
        return Err(TokenError::Malformed);
    }
    let alg = Algorithm::named(&header.alg)
        .filter(|alg| allowed.contains(alg))
        .ok_or(TokenError::Algorithm(header.alg))?;
    let claims: Claims = decode_json(payload)?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| TokenError::Malformed)?;
    let signed_len = token.len() - token.rsplit('.').next().map_or(0, str::len) - 1;
    Ok(Jws {
        alg,
        kid: header.kid,
        signed: &token.as_bytes()[..signed_len],
        signature,
        claims,
    })
}

fn decode_json<T: for<'de> Deserialize<'de>>(part: &str) -> Result<T, TokenError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| TokenError::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(value: &str) -> String {
        URL_SAFE_NO_PAD.encode(value)
    }

    #[test]
    fn the_parts_are_read_and_the_signed_part_kept() {
        let token = format!(
            "{}.{}.{}",
            encoded(r#"{"alg":"RS256","kid":"k1","typ":"at+jwt"}"#),
            encoded(r#"{"iss":"i","sub":"s","aud":["a","b"],"exp":10,"scp":["x","y"]}"#),
            encoded("sig"),
        );
        let jws = parse(&token, &[Algorithm::Rs256]).unwrap();
        assert_eq!(jws.kid.as_deref(), Some("k1"));
        assert_eq!(jws.signature, b"sig");
        assert_eq!(jws.signed, token.rsplit_once('.').unwrap().0.as_bytes());
        assert_eq!(jws.claims.aud.clone().into_vec(), ["a", "b"]);
        assert_eq!(jws.claims.scopes(), ["x", "y"]);
    }

    #[test]
    fn none_hmac_and_algorithms_not_configured_are_refused() {
        for alg in ["none", "HS256", "ES256"] {
            let token = format!(
                "{}.{}.",
                encoded(&format!(r#"{{"alg":"{alg}"}}"#)),
                encoded("{}")
            );
            assert!(matches!(
                parse(&token, &[Algorithm::Rs256]),
                Err(TokenError::Algorithm(named)) if named == alg
            ));
        }
        assert!(matches!(parse("a.b", &[]), Err(TokenError::Malformed)));
        let critical = format!(
            "{}.{}.",
            encoded(r#"{"alg":"RS256","crit":["x"]}"#),
            encoded("{}")
        );
        assert!(matches!(
            parse(&critical, &[Algorithm::Rs256]),
            Err(TokenError::Malformed)
        ));
    }
}
