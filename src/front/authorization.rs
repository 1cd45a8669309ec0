//! The resource server's face (MCP authorization; RFC 9728, RFC 6750): with `[auth]`, every
//! request to a served path carries a bearer token the issuer signed for this resource, or is
//! refused with a challenge; the token's (issuer, subject) is the principal its sessions are
//! bound to. Each served resource (`/mcp`, `/sse` and every gateway path) publishes its
//! Protected Resource Metadata at `/.well-known/oauth-protected-resource` + its path.

use std::sync::Arc;

use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use serde_json::json;

use super::guard::Admitted;
use super::rejection::Rejection;
use super::{App, Router};
use crate::auth::{Authority, TokenError, Verified};
use crate::base::caller::Caller;
use crate::wire::http_body::Body;

use super::settings::UpstreamCredentials;

/// Where every resource's metadata is, with the resource's path appended.
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The resource a served path belongs to: `/mcp` for `/mcp`, `/sse` for `/sse` and
/// `/messages`, and the same under `/servers/<name>`.
fn resource_path(path: &str) -> Option<String> {
    let (prefix, endpoint) = match path.strip_prefix("/servers/") {
        Some(rest) => {
            let (name, endpoint) = rest.split_once('/')?;
            (format!("/servers/{name}"), endpoint)
        }
        None => (String::new(), path.trim_start_matches('/')),
    };
    match endpoint {
        "mcp" => Some(format!("{prefix}/mcp")),
        "sse" | "messages" => Some(format!("{prefix}/sse")),
        _ => None,
    }
}

/// The URL clients reach the proxy at: the configured public URL, else `http://` and the
/// request's `Host` (already checked against the allowed hosts).
fn base_url(authority: &Authority, headers: &HeaderMap) -> String {
    match &authority.settings.public_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("localhost");
            format!("http://{host}")
        }
    }
}

/// A served resource as a client dialled it: the proxy's public URL and the resource's path.
struct Resource {
    base: String,
    path: String,
}

impl Resource {
    /// Where its Protected Resource Metadata is.
    fn metadata_url(&self) -> String {
        format!("{}{WELL_KNOWN}{}", self.base, self.path)
    }

    /// Whether a token for `audience` is for this resource's server: its `/mcp` and its `/sse`
    /// are one resource.
    fn is_named_by(&self, audience: &str) -> bool {
        let server = self
            .path
            .strip_suffix("/mcp")
            .or_else(|| self.path.strip_suffix("/sse"))
            .unwrap_or(&self.path);
        audience
            .trim_end_matches('/')
            .strip_prefix(self.base.as_str())
            .and_then(|rest| rest.strip_prefix(server))
            .is_some_and(|endpoint| endpoint == "/mcp" || endpoint == "/sse")
    }
}

/// Checks the bearer token of a request to a served path: who it acts for, and what `app`'s
/// server may get of it (nothing, the token itself, or one exchanged for the server). Without
/// `[auth]`, `None`: every request passes, and the front's own rules name its caller.
pub async fn admit<B>(
    router: &Router,
    app: &App,
    request: &Request<B>,
) -> Result<Option<(Admitted, Caller)>, Rejection> {
    let Some(authority) = &router.auth else {
        return Ok(None);
    };
    let Some(path) = resource_path(request.uri().path()) else {
        return Ok(None);
    };
    let resource = Resource {
        base: base_url(authority, request.headers()),
        path,
    };
    let refused = |(reason, rejection): (&'static str, Rejection)| {
        router.metrics.auth.refuse(reason);
        rejection
    };
    let (token, verified) = checked(authority, &resource, request.headers())
        .await
        .map_err(refused)?;
    let for_server = credential_for_server(authority, app, &resource, &token, &verified)
        .await
        .map_err(refused)?;
    let caller = Caller::new(verified.principal.clone(), for_server);
    Ok(Some((Admitted { verified }, caller)))
}

