//! Loopback names as `Host` and `Origin` carry them: what a listener on loopback answers to,
//! so that a page on another site cannot reach it through DNS rebinding.

/// The host of an authority (`host`, `host:port`, `[v6]:port`), without its port.
pub fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        authority.split_inclusive(']').next().unwrap_or_default()
    } else {
        authority.split(':').next().unwrap_or_default()
    }
}

/// Whether an authority names this machine by a loopback name.
pub fn is_loopback_authority(authority: &str) -> bool {
    matches!(host_name(authority), "localhost" | "127.0.0.1" | "[::1]")
}

/// Whether an `Origin` is a page served from this machine.
pub fn is_loopback_origin(origin: &str) -> bool {
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(is_loopback_authority)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_are_loopback_whatever_their_port() {
        for ok in ["localhost", "127.0.0.1:8080", "[::1]:3000", "localhost:1"] {
            assert!(is_loopback_authority(ok), "{ok}");
        }
        for bad in [
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "[::2]",
            "evil",
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
        assert!(is_loopback_origin("https://[::1]:8443"));
        assert!(!is_loopback_origin("null"));
        assert!(!is_loopback_origin("ftp://localhost"));
    }
}
