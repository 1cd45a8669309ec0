//! Who may talk to the proxy, and as whom: the `Origin` and `Host` checks (MCP 2025-11-25,
//! transports §Security Warning: DNS rebinding), who may name a principal in a header, and the
//! principal a request acts for.

use std::net::SocketAddr;

use http::uri::Authority;
use http::{header, HeaderMap, HeaderName, Uri};

use super::settings::HttpSettings;
use crate::auth::Verified;
use crate::base::caller::Caller;
use crate::base::ids::Principal;
use crate::wire::loopback::{host_name, is_loopback_authority, is_loopback_origin};

/// A request whose bearer token the resource server verified (`authorization::admit`): who it
/// acts for, and until when.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub verified: std::sync::Arc<Verified>,
}

impl Admitted {
    pub fn principal(&self) -> &Principal {
        &self.verified.principal
    }
}

/// The address a request's connection came from: `serve` puts it in every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// Why a request's `Host`, `Origin` or principal header is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// HTTP/1.1 requires one (RFC 9112 §3.2): without it the name the client used is unknown.
    #[error("the Host header is missing")]
    NoHost,
    /// Two values, of which a check could read only one.
    #[error("more than one {0} header")]
    Repeated(&'static str),
    /// Not visible ASCII: no allowed value looks like that.
    #[error("the {0} header is not visible ASCII")]
    NotAscii(&'static str),
    #[error("Host {0} is not allowed")]
    Host(String),
    #[error("Origin {0} is not allowed")]
    Origin(String),
    /// The principal header from a peer that is no trusted proxy: a client naming itself.
    #[error(
        "the {header} header names who a request acts for, and is taken only from a trusted \
         proxy; {peer} is not one (http.trusted_proxies), or did not send its token \
         (http.trusted_proxy_token_file)"
    )]
    UntrustedPrincipal { header: String, peer: String },
    /// Two names (a client's, appended to by a proxy that adds rather than sets, say): neither
    /// is read.
    #[error("more than one {0} header")]
    RepeatedPrincipal(String),
}

/// Checks the one `Host` header against DNS rebinding: present, single, ASCII, allowed; and a
/// request target in absolute form (`POST http://name/mcp`), whose authority stands for `Host`
/// (RFC 9112 §3.2.2), the same way.
pub fn check_host(
    settings: &HttpSettings,
    target: &Uri,
    headers: &HeaderMap,
) -> Result<(), Refused> {
    let host = single(headers, header::HOST, "Host")?.ok_or(Refused::NoHost)?;
    let named = target.authority().map(Authority::as_str);
    for authority in std::iter::once(host).chain(named) {
        if !host_allowed(settings, authority) {
            return Err(Refused::Host(authority.to_owned()));
        }
    }
    Ok(())
}

/// Checks `Origin`, when a browser sent one: single, ASCII, loopback or allowed.
pub fn check_origin(settings: &HttpSettings, headers: &HeaderMap) -> Result<(), Refused> {
    match single(headers, header::ORIGIN, "Origin")? {
        Some(origin) if !origin_allowed(settings, origin) => {
            Err(Refused::Origin(origin.to_owned()))
        }
        _ => Ok(()),
    }
}

/// The one value of a header that may appear once, as visible ASCII.
fn single<'a>(
    headers: &'a HeaderMap,
    name: HeaderName,
    label: &'static str,
) -> Result<Option<&'a str>, Refused> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Refused::Repeated(label));
    }
    value
        .to_str()
        .map(Some)
        .map_err(|_| Refused::NotAscii(label))
}

/// Loopback origins, and those configured.
pub fn origin_allowed(settings: &HttpSettings, origin: &str) -> bool {
    if settings
        .allowed_origins
        .iter()
        .any(|o| o == "*" || o == origin)
    {
        return true;
    }
    is_loopback_origin(origin)
}

/// Configured hosts (host or host:port); with none configured, any host unless the proxy
/// listens on loopback, where only loopback names pass.
pub fn host_allowed(settings: &HttpSettings, host: &str) -> bool {
    if settings.allowed_hosts.is_empty() {
        return !settings.loopback_hosts_only || is_loopback_authority(host);
    }
    settings
        .allowed_hosts
        .iter()
        .any(|allowed| allowed == "*" || allowed == host || *allowed == host_name(host))
}

