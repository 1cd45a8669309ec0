//! `[tools]`, `[prompts]`, `[resources]` and `[limits]` as the file spells them (also in
//! `[servers.<name>]` and `[virtual.<name>]`), declared once each with their flags; made into
//! the session layer's `Exposure`, `ResourceExposure` and `RateLimits`.

use std::collections::BTreeMap;

use super::keys::settings;
use crate::session::exposure::{Exposure, Glob, ResourceExposure, UriGlob};
use crate::session::rate::RateLimits;

settings! {
    /// Which of the default server's tools clients see, and under which names.
    pub struct ToolsConfig, flags ToolsFlags {
        /// Only the default server's tools matching this glob (`*`, `?`) are seen by clients;
        /// repeatable (tools.allow) [default: all].
        #[arg(id = "allow_tools", long = "allow-tool", value_name = "GLOB")]
        #[flag_id = "allow_tools"]
        pub allow: Vec<Glob> = Vec::new(), list(Vec<Glob>);

        /// The default server's tools matching this glob are never seen by clients, nor called;
        /// repeatable (tools.deny) [default: none].
        #[arg(id = "deny_tools", long = "deny-tool", value_name = "GLOB")]
        #[flag_id = "deny_tools"]
        pub deny: Vec<Glob> = Vec::new(), list(Vec<Glob>);

        /// Put before every name clients see (`"alpha_"`: for a gateway's servers whose names
        /// clash) [default: none].
        #[arg(skip)]
        pub prefix: String = String::new(), none(());

        /// The server's name to the one clients see (`{ echo = "say" }`) [default: none].
        #[arg(skip)]
        pub rename: BTreeMap<String, String> = BTreeMap::new(), none(());

        /// The server's name to the description clients see (`{ add = "Adds." }`) [default:
        /// the server's].
        #[arg(skip)]
        pub descriptions: BTreeMap<String, String> = BTreeMap::new(), none(());
    }
}

settings! {
    /// Which of the default server's prompts clients see, and under which names.
    pub struct PromptsConfig, flags PromptsFlags {
        /// Globs (`*`, `?`) on the server's prompt names: only prompts matching one are seen
        /// [default: all].
        #[arg(skip)]
        pub allow: Vec<Glob> = Vec::new(), none(());

        /// Globs on the server's prompt names: prompts matching one are never seen, nor got
        /// [default: none].
        #[arg(skip)]
        pub deny: Vec<Glob> = Vec::new(), none(());

        /// Put before every name clients see (`"alpha_"`: for a gateway's servers whose names
        /// clash) [default: none].
        #[arg(skip)]
        pub prefix: String = String::new(), none(());

        /// The server's name to the one clients see (`{ review = "critique" }`) [default: none].
        #[arg(skip)]
        pub rename: BTreeMap<String, String> = BTreeMap::new(), none(());

        /// The server's name to the description clients see [default: the server's].
        #[arg(skip)]
        pub descriptions: BTreeMap<String, String> = BTreeMap::new(), none(());
    }
}

settings! {
    /// Which of the default server's resources clients see, by URI.
    pub struct ResourcesConfig, flags ResourcesFlags {
        /// Only the default server's resources whose URI matches this glob (`*`, `?`) are seen by
        /// clients; repeatable (resources.allow) [default: all].
        #[arg(id = "allow_resources", long = "allow-resource", value_name = "GLOB")]
        #[flag_id = "allow_resources"]
        pub allow: Vec<UriGlob> = Vec::new(), list(Vec<UriGlob>);

        /// The default server's resources whose URI matches this glob are never seen by
        /// clients, nor read or subscribed to; repeatable (resources.deny) [default: none].
        #[arg(id = "deny_resources", long = "deny-resource", value_name = "GLOB")]
        #[flag_id = "deny_resources"]
        pub deny: Vec<UriGlob> = Vec::new(), list(Vec<UriGlob>);
    }
}

settings! {
    /// Requests per second per principal (and per principal and tool), for every served
    /// server.
    pub struct LimitsConfig, flags LimitsFlags {
        /// Requests one principal may send per second, on average, to each served server (a
        /// second's worth at once); over it: 429 with Retry-After (limits.requests_per_second)
        /// [default: 0, no limit].
        #[arg(id = "rate_limit", long = "rate-limit", value_name = "N")]
        #[flag_id = "rate_limit"]
        pub requests_per_second: f64 = 0.0, set;

        /// Calls per second one principal may make of a tool, by the name clients see
        /// (`[limits.tools]` then `add = 0.5`) [default: none].
        #[arg(skip)]
        pub tools: BTreeMap<String, f64> = BTreeMap::new(), none(());
    }
}

impl ToolsConfig {
    /// The tools clients see, as the session layer applies it.
    pub fn exposure(&self) -> Exposure {
        named_exposure(
            &self.allow,
            &self.deny,
            &self.prefix,
            &self.rename,
            &self.descriptions,
        )
    }
}

impl PromptsConfig {
    /// The prompts clients see, as the session layer applies it.
    pub fn exposure(&self) -> Exposure {
        named_exposure(
            &self.allow,
            &self.deny,
            &self.prefix,
            &self.rename,
            &self.descriptions,
        )
    }
}

/// The rules on things with names (tools, prompts), from the five keys of their table.
fn named_exposure(
    allow: &[Glob],
    deny: &[Glob],
    prefix: &str,
    rename: &BTreeMap<String, String>,
    descriptions: &BTreeMap<String, String>,
) -> Exposure {
    Exposure {
        allow: allow.to_vec(),
        deny: deny.to_vec(),
        rename: rename.clone(),
        prefix: prefix.to_owned(),
        descriptions: descriptions.clone(),
    }
}

impl ResourcesConfig {
    /// The resources clients see, as the session layer applies it.
    pub fn exposure(&self) -> ResourceExposure {
        ResourceExposure {
            allow: self.allow.clone(),
            deny: self.deny.clone(),
        }
    }
}

impl LimitsConfig {
    /// The rates the session layer holds principals to.
    pub fn rates(&self) -> RateLimits {
        RateLimits {
            requests_per_second: self.requests_per_second,
            tools: self.tools.clone(),
        }
    }
}

/// What clients see of one server: its `[tools]`, `[prompts]` and `[resources]`.
pub fn exposure(
    tools: &ToolsConfig,
    prompts: &PromptsConfig,
    resources: &ResourcesConfig,
) -> (Exposure, Exposure, ResourceExposure) {
    (tools.exposure(), prompts.exposure(), resources.exposure())
}