/// Why a request is refused: the metric's reason and the answer.
type Refusal = (&'static str, Rejection);

/// The request's token, verified, issued for `resource` (or the configured audience) and
/// granting every required scope.
async fn checked(
    authority: &Authority,
    resource: &Resource,
    headers: &HeaderMap,
) -> Result<(String, Arc<Verified>), Refusal> {
    let settings = &authority.settings;
    let invalid = |reason, error: &TokenError| {
        (
            reason,
            Rejection::invalid_token(&resource.metadata_url(), error),
        )
    };
    let token = match bearer(headers) {
        Bearer::Missing => {
            let scopes = &settings.required_scopes;
            let rejection = Rejection::unauthorized(&resource.metadata_url(), scopes);
            return Err(("missing", rejection));
        }
        Bearer::Malformed => return Err(invalid("invalid", &TokenError::Malformed)),
        Bearer::Token(token) => token.to_owned(),
    };
    let verified = authority
        .verify(&token)
        .await
        .map_err(|error| invalid(error.reason(), &error))?;
    let for_this = match &settings.audience {
        Some(audience) => verified.names_any(std::slice::from_ref(audience)),
        None => verified
            .audiences
            .iter()
            .any(|aud| resource.is_named_by(aud)),
    };
    if !for_this {
        return Err(invalid("audience", &TokenError::Audience));
    }
    if !verified.lacks(&settings.required_scopes).is_empty() {
        let scopes = &settings.required_scopes;
        let rejection = Rejection::insufficient_scope(&resource.metadata_url(), scopes);
        return Err(("scope", rejection));
    }
    Ok((token, verified))
}

/// What `app`'s server gets in place of the client's `Authorization`; a virtual server's
/// members each their own, in one value (`auth::members`), a member that cannot have one
/// getting none while the others go on.
async fn credential_for_server(
    authority: &Authority,
    app: &App,
    resource: &Resource,
    token: &str,
    verified: &Verified,
) -> Result<Option<HeaderValue>, Refusal> {
    let UpstreamCredentials::Members(members) = &app.upstream_credentials else {
        return credential_for(
            authority,
            &app.upstream_credentials,
            resource,
            token,
            verified,
        )
        .await;
    };
    let mut made = Vec::new();
    for (member, credentials) in members {
        match credential_for(authority, credentials, resource, token, verified).await {
            Ok(Some(value)) => made.push((member.clone(), value)),
            Ok(None) => {}
            Err((reason, _)) => {
                tracing::warn!(%member, reason, "no credential for this member of the virtual server: it is sent none");
            }
        }
    }
    Ok(crate::auth::members::encode(&made))
}

/// What a server configured with `credentials` gets in place of the client's `Authorization`.
async fn credential_for(
    authority: &Authority,
    credentials: &UpstreamCredentials,
    resource: &Resource,
    token: &str,
    verified: &Verified,
) -> Result<Option<HeaderValue>, Refusal> {
    match credentials {
        UpstreamCredentials::Withheld | UpstreamCredentials::Members(_) => Ok(None),
        UpstreamCredentials::Passthrough { resource: server } => {
            if !verified.names_any(std::slice::from_ref(server)) {
                let error = TokenError::NotForServer(server.clone());
                let rejection = Rejection::invalid_token(&resource.metadata_url(), &error);
                return Err(("audience", rejection));
            }
            let mut value = HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
                (
                    "invalid",
                    Rejection::invalid_token(&resource.metadata_url(), &TokenError::Malformed),
                )
            })?;
            value.set_sensitive(true);
            Ok(Some(value))
        }
        UpstreamCredentials::Exchange(target) => authority
            .exchange(verified, token, target)
            .await
            .map(Some)
            .map_err(|error| ("exchange", Rejection::exchange(&error))),
    }
}

enum Bearer<'h> {
    Missing,
    Malformed,
    Token(&'h str),
}

