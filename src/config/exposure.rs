//! `[tools]`, `[prompts]`, `[resources]` and `[limits]`: tables whose types belong to the
//! session layer (`Exposure`, `ResourceExposure`, `RateLimits`); their keys are described here,
//! with the flags that set them.

use super::keys::check::Checked;
use super::keys::merge::Section;
use super::keys::{Declared, SettingKey};
use crate::session::exposure::{Exposure, ResourceExposure};
use crate::session::rate::RateLimits;

/// The help and reference text of `--allow-tool`.
const ALLOW_TOOL: &str = "Only the default server's tools matching this glob (`*`, `?`) are seen by clients; repeatable (tools.allow) [default: all]";

/// The help and reference text of `--deny-tool`.
const DENY_TOOL: &str = "The default server's tools matching this glob are never seen by clients, nor called; repeatable (tools.deny) [default: none]";

/// The help and reference text of `--allow-resource`.
const ALLOW_RESOURCE: &str = "Only the default server's resources whose URI matches this glob (`*`, `?`) are seen by clients; repeatable (resources.allow) [default: all]";

/// The help and reference text of `--deny-resource`.
const DENY_RESOURCE: &str = "The default server's resources whose URI matches this glob are never seen by clients, nor read or subscribed to; repeatable (resources.deny) [default: none]";

/// The help and reference text of `--rate-limit`.
const RATE_LIMIT: &str = "Requests one principal may send per second, on average, to each served server (a second's worth at once); over it: 429 with Retry-After (limits.requests_per_second) [default: 0, no limit]";

/// A key of these tables.
const fn key(
    name: &'static str,
    ty: &'static str,
    doc: &'static [&'static str],
    flag_id: Option<&'static str>,
) -> SettingKey {
    SettingKey {
        name,
        ty,
        doc,
        flag_id,
        flags: None,
        checks: &[],
        nested: None,
        // Lists and tables: their defaults are words (`all`, `none`).
        default_shown: || None,
    }
}

/// `allow` and `deny` of `[tools]` or `[prompts]`, and what only they have.
fn exposure_keys(what: &'static str, flags: [Option<&'static str>; 2]) -> Vec<SettingKey> {
    let [allow, deny] = flags;
    let (allow_doc, deny_doc): (&'static [&'static str], &'static [&'static str]) = match what {
        "tools" => (&[ALLOW_TOOL], &[DENY_TOOL]),
        _ => (
            &[
                "Globs (`*`, `?`) on the server's prompt names: only prompts matching one are seen",
                "[default: all].",
            ],
            &[
                "Globs on the server's prompt names: prompts matching one are never seen, nor got",
                "[default: none].",
            ],
        ),
    };
    vec![
        key("allow", "Vec<Glob>", allow_doc, allow),
        key("deny", "Vec<Glob>", deny_doc, deny),
        key(
            "prefix",
            "String",
            &[
                "Put before every name clients see (`\"alpha_\"`: for a gateway's servers whose",
                "names clash) [default: none].",
            ],
            None,
        ),
        key(
            "rename",
            "BTreeMap<String, String>",
            &["The server's name to the one clients see (`{ echo = \"say\" }`) [default: none]."],
            None,
        ),
        key(
            "descriptions",
            "BTreeMap<String, String>",
            &[
                "The server's name to the description clients see (`{ add = \"Adds.\" }`)",
                "[default: the server's].",
            ],
            None,
        ),
    ]
}

/// `[tools]`: which of the default server's tools clients see, and under which names.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ToolsFlags {
    #[arg(help = ALLOW_TOOL, long = "allow-tool", value_name = "GLOB")]
    pub allow_tools: Vec<String>,

    #[arg(help = DENY_TOOL, long = "deny-tool", value_name = "GLOB")]
    pub deny_tools: Vec<String>,
}

impl Section<Exposure> for ToolsFlags {
    fn apply_to(&self, tools: &mut Exposure) {
        replace_globs(&mut tools.allow, &self.allow_tools);
        replace_globs(&mut tools.deny, &self.deny_tools);
    }
}

impl Declared for ToolsFlags {
    fn keys() -> Vec<SettingKey> {
        exposure_keys("tools", [Some("allow_tools"), Some("deny_tools")])
    }
}

/// `[prompts]`: no flags; the same keys as `[tools]`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PromptsFlags {}

impl Section<Exposure> for PromptsFlags {
    fn apply_to(&self, _: &mut Exposure) {}
}

impl Declared for PromptsFlags {
    fn keys() -> Vec<SettingKey> {
        exposure_keys("prompts", [None, None])
    }
}

/// `[resources]`: which of the default server's resources clients see, by URI.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ResourcesFlags {
    #[arg(help = ALLOW_RESOURCE, long = "allow-resource", value_name = "GLOB")]
    pub allow_resources: Vec<String>,

    #[arg(help = DENY_RESOURCE, long = "deny-resource", value_name = "GLOB")]
    pub deny_resources: Vec<String>,
}

impl Section<ResourceExposure> for ResourcesFlags {
    fn apply_to(&self, resources: &mut ResourceExposure) {
        replace_globs(&mut resources.allow, &self.allow_resources);
        replace_globs(&mut resources.deny, &self.deny_resources);
    }
}

impl Declared for ResourcesFlags {
    fn keys() -> Vec<SettingKey> {
        vec![
            key(
                "allow",
                "Vec<UriGlob>",
                &[ALLOW_RESOURCE],
                Some("allow_resources"),
            ),
            key(
                "deny",
                "Vec<UriGlob>",
                &[DENY_RESOURCE],
                Some("deny_resources"),
            ),
        ]
    }
}

/// `[limits]`: requests per second per principal, for every served server.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LimitsFlags {
    #[arg(help = RATE_LIMIT, long = "rate-limit", value_name = "N")]
    pub rate_limit: Option<f64>,
}

impl Section<RateLimits> for LimitsFlags {
    fn apply_to(&self, limits: &mut RateLimits) {
        if let Some(rate) = self.rate_limit {
            limits.requests_per_second = rate;
        }
    }
}

impl Declared for LimitsFlags {
    fn keys() -> Vec<SettingKey> {
        vec![
            key(
                "requests_per_second",
                "f64",
                &[RATE_LIMIT],
                Some("rate_limit"),
            ),
            key(
                "tools",
                "BTreeMap<String, f64>",
                &[
                    "Calls per second one principal may make of a tool, by the name clients see",
                    "(`[limits.tools]` then `add = 0.5`) [default: none].",
                ],
                None,
            ),
        ]
    }
}

/// Repeated glob flags replace the file's list.
fn replace_globs<G: for<'a> From<&'a str>>(globs: &mut Vec<G>, given: &[String]) {
    if !given.is_empty() {
        *globs = given.iter().map(|glob| glob.as_str().into()).collect();
    }
}

/// Their values are checked as they are read (a glob, a rate of `[limits]` in `validate`).
macro_rules! checked_when_read {
    ($($table:ty),*) => {$(
        impl Checked for $table {
            fn check_keys(&self, _: &str) -> anyhow::Result<()> {
                Ok(())
            }
        }
    )*};
}

checked_when_read!(Exposure, ResourceExposure, RateLimits);
