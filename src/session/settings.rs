//! The values the configuration gives the session layer, and their defaults: declared once in
//! `config`, held here where every layer above may name them.

use std::time::Duration;

/// What anonymous requests (no credential, no trusted principal header) share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Anonymous {
    /// Each gets an upstream session of its own, ended with it.
    #[default]
    PerRequest,
    /// They share one, like any principal's requests.
    Shared,
}

/// `session.anonymous_pool` unless configured.
pub const ANONYMOUS_POOL_SIZE: usize = 4;
/// `session.anonymous_pool_wait` unless configured.
pub const ANONYMOUS_POOL_WAIT: Duration = Duration::from_secs(5);
/// `session.max_held_per_principal` unless configured: calls one principal may have waiting
/// for input.
pub const MAX_HELD_PER_PRINCIPAL: usize = 32;

/// A served server's settings for sessions named in messages (configuration).
#[derive(Debug, Clone)]
pub struct DataLayerSettings {
    /// Requests that reach the server's state must name a data-layer session (-32044).
    pub require_session: bool,
    /// Offer state handles: the handle tools, and a handle argument on every tool.
    pub handles: bool,
    /// A named session ends after this long unused.
    pub idle_ttl: Duration,
    /// And at the latest this long after it was opened.
    pub lifetime: Duration,
    /// Named sessions one principal may hold on one replica.
    pub max_per_principal: usize,
    /// The longest `state` a cookie may carry.
    pub max_state_bytes: usize,
}

impl Default for DataLayerSettings {
    fn default() -> DataLayerSettings {
        DataLayerSettings {
            require_session: false,
            handles: false,
            idle_ttl: Duration::from_secs(1800),
            lifetime: Duration::from_secs(24 * 3600),
            max_per_principal: 32,
            max_state_bytes: 4096,
        }
    }
}
