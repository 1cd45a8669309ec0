//! Who may talk to the proxy, and as whom: the `Origin` and `Host` checks (MCP 2025-11-25,
//! transports §Security Warning: DNS rebinding) and the principal a request acts for.

use http::{header, HeaderMap};

use super::HttpSettings;
use crate::session::id::Principal;

/// Loopback origins, and those configured.
pub fn origin_allowed(settings: &HttpSettings, origin: &str) -> bool {
    if settings
        .allowed_origins
        .iter()
        .any(|o| o == "*" || o == origin)
    {
        return true;
    }
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(is_loopback_authority)
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

/// The principal a request acts for: the trusted header when one is configured, else a digest
/// of `Authorization`, else anonymous.
pub fn principal(settings: &HttpSettings, headers: &HeaderMap) -> Principal {
    let credential = match &settings.principal_header {
        Some(name) => headers.get(name.as_str()),
        None => headers.get(header::AUTHORIZATION),
    };
    match credential {
        Some(value) => Principal::from_credential(value.as_bytes()),
        None => Principal::anonymous(),
    }
}

/// `host[:port]` → host, keeping the brackets of an IPv6 literal.
fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        authority.split_inclusive(']').next().unwrap_or_default()
    } else {
        authority.split(':').next().unwrap_or_default()
    }
}

fn is_loopback_authority(authority: &str) -> bool {
    matches!(host_name(authority), "localhost" | "127.0.0.1" | "[::1]")
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_trusted_header_names_the_principal_when_configured() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer one".parse().unwrap());
        headers.insert("x-user", "alice".parse().unwrap());
        let plain = HttpSettings::default();
        assert_eq!(
            principal(&plain, &headers),
            Principal::from_credential(b"Bearer one")
        );
        let trusted = HttpSettings {
            principal_header: Some("x-user".into()),
            ..HttpSettings::default()
        };
        assert_eq!(
            principal(&trusted, &headers),
            Principal::from_credential(b"alice")
        );
        assert_eq!(
            principal(&trusted, &HeaderMap::new()),
            Principal::anonymous()
        );
    }
}
