//! Which of a server's resources its clients see (`[resources]`, `[servers.<name>.resources]`):
//! allow and deny globs on resource URIs, nothing renamed. A resource not shown is absent from
//! `resources/list`; a template is listed when its `uriTemplate` text passes the globs as a URI
//! would (`deny = ["internal://*"]` hides `internal://{id}`), and a URI read through a listed
//! template is still checked on its own. A `resources/read`, `resources/subscribe` or
//! `resources/unsubscribe` of a URI not shown is answered as a resource the server does not
//! have, never sent; its `notifications/resources/updated` never reach the client.

use serde_json::value::RawValue;
use serde_json::Value;

use super::passes;

/// As the configuration spells it: `[resources]`, `[servers.<name>.resources]`. Only `allow`
/// and `deny`: URIs are what clients read, so they are never renamed or prefixed.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceExposure {
    /// Globs (`*`, `?`) on resource URIs: only resources matching one are seen (none: all).
    pub allow: Vec<String>,
    /// Globs on resource URIs: resources matching one are never seen.
    pub deny: Vec<String>,
}

/// A list of resources or of templates, and the field of each entry the globs apply to.
#[derive(Debug, Clone, Copy)]
pub enum ResourceList {
    /// `resources/list`: `resources[].uri`.
    Resources,
    /// `resources/templates/list`: `resourceTemplates[].uriTemplate`.
    Templates,
}

impl ResourceList {
    fn key_and_field(self) -> (&'static str, &'static str) {
        match self {
            ResourceList::Resources => ("resources", "uri"),
            ResourceList::Templates => ("resourceTemplates", "uriTemplate"),
        }
    }
}

impl ResourceExposure {
    /// Whether clients see every resource of the server.
    pub fn is_identity(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// Whether clients see the resource at `uri` (or the template of that text).
    pub fn shows(&self, uri: &str) -> bool {
        passes(&self.allow, &self.deny, uri)
    }

    /// A list result as clients see it: the entries not shown left out; `None` when it is not
    /// such a list (left as it is).
    pub fn list(&self, result: &RawValue, list: ResourceList) -> Option<Box<RawValue>> {
        let (key, field) = list.key_and_field();
        let mut result: Value = serde_json::from_str(result.get()).ok()?;
        let entries = result.get_mut(key)?.as_array_mut()?;
        entries.retain(|entry| entry[field].as_str().is_some_and(|uri| self.shows(uri)));
        serde_json::value::to_raw_value(&result).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn exposure() -> ResourceExposure {
        ResourceExposure {
            allow: vec!["demo://*".into(), "test://template/*".into()],
            deny: vec!["demo://counter".into()],
        }
    }

    fn listed(exposure: &ResourceExposure, result: Value, list: ResourceList) -> Value {
        let raw = serde_json::value::to_raw_value(&result).unwrap();
        serde_json::from_str(exposure.list(&raw, list).unwrap().get()).unwrap()
    }

    #[test]
    fn uris_are_shown_by_the_allow_and_deny_globs() {
        let exposure = exposure();
        assert!(exposure.shows("demo://greeting"));
        assert!(!exposure.shows("demo://counter"), "denied");
        assert!(!exposure.shows("test://static-text"), "not allowed");
        assert!(ResourceExposure::default().is_identity());
        assert!(ResourceExposure::default().shows("anything://at/all"));
    }

    #[test]
    fn a_resource_list_keeps_the_resources_shown_and_everything_else() {
        let seen = listed(
            &exposure(),
            json!({ "resources": [
                { "uri": "demo://greeting", "name": "greeting" },
                { "uri": "demo://counter", "name": "counter" },
                { "uri": "test://static-text", "name": "static" },
                { "name": "no uri" },
            ], "nextCursor": "c" }),
            ResourceList::Resources,
        );
        assert_eq!(
            seen,
            json!({ "resources": [{ "uri": "demo://greeting", "name": "greeting" }],
                    "nextCursor": "c" })
        );
    }

    #[test]
    fn a_template_is_listed_when_its_text_passes_the_globs() {
        let templates = json!({ "resourceTemplates": [
            { "uriTemplate": "test://template/{id}/data" },
            { "uriTemplate": "internal://{id}" },
        ] });
        let seen = listed(&exposure(), templates.clone(), ResourceList::Templates);
        assert_eq!(
            seen,
            json!({ "resourceTemplates": [{ "uriTemplate": "test://template/{id}/data" }] })
        );
        let denied = ResourceExposure {
            deny: vec!["internal://*".into()],
            ..ResourceExposure::default()
        };
        let seen = listed(&denied, templates, ResourceList::Templates);
        assert_eq!(
            seen,
            json!({ "resourceTemplates": [{ "uriTemplate": "test://template/{id}/data" }] })
        );
        let raw = serde_json::value::to_raw_value(&json!({ "tools": [] })).unwrap();
        assert!(denied.list(&raw, ResourceList::Templates).is_none());
    }
}
