//! Which of a server's resources its clients see (`[resources]`, `[servers.<name>.resources]`):
//! allow and deny globs on resource URIs, nothing renamed. A resource not shown is absent from
//! `resources/list`; a template is listed when its `uriTemplate` text passes the globs as a URI
//! would (`deny = ["internal://*"]` hides `internal://{id}`), and a URI read through a listed
//! template is still checked on its own. A `resources/read`, `resources/subscribe` or
//! `resources/unsubscribe` of a URI not shown is answered as a resource the server does not
//! have, never sent; its `notifications/resources/updated` never reach the client. A URI is
//! held to the globs in each way a server may read it (`uri`): `file:///public/../secret` is
//! not under `file:///public/*`, and `DEMO://internal/x` is under `demo://internal/*`.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

use super::glob::Glob;
use super::uri::{self, READINGS};

/// Which of a server's resources clients see, by URI: what `[resources]`,
/// `[servers.<name>.resources]` say. Only `allow` and `deny`: URIs are what clients read, so
/// they are never renamed or prefixed.
#[derive(Debug, Clone, Default)]
pub struct ResourceExposure {
    /// Globs (`*`, `?`) on resource URIs: only resources matching one are seen (none: all).
    pub allow: Vec<UriGlob>,
    /// Globs on resource URIs: resources matching one are never seen.
    pub deny: Vec<UriGlob>,
}

/// A glob on resource URIs, compiled for each way a URI may be read (its own text read the
/// same way: `DEMO://Internal/*` is `demo://internal/*` normalised).
#[derive(Debug, Clone)]
pub struct UriGlob {
    readings: [Glob; READINGS],
}

impl UriGlob {
    pub fn new(text: &str) -> UriGlob {
        UriGlob {
            readings: uri::glob_readings(text).map(|reading| Glob::new(reading.into_owned())),
        }
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        self.readings[0].as_str()
    }
}

impl From<&str> for UriGlob {
    fn from(text: &str) -> UriGlob {
        UriGlob::new(text)
    }
}

impl From<String> for UriGlob {
    fn from(text: String) -> UriGlob {
        UriGlob::new(&text)
    }
}

impl PartialEq<&str> for UriGlob {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl<'de> Deserialize<'de> for UriGlob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<UriGlob, D::Error> {
        String::deserialize(deserializer).map(|text| UriGlob::new(&text))
    }
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

    /// Whether clients see the resource at `uri` (or the template of that text): under an
    /// `allow` glob however it is read, and under no `deny` glob whichever way it is read.
    pub fn shows(&self, uri: &str) -> bool {
        if self.is_identity() {
            return true;
        }
        let readings: Vec<Vec<char>> = uri::readings(uri)
            .iter()
            .map(|reading| reading.chars().collect())
            .collect();
        let under = |glob: &UriGlob, reading: usize| {
            glob.readings[reading].matches_chars(&readings[reading])
        };
        let allowed = self.allow.is_empty()
            || (0..READINGS).all(|reading| self.allow.iter().any(|glob| under(glob, reading)));
        let denied = self
            .deny
            .iter()
            .any(|glob| (0..READINGS).any(|reading| under(glob, reading)));
        allowed && !denied
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
    fn a_rule_holds_however_the_server_reads_the_uri() {
        let public = ResourceExposure {
            allow: vec!["file:///public/*".into()],
            ..ResourceExposure::default()
        };
        assert!(public.shows("file:///public/a.txt"));
        assert!(public.shows("file:///public/a/../b.txt"));
        for outside in [
            "file:///public/../secret",
            "file:///public/%2e%2e/secret",
            "file:///public/..%2Fsecret",
            "FILE:///public/../secret",
            "file:///public//../etc/passwd",
            "file:///public/%2F../etc/passwd",
        ] {
            assert!(!public.shows(outside), "{outside}");
        }
        let internal = ResourceExposure {
            deny: vec!["demo://internal/*".into(), "DEMO://Upper/*".into()],
            ..ResourceExposure::default()
        };
        for hidden in [
            "demo://internal/x",
            "DEMO://internal/x",
            "demo://INTERNAL/x",
            "demo://%69nternal/x",
            "demo://internal/a/../../x",
            "demo://upper/y",
        ] {
            assert!(!internal.shows(hidden), "{hidden}");
        }
        assert!(internal.shows("demo://public/x"));
        let etc = ResourceExposure {
            deny: vec!["file:///etc/*".into()],
            ..ResourceExposure::default()
        };
        for hidden in [
            "file:////etc/passwd",
            "file:/..//etc/passwd",
            "file://localhost/etc/passwd",
        ] {
            assert!(!etc.shows(hidden), "{hidden}");
        }
        assert!(etc.shows("file:///home/etc"));
    }

    #[test]
    fn neither_a_query_nor_a_fragment_gets_past_an_exact_rule() {
        let secret = ResourceExposure {
            deny: vec!["file:///private/secret".into()],
            ..ResourceExposure::default()
        };
        for spelling in [
            "file:///private/secret?",
            "file:///private/secret#x",
            "file:///private/secret?a=1",
            "file:///private/secret%3Fa=1",
            "file:///private/%73ecret",
            "file:///private/x/../secret",
        ] {
            assert!(!secret.shows(spelling), "{spelling}");
        }
        assert!(secret.shows("file:///private/secrets"));
        // An allow glob holds the path a server reads, not a query made to end as it wants.
        let text = ResourceExposure {
            allow: vec!["file:///public/*.txt".into(), "demo://item?".into()],
            ..ResourceExposure::default()
        };
        assert!(text.shows("file:///public/a.txt"));
        assert!(!text.shows("file:///public/secret.key?.txt"));
        assert!(!text.shows("file:///public/secret.key#.txt"));
        assert!(
            text.shows("demo://item1"),
            "a glob's `?` is any one character"
        );
        assert!(!text.shows("demo://item"));
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