/// The one `Authorization: Bearer` token of a request (RFC 6750 §2.1; the scheme is
/// case-insensitive). A token in the query string is never read (MCP authorization forbids it).
fn bearer(headers: &HeaderMap) -> Bearer<'_> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return match headers.contains_key(header::AUTHORIZATION) {
            true => Bearer::Malformed,
            false => Bearer::Missing,
        };
    };
    let Some((scheme, token)) = value.to_str().ok().and_then(|v| v.split_once(' ')) else {
        return Bearer::Malformed;
    };
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.contains(' ') {
        return Bearer::Malformed;
    }
    Bearer::Token(token)
}

/// The Protected Resource Metadata document at `path` (RFC 9728 §3), when `path` is under
/// the well-known prefix and names a served resource (the bare prefix: `/mcp`'s, or with
/// only gateway servers, the proxy's own).
pub fn metadata<B>(router: &Router, request: &Request<B>) -> Option<Response<Body>> {
    let authority = router.auth.as_ref()?;
    let rest = request.uri().path().strip_prefix(WELL_KNOWN)?;
    let resource = match rest {
        "" | "/" if router.default.is_some() => "/mcp".to_owned(),
        "" | "/" => String::new(),
        _ => {
            let resource = resource_path(rest).filter(|r| r == rest)?;
            router.served(&resource)?;
            resource
        }
    };
    if super::cors::is_preflight(request) {
        let methods = super::cors::methods::METADATA;
        return Some(super::cors::preflight(
            &router.http.now(),
            request.headers(),
            methods,
        ));
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return Some(Rejection::method_not_allowed().into_response());
    }
    let settings = &authority.settings;
    let base = base_url(authority, request.headers());
    let mut document = json!({
        "resource": format!("{base}{resource}"),
        "authorization_servers": [settings.issuer],
        "bearer_methods_supported": ["header"],
        "resource_name": "mcp-session-proxy",
    });
    if !settings.required_scopes.is_empty() {
        document["scopes_supported"] = json!(settings.required_scopes);
    }
    let mut response = Response::new(Body::full(document.to_string()));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=3600"),
    );
    // Browser clients read it from another origin.
    super::cors::public(&mut response);
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_belongs_to_its_servers_resource() {
        assert_eq!(resource_path("/mcp").as_deref(), Some("/mcp"));
        assert_eq!(resource_path("/messages").as_deref(), Some("/sse"));
        assert_eq!(
            resource_path("/servers/fs/messages").as_deref(),
            Some("/servers/fs/sse")
        );
        assert_eq!(resource_path("/metrics"), None);
        let sse = Resource {
            base: "https://p.example".into(),
            path: "/servers/fs/sse".into(),
        };
        assert!(sse.is_named_by("https://p.example/servers/fs/mcp"));
        assert!(sse.is_named_by("https://p.example/servers/fs/sse/"));
        assert!(!sse.is_named_by("https://p.example/mcp"));
        assert!(!sse.is_named_by("https://p.example/servers/fs/mcpx"));
        assert_eq!(
            sse.metadata_url(),
            "https://p.example/.well-known/oauth-protected-resource/servers/fs/sse"
        );
    }

    #[test]
    fn only_one_well_formed_bearer_token_is_read() {
        let with = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append(header::AUTHORIZATION, value.parse().unwrap());
            }
            match bearer(&headers) {
                Bearer::Missing => "missing".to_owned(),
                Bearer::Malformed => "malformed".to_owned(),
                Bearer::Token(token) => token.to_owned(),
            }
        };
        assert_eq!(with(&[]), "missing");
        assert_eq!(with(&["bearer abc"]), "abc");
        assert_eq!(with(&["Basic abc"]), "malformed");
        assert_eq!(with(&["Bearer "]), "malformed");
        assert_eq!(with(&["Bearer a", "Bearer b"]), "malformed");
    }
}
