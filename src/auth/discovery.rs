//! Where an issuer keeps its keys and endpoints: its metadata, by OAuth 2.0 Authorization
//! Server Metadata (RFC 8414) first, then OpenID Connect Discovery 1.0.

use serde::Deserialize;

use super::fetch::{FetchError, Fetcher};

/// What the proxy reads of an issuer's metadata.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Endpoints {
    pub issuer: String,
    #[serde(default)]
    pub jwks_uri: Option<String>,
    #[serde(default)]
    pub introspection_endpoint: Option<String>,
    #[serde(default)]
    pub token_endpoint: Option<String>,
}

/// Why an issuer's metadata could not be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DiscoveryError {
    #[error("no metadata at {rfc8414}: {cause}; none at {oidc} either")]
    NotFound {
        rfc8414: String,
        oidc: String,
        cause: FetchError,
    },
    /// RFC 8414 §3.3: a document naming another issuer is not this issuer's.
    #[error("the metadata at {url} names the issuer {named:?}, not {issuer:?}")]
    OtherIssuer {
        url: String,
        named: String,
        issuer: String,
    },
}

/// The well-known URLs of `issuer`'s metadata: RFC 8414 inserts the well-known path before the
/// issuer's path; OpenID Connect appends it.
pub fn metadata_urls(issuer: &str) -> (String, String) {
    let trimmed = issuer.trim_end_matches('/');
    let authority_end = trimmed
        .find("://")
        .map(|at| at + 3)
        .and_then(|start| trimmed[start..].find('/').map(|slash| start + slash))
        .unwrap_or(trimmed.len());
    let (origin, path) = trimmed.split_at(authority_end);
    (
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{trimmed}/.well-known/openid-configuration"),
    )
}

/// Fetches `issuer`'s metadata.
pub async fn discover(fetcher: &Fetcher, issuer: &str) -> Result<Endpoints, DiscoveryError> {
    let (rfc8414, oidc) = metadata_urls(issuer);
    let (url, endpoints) = match fetcher.get_json::<Endpoints>(&rfc8414).await {
        Ok(found) => (rfc8414, found),
        Err(cause) => match fetcher.get_json::<Endpoints>(&oidc).await {
            Ok(found) => (oidc, found),
            Err(_) => {
                return Err(DiscoveryError::NotFound {
                    rfc8414,
                    oidc,
                    cause,
                })
            }
        },
    };
    if endpoints.issuer.trim_end_matches('/') != issuer.trim_end_matches('/') {
        return Err(DiscoveryError::OtherIssuer {
            url,
            named: endpoints.issuer,
            issuer: issuer.to_owned(),
        });
    }
    Ok(endpoints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_well_known_path_goes_before_the_issuers_path_or_after_it() {
        assert_eq!(
            metadata_urls("http://as.example/tenant1"),
            (
                "http://as.example/.well-known/oauth-authorization-server/tenant1".into(),
                "http://as.example/tenant1/.well-known/openid-configuration".into()
            )
        );
        assert_eq!(
            metadata_urls("http://127.0.0.1:9000/").0,
            "http://127.0.0.1:9000/.well-known/oauth-authorization-server"
        );
    }
}
