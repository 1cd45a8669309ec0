//! What a member serves of resources, for routing: every URI and template its lists name,
//! every page of them, kept until it says its resources changed. A URI goes to the first member
//! in `servers` whose catalog has it or a template matching it, whether or not the client
//! listed anything, so member order alone decides; that member's rules then decide whether the
//! client may reach it (one it lists but hides is not served by a later member either).

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::Value;

use super::names::template_matches;

/// The URIs a catalog holds at most, the templates, and their bytes: a member's lists cannot
/// grow a session without bound. Past them a member's further entries are not known to route
/// to it.
pub const MAX_URIS: usize = 10_000;
pub const MAX_TEMPLATES: usize = 1_000;
pub const MAX_BYTES: usize = 1 << 20;
/// The longest URI or template kept: a longer one is left out (it routes to no member).
pub const MAX_ENTRY_BYTES: usize = 2048;
/// The pages of each list read at most: a member whose cursor never ends is read no further.
pub const MAX_PAGES: usize = 100;

/// One member's resources and templates.
#[derive(Debug, Default)]
pub struct Catalog {
    uris: HashSet<String>,
    templates: Vec<String>,
    /// The bytes of its URIs and templates.
    bytes: usize,
    /// Whether a bound stopped the reading (a list longer than it, a cursor past it, a
    /// reading past its time).
    truncated: bool,
}

/// One page of `resources/list` or `resources/templates/list`, read for what routing needs.
#[derive(Debug, Default, Deserialize)]
pub struct Page {
    #[serde(default)]
    resources: Vec<Entry>,
    #[serde(default, rename = "resourceTemplates")]
    templates: Vec<Entry>,
    #[serde(default, rename = "nextCursor")]
    pub next: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    uri: Option<String>,
    #[serde(rename = "uriTemplate")]
    template: Option<String>,
}

impl Page {
    /// A list result as a page; one that cannot be read is an empty, last page.
    pub fn read(result: Value) -> Page {
        serde_json::from_value(result).unwrap_or_default()
    }
}

impl Catalog {
    /// Takes in one page; `false` once a bound is reached.
    pub fn add(&mut self, page: Page) -> bool {
        let uris = page.resources.into_iter().filter_map(|e| e.uri);
        let templates = page.templates.into_iter().filter_map(|e| e.template);
        for (text, template) in uris.map(|u| (u, false)).chain(templates.map(|t| (t, true))) {
            if text.len() > MAX_ENTRY_BYTES {
                continue;
            }
            let known = match template {
                true => self.templates.contains(&text),
                false => self.uris.contains(&text),
            };
            if known {
                continue;
            }
            let full = match template {
                true => self.templates.len() >= MAX_TEMPLATES,
                false => self.uris.len() >= MAX_URIS,
            };
            if full || self.bytes + text.len() > MAX_BYTES {
                self.truncated = true;
                return false;
            }
            self.bytes += text.len();
            match template {
                true => self.templates.push(text),
                false => drop(self.uris.insert(text)),
            }
        }
        true
    }

    /// Notes that a list went on past [`MAX_PAGES`], or past the time its reading had.
    pub fn cut_short(&mut self) {
        self.truncated = true;
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Whether the member lists `uri`, or a template it matches (or that template itself, as a
    /// completion names it).
    pub fn serves(&self, uri: &str) -> bool {
        self.uris.contains(uri)
            || self
                .templates
                .iter()
                .any(|template| template == uri || template_matches(template, uri))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn page(value: Value) -> Page {
        Page::read(value)
    }

    #[test]
    fn a_catalog_serves_its_uris_and_what_its_templates_match() {
        let mut catalog = Catalog::default();
        let first = page(
            json!({ "resources": [{ "uri": "memo://a" }, { "uri": "file:///etc/passwd" }],
                                 "nextCursor": "2" }),
        );
        assert_eq!(first.next.as_deref(), Some("2"));
        assert!(catalog.add(first));
        assert!(catalog.add(page(
            json!({ "resourceTemplates": [{ "uriTemplate": "file:///{path}" }] })
        )));
        assert!(catalog.serves("memo://a"));
        assert!(!catalog.serves("memo://b"));
        assert!(catalog.serves("file:///etc/passwd"));
        assert!(catalog.serves("file:///x"), "through the template");
        assert!(catalog.serves("file:///{path}"), "the template itself");
        assert!(!catalog.truncated());
    }

    #[test]
    fn a_catalog_stops_at_its_bounds_and_says_so() {
        let mut catalog = Catalog::default();
        let many: Vec<_> = (0..MAX_URIS + 1)
            .map(|n| json!({ "uri": format!("memo://{n}") }))
            .collect();
        assert!(!catalog.add(page(json!({ "resources": many }))));
        assert!(catalog.truncated());
        assert!(catalog.serves("memo://0"));
        assert!(!catalog.serves(&format!("memo://{MAX_URIS}")));
        let unreadable = Page::read(json!([1]));
        assert!(unreadable.next.is_none());

        // Long entries are left out; the bytes kept have a bound of their own.
        let mut catalog = Catalog::default();
        let long = "x".repeat(MAX_ENTRY_BYTES + 1);
        assert!(catalog.add(page(json!({ "resources": [{ "uri": long }] }))));
        assert!(!catalog.serves(&long));
        let fat: Vec<_> = (0..MAX_BYTES / 1000 + 1)
            .map(|n| json!({ "uri": format!("memo://{n}/{}", "y".repeat(990)) }))
            .collect();
        assert!(!catalog.add(page(json!({ "resources": fat }))));
        assert!(catalog.truncated());
    }
}
