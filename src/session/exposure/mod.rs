//! Which of a server's tools (and prompts) its clients see, and under which names
//! (configuration, per server): allow and deny globs on the server's names, renames, a prefix
//! for the gateway, and descriptions of the operator's own. A `tools/list` (`prompts/list`)
//! answer is rewritten on its way to the client (before the list cache keeps it); a
//! `tools/call` (`prompts/get`) names an exposed one and goes to the server under the server's
//! name, and one not exposed is unknown, never sent. Resources are shown or hidden by URI
//! alone (`resources`).

mod called;
mod glob;
mod resources;
mod uri;

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::Value;

pub use glob::Glob;
pub use resources::{ResourceExposure, ResourceList, UriGlob};
/// The ways a server may read a URI (`uri::readings`): crate-internal, public only for the
/// `glob` fuzz target (fuzz/), which holds them to their rules.
#[doc(hidden)]
pub use uri::readings as uri_readings;

/// Which of a server's tools (or prompts) clients see, and under which names: what
/// `[tools]`, `[prompts]`, `[servers.<name>.tools]`, … say.
#[derive(Debug, Clone, Default)]
pub struct Exposure {
    /// Globs (`*`, `?`) on the server's names: only tools matching one are seen (none: all).
    pub allow: Vec<Glob>,
    /// Globs on the server's names: tools matching one are never seen.
    pub deny: Vec<Glob>,
    /// The server's name → the name clients see.
    pub rename: BTreeMap<String, String>,
    /// Put before every name clients see (after any rename).
    pub prefix: String,
    /// The description clients see, by the server's name.
    pub descriptions: BTreeMap<String, String>,
}

impl Exposure {
    /// Whether clients see the server's tools as they are.
    pub fn is_identity(&self) -> bool {
        self.allow.is_empty()
            && self.deny.is_empty()
            && self.rename.is_empty()
            && self.prefix.is_empty()
            && self.descriptions.is_empty()
    }

    /// Whether clients see the server's tool `name`.
    pub fn shows(&self, name: &str) -> bool {
        passes(&self.allow, &self.deny, name)
    }

    /// The name clients see for the server's tool `name`.
    pub fn exposed(&self, name: &str) -> String {
        let renamed = self.rename.get(name).map_or(name, String::as_str);
        format!("{}{renamed}", self.prefix)
    }

    /// The server's name of the tool clients call `exposed`; `None` when no tool they see has
    /// that name.
    pub fn server_name(&self, exposed: &str) -> Option<String> {
        let unprefixed = exposed.strip_prefix(self.prefix.as_str())?;
        let name = match self.rename.iter().find(|(_, to)| *to == unprefixed) {
            Some((from, _)) => from.as_str(),
            // A renamed tool is seen under its new name only.
            None if self.rename.contains_key(unprefixed) => return None,
            None => unprefixed,
        };
        self.shows(name).then(|| name.to_owned())
    }

    /// A list result (its `key`: `tools`, `prompts`) as clients see it; `None` when it is not
    /// one (left as it is).
    pub fn list(&self, result: &RawValue, key: &str) -> Option<Box<RawValue>> {
        let mut result: Value = serde_json::from_str(result.get()).ok()?;
        let tools = result.get_mut(key)?.as_array_mut()?;
        tools.retain(|tool| tool["name"].as_str().is_some_and(|name| self.shows(name)));
        for tool in tools.iter_mut() {
            let Some(name) = tool["name"].as_str().map(str::to_owned) else {
                continue;
            };
            if let Some(description) = self.descriptions.get(&name) {
                tool["description"] = Value::from(description.as_str());
            }
            tool["name"] = Value::from(self.exposed(&name));
        }
        serde_json::value::to_raw_value(&result).ok()
    }
}

/// Whether `name` matches one of `allow` (or `allow` is empty) and none of `deny`.
fn passes(allow: &[Glob], deny: &[Glob], name: &str) -> bool {
    (allow.is_empty() || allow.iter().any(|glob| glob.matches(name)))
        && !deny.iter().any(|glob| glob.matches(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn exposure() -> Exposure {
        Exposure {
            allow: vec!["*".into()],
            deny: vec!["sleep*".into(), "debug_?".into()],
            rename: [("echo".to_owned(), "say".to_owned())].into(),
            prefix: "demo_".into(),
            descriptions: [("add".to_owned(), "Adds.".to_owned())].into(),
        }
    }

    #[test]
    fn names_map_both_ways_and_hidden_tools_have_none() {
        let exposure = exposure();
        assert_eq!(exposure.exposed("echo"), "demo_say");
        assert_eq!(exposure.exposed("add"), "demo_add");
        assert_eq!(exposure.server_name("demo_say").as_deref(), Some("echo"));
        assert_eq!(exposure.server_name("demo_add").as_deref(), Some("add"));
        assert_eq!(exposure.server_name("demo_echo"), None, "renamed away");
        assert_eq!(exposure.server_name("say"), None, "without the prefix");
        assert_eq!(exposure.server_name("demo_sleep"), None, "denied");
        assert_eq!(exposure.server_name("demo_debug_x"), None);
        let only = Exposure {
            allow: vec!["add".into()],
            ..Exposure::default()
        };
        assert_eq!(only.server_name("add").as_deref(), Some("add"));
        assert_eq!(only.server_name("echo"), None, "not allowed");
        assert!(Exposure::default().is_identity());
    }

    #[test]
    fn a_list_shows_what_is_exposed_as_it_is_exposed() {
        let listed = json!({ "tools": [
            { "name": "echo", "description": "Echoes." },
            { "name": "add", "description": "Sums." },
            { "name": "sleep", "description": "Sleeps." },
        ], "nextCursor": "c" });
        let raw = serde_json::value::to_raw_value(&listed).unwrap();
        let seen: Value =
            serde_json::from_str(exposure().list(&raw, "tools").unwrap().get()).unwrap();
        assert_eq!(
            seen,
            json!({ "tools": [
                { "name": "demo_say", "description": "Echoes." },
                { "name": "demo_add", "description": "Adds." },
            ], "nextCursor": "c" })
        );
    }
}
