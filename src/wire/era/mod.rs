//! Names of the 2026-07-28 revision that the proxy's fronts and upstreams and the demo server
//! all use: the `_meta` keys, the legacy methods it removed, the results it caches, the client
//! capability each question to the client needs. `params` reads a request's params once,
//! `request` checks what a request must carry (the proxy's face and the demo server alike).

pub mod params;
pub mod request;

use serde_json::Value;

pub use crate::wire::jsonrpc::{HEADER_MISMATCH, MISSING_CAPABILITY};

/// The revision.
pub const MODERN_VERSION: &str = "2026-07-28";

/// The revisions before it, oldest first: those spoken with sessions and `initialize`.
pub const LEGACY_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// Which revisions a server speaks (`upstream.protocol`, `demo-server --protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
pub enum Era {
    /// 2024-11-05 … 2025-11-25: sessions, `initialize` first.
    #[default]
    #[serde(rename = "legacy")]
    Legacy,
    /// 2026-07-28 only.
    #[serde(rename = "2026-07-28")]
    Modern,
    /// Not known yet: asked once with `server/discover` (`upstream.protocol = "auto"`).
    #[serde(rename = "auto")]
    Auto,
}

/// As the configuration writes it: `legacy`, `2026-07-28`, `auto`.
impl std::fmt::Display for Era {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Era::Legacy => "legacy",
            Era::Modern => MODERN_VERSION,
            Era::Auto => "auto",
        })
    }
}

/// A name that is none of the revisions' ([`Era`]'s `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}: legacy, {MODERN_VERSION} or auto")]
pub struct UnknownEra(pub String);

impl std::str::FromStr for Era {
    type Err = UnknownEra;
    fn from_str(name: &str) -> Result<Era, UnknownEra> {
        match name {
            "legacy" => Ok(Era::Legacy),
            MODERN_VERSION => Ok(Era::Modern),
            "auto" => Ok(Era::Auto),
            other => Err(UnknownEra(other.to_owned())),
        }
    }
}
pub const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
pub const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
pub const CLIENT_INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";
pub const LOG_LEVEL_KEY: &str = "io.modelcontextprotocol/logLevel";
pub const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";
pub const SUBSCRIPTION_ID_KEY: &str = "io.modelcontextprotocol/subscriptionId";
/// Where a data-layer session's metadata travels in `_meta` (the seed's final form).
pub const SESSION_META_KEY: &str = "io.modelcontextprotocol/session";
/// The same in the seed's earlier drafts.
pub const DRAFT_SESSION_META_KEY: &str = "mcp/session";
/// The prefix of the `_meta` fields that describe the request itself (not for the server).
pub const PER_REQUEST_META: &str = "io.modelcontextprotocol/";

/// What 2026-07-28 removed, which results it caches, and the capability each question to the
/// client needs: properties of the methods, in the method table.
pub use crate::wire::methods::{is_cacheable, removed_in_modern, required_capability};

/// Where a legacy server's request to the client may name the `inputRequests` key its
/// question becomes for a 2026-07-28 client (this proxy's convention; the demo follows it).
pub const INPUT_KEY: &str = "mcp-session-proxy/inputKey";

/// Whether the request declared `capability` (`a.b`: `a` with `b` in it).
pub fn declares(capabilities: &serde_json::Map<String, Value>, capability: &str) -> bool {
    match capability.split_once('.') {
        Some((outer, inner)) => capabilities
            .get(outer)
            .is_some_and(|value| value.get(inner).is_some()),
        None => capabilities.contains_key(capability),
    }
}

/// `requiredCapabilities` for `capability`: `{"sampling": {}}`, `{"elicitation": {"url": {}}}`.
pub fn capability_object(capability: &str) -> Value {
    match capability.split_once('.') {
        Some((outer, inner)) => serde_json::json!({ outer: { inner: {} } }),
        None => serde_json::json!({ capability: {} }),
    }
}