/// Whether anyone who reaches the port is served under any Host: listening beyond loopback with
/// no allowed hosts (DNS rebinding passes) and no principal header from an authenticating
/// proxy in front (anyone opens sessions). Worth a warning at start.
pub fn open_to_anyone(settings: &HttpSettings) -> bool {
    !settings.loopback_hosts_only
        && settings.allowed_hosts.is_empty()
        && settings.principal_header.is_none()
}

/// Whether the request's peer may name its principal in `http.principal_header`: an address in
/// `http.trusted_proxies`, or with none listed, a loopback address (a listener beyond loopback
/// must list them: the configuration is refused otherwise); and, with
/// `http.trusted_proxy_token_file`, one that sends its token, once (what the proxy's own
/// children, which share its loopback, cannot). An unknown peer is not trusted.
pub fn from_trusted_proxy(
    settings: &HttpSettings,
    headers: &HeaderMap,
    extensions: &http::Extensions,
) -> bool {
    let Some(Peer(peer)) = extensions.get::<Peer>() else {
        return false;
    };
    let peer = peer.ip().to_canonical();
    let listed = match settings.trusted_proxies.as_slice() {
        [] => peer.is_loopback(),
        listed => listed.iter().any(|network| network.contains(peer)),
    };
    listed
        && settings
            .trusted_proxy_token
            .as_ref()
            .is_none_or(|token| token.proven_by(headers))
}

/// Refuses a request that carries the principal header from a peer that is no trusted proxy
/// (403: a client naming itself is refused, not ignored, so that a proxy left out of the list
/// shows at once), or carries it more than once (400). A request without it passes.
pub fn check_principal_header(
    settings: &HttpSettings,
    headers: &HeaderMap,
    extensions: &http::Extensions,
) -> Result<(), Refused> {
    let Some(name) = &settings.principal_header else {
        return Ok(());
    };
    let mut values = headers.get_all(name.as_str()).iter();
    if values.next().is_none() {
        return Ok(());
    }
    if !from_trusted_proxy(settings, headers, extensions) {
        let peer = extensions
            .get::<Peer>()
            .map(|Peer(peer)| peer.ip().to_canonical());
        return Err(Refused::UntrustedPrincipal {
            header: name.clone(),
            peer: peer.map_or_else(|| "an unknown peer".to_owned(), |ip| ip.to_string()),
        });
    }
    if values.next().is_some() {
        return Err(Refused::RepeatedPrincipal(name.clone()));
    }
    Ok(())
}

/// The principal a client certificate named (`tls.principal_from_client_cert`), for every
/// request of its connection.
#[derive(Debug, Clone)]
pub struct Certified(pub Principal);

/// Who a request acts for without `[auth]` (with it, `authorization::admit` says): its
/// principal (`principal`), and its `Authorization` as it came.
pub fn caller(
    settings: &HttpSettings,
    headers: &HeaderMap,
    extensions: &http::Extensions,
) -> Caller {
    let credential = headers.get(header::AUTHORIZATION).cloned();
    Caller::new(principal(settings, headers, extensions), credential)
}

/// A request that reached a handler without the front's caller: a path served before it was
/// admitted, which is the proxy's fault (500), never a reason to serve it as anyone.
#[derive(Debug, thiserror::Error)]
#[error("the request reached a handler without being admitted")]
pub struct NotAdmitted;

/// The caller the front made of a request when it admitted it. A request it did not admit is
/// refused, never served as anyone: every served path is admitted first.
pub fn admitted_caller(extensions: &http::Extensions) -> Result<Caller, NotAdmitted> {
    extensions.get::<Caller>().cloned().ok_or(NotAdmitted)
}

/// The principal a request acts for without `[auth]`: its connection's client certificate's
/// (with `tls.principal_from_client_cert`), else the header a trusted proxy set when one is
/// configured, else a digest of `Authorization`, else anonymous.
fn principal(
    settings: &HttpSettings,
    headers: &HeaderMap,
    extensions: &http::Extensions,
) -> Principal {
    if let Some(Certified(principal)) = extensions.get::<Certified>() {
        return principal.clone();
    }
    let credential = match &settings.principal_header {
        // Never from anyone else: `check_principal_header` refused such a request at the door.
        Some(name) if from_trusted_proxy(settings, headers, extensions) => {
            headers.get(name.as_str())
        }
        Some(_) => None,
        None => headers.get(header::AUTHORIZATION),
    };
    match credential {
        Some(value) => Principal::from_credential(value.as_bytes()),
        None => Principal::anonymous(),
    }
}

/// `host[:port]` → host, keeping the brackets of an IPv6 literal.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_the_front_did_not_admit_is_refused_not_served_as_anyone() {
        assert!(admitted_caller(&http::Extensions::new()).is_err());
        let mut admitted = http::Extensions::new();
        admitted.insert(Caller::anonymous());
        assert_eq!(
            admitted_caller(&admitted).unwrap().principal(),
            &Principal::anonymous()
        );
    }

    #[test]
    fn loopback_origins_are_allowed_by_default() {
        let http = HttpSettings::default();
        for ok in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8443",
        ] {
            assert!(origin_allowed(&http, ok), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example",
            "null",
            "http://127.0.0.1.nip.io",
        ] {
            assert!(!origin_allowed(&http, bad), "{bad}");
        }
        let http = HttpSettings {
            allowed_origins: vec!["https://app.example".into()],
            ..HttpSettings::default()
        };
        assert!(origin_allowed(&http, "https://app.example"));
    }

    #[test]
    fn hosts_are_loopback_only_on_loopback_unless_configured() {
        let loopback = HttpSettings::default();
        assert!(host_allowed(&loopback, "127.0.0.1:8787"));
        assert!(host_allowed(&loopback, "localhost"));
        assert!(host_allowed(&loopback, "[::1]:1"));
        assert!(!host_allowed(&loopback, "evil.example:8787"));
        let open = HttpSettings {
            loopback_hosts_only: false,
            ..HttpSettings::default()
        };
        assert!(host_allowed(&open, "mcp.internal:8787"));
        let listed = HttpSettings {
            allowed_hosts: vec!["mcp.example".into()],
            ..HttpSettings::default()
        };
        assert!(host_allowed(&listed, "mcp.example:443"));
        assert!(host_allowed(&listed, "mcp.example"));
        assert!(
            !host_allowed(&listed, "127.0.0.1:8787"),
            "an explicit list is the whole list"
        );
    }

    #[test]
    fn only_a_listener_beyond_loopback_with_no_host_list_and_no_authorization_is_open() {
        let loopback = HttpSettings::default();
        assert!(!open_to_anyone(&loopback));
        let open = HttpSettings {
            loopback_hosts_only: false,
            ..HttpSettings::default()
        };
        assert!(open_to_anyone(&open));
        let listed = HttpSettings {
            allowed_hosts: vec!["mcp.example".into()],
            ..open.clone()
        };
        assert!(!open_to_anyone(&listed));
        let authorized = HttpSettings {
            principal_header: Some("x-user".into()),
            ..open
        };
        assert!(!open_to_anyone(&authorized));
    }

    #[test]
    fn an_absolute_target_is_checked_like_host() {
        let http = HttpSettings::default();
        let mut loopback = HeaderMap::new();
        loopback.insert(
            header::HOST,
            http::HeaderValue::from_static("127.0.0.1:8787"),
        );
        let target = |uri: &str| uri.parse::<Uri>().unwrap();
        assert_eq!(
            check_host(&http, &target("http://evil.example/mcp"), &loopback),
            Err(Refused::Host("evil.example".into()))
        );
        assert_eq!(
            check_host(&http, &target("http://127.0.0.1:8787/mcp"), &loopback),
            Ok(())
        );
    }

    #[test]
    fn host_and_origin_must_be_single_ascii_values() {
        let http = HttpSettings::default();
        let headers = |pairs: &[(&str, &[u8])]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.append(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    http::HeaderValue::from_bytes(value).unwrap(),
                );
            }
            map
        };
        assert_eq!(
            check_host(
                &http,
                &Uri::default(),
                &headers(&[("host", b"127.0.0.1:1")])
            ),
            Ok(())
        );
        assert_eq!(
            check_host(&http, &Uri::default(), &headers(&[])),
            Err(Refused::NoHost)
        );
        assert_eq!(
            check_host(
                &http,
                &Uri::default(),
                &headers(&[("host", b"127.0.0.1"), ("host", b"evil.example")])
            ),
            Err(Refused::Repeated("Host"))
        );
        assert_eq!(
            check_host(
                &http,
                &Uri::default(),
                &headers(&[("host", b"localhost\xff")])
            ),
            Err(Refused::NotAscii("Host"))
        );
        assert_eq!(check_origin(&http, &headers(&[])), Ok(()));
        assert_eq!(
            check_origin(
                &http,
                &headers(&[("origin", b"http://localhost"), ("origin", b"http://evil")])
            ),
            Err(Refused::Repeated("Origin"))
        );
        assert_eq!(
            check_origin(&http, &headers(&[("origin", b"http://localhost\xe9")])),
            Err(Refused::NotAscii("Origin"))
        );
    }

    /// Extensions as `serve` fills them for a connection from `peer`.
    fn from_peer(peer: &str) -> http::Extensions {
        let mut extensions = http::Extensions::new();
        extensions.insert(Peer(peer.parse().unwrap()));
        extensions
    }

    #[test]
    fn the_trusted_header_names_the_principal_when_configured() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer one".parse().unwrap());
        headers.insert("x-user", "alice".parse().unwrap());
        let local = from_peer("127.0.0.1:40000");
        let plain = HttpSettings::default();
        assert_eq!(
            principal(&plain, &headers, &local),
            Principal::from_credential(b"Bearer one")
        );
        let trusted = HttpSettings {
            principal_header: Some("x-user".into()),
            ..HttpSettings::default()
        };
        assert_eq!(
            principal(&trusted, &headers, &local),
            Principal::from_credential(b"alice")
        );
        assert_eq!(
            principal(&trusted, &HeaderMap::new(), &local),
            Principal::anonymous()
        );
        // From a peer that may not send it (or an unknown one), the header names nobody.
        assert_eq!(
            principal(&trusted, &headers, &from_peer("10.0.0.7:40000")),
            Principal::anonymous()
        );
        assert_eq!(
            principal(&trusted, &headers, &http::Extensions::new()),
            Principal::anonymous()
        );
    }

    #[test]
    fn only_trusted_proxies_may_send_the_principal_header_and_only_once() {
        let mut named = HeaderMap::new();
        named.insert("x-user", "alice".parse().unwrap());
        let listed = HttpSettings {
            principal_header: Some("x-user".into()),
            trusted_proxies: vec!["10.0.0.0/8".parse().unwrap()],
            ..HttpSettings::default()
        };
        let check = |settings: &HttpSettings, headers: &HeaderMap, peer: &str| {
            check_principal_header(settings, headers, &from_peer(peer))
        };
        assert_eq!(check(&listed, &named, "10.1.2.3:5000"), Ok(()));
        assert_eq!(check(&listed, &named, "[::ffff:10.1.2.3]:5000"), Ok(()));
        assert_eq!(
            check(&listed, &named, "127.0.0.1:5000"),
            Err(Refused::UntrustedPrincipal {
                header: "x-user".into(),
                peer: "127.0.0.1".into()
            }),
            "a list is the whole list"
        );
        assert_eq!(
            check(&listed, &named, "[::ffff:192.0.2.1]:5000"),
            Err(Refused::UntrustedPrincipal {
                header: "x-user".into(),
                peer: "192.0.2.1".into()
            })
        );
        assert_eq!(
            check_principal_header(&listed, &named, &http::Extensions::new()),
            Err(Refused::UntrustedPrincipal {
                header: "x-user".into(),
                peer: "an unknown peer".into()
            })
        );
        // Without the header, anyone passes.
        assert_eq!(check(&listed, &HeaderMap::new(), "192.0.2.1:5000"), Ok(()));
        let mut twice = named.clone();
        twice.append("x-user", "bob".parse().unwrap());
        assert_eq!(
            check(&listed, &twice, "10.1.2.3:5000"),
            Err(Refused::RepeatedPrincipal("x-user".into()))
        );
        // With no list, loopback peers only.
        let unlisted = HttpSettings {
            trusted_proxies: Vec::new(),
            ..listed
        };
        assert_eq!(check(&unlisted, &named, "127.0.0.1:5000"), Ok(()));
        assert_eq!(check(&unlisted, &named, "[::1]:5000"), Ok(()));
        assert!(check(&unlisted, &named, "10.1.2.3:5000").is_err());
        // Without a principal header configured, the header means nothing.
        assert_eq!(
            check(&HttpSettings::default(), &named, "192.0.2.1:5000"),
            Ok(())
        );
    }
}
