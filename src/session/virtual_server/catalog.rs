//! What a member serves of resources, for routing: the URIs and templates its lists show
//! (through its own rules), every page of them, kept until it says its resources changed. A URI
//! goes to the first member in `servers` whose catalog has it or a template matching it,
//! whether or not the client listed anything, so member order alone decides.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::Value;

use super::names::template_matches;
use crate::session::exposure::ResourceExposure;

/// The URIs a catalog holds at most, and the templates: a member's lists cannot grow a
/// session without bound. Past them a member's further entries are not known to route to it.
pub const MAX_URIS: usize = 10_000;
pub const MAX_TEMPLATES: usize = 1_000;
/// The pages of each list read at most: a member whose cursor never ends is read no further.
pub const MAX_PAGES: usize = 100;

/// One member's resources and templates, as its clients see them.
#[derive(Debug, Default)]
pub struct Catalog {
    uris: HashSet<String>,
    templates: Vec<String>,
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
    /// Takes in one page, keeping what `rules` show; `false` once a bound is reached.
    pub fn add(&mut self, page: Page, rules: &ResourceExposure) -> bool {
        let shown = |text: &String| rules.shows(text);
        for uri in page.resources.into_iter().filter_map(|e| e.uri) {
            if !shown(&uri) {
                continue;
            }
            if self.uris.len() >= MAX_URIS {
                self.truncated = true;
                return false;
            }
            self.uris.insert(uri);
        }
        for template in page.templates.into_iter().filter_map(|e| e.template) {
            if !shown(&template) || self.templates.contains(&template) {
                continue;
            }
            if self.templates.len() >= MAX_TEMPLATES {
                self.truncated = true;
                return false;
            }
            self.templates.push(template);
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
    fn a_catalog_serves_its_uris_and_what_its_templates_match_through_its_rules() {
        let rules = ResourceExposure {
            deny: vec!["file:///etc/*".into()],
            ..ResourceExposure::default()
        };
        let mut catalog = Catalog::default();
        let first = page(
            json!({ "resources": [{ "uri": "memo://a" }, { "uri": "file:///etc/passwd" }],
                                 "nextCursor": "2" }),
        );
        assert_eq!(first.next.as_deref(), Some("2"));
        assert!(catalog.add(first, &rules));
        assert!(catalog.add(
            page(json!({ "resourceTemplates": [{ "uriTemplate": "file:///{path}" }] })),
            &rules
        ));
        assert!(catalog.serves("memo://a"));
        assert!(!catalog.serves("memo://b"));
        assert!(catalog.serves("file:///etc/passwd"), "through the template");
        assert!(catalog.serves("file:///{path}"), "the template itself");
        assert!(!catalog.truncated());
    }

    #[test]
    fn a_catalog_stops_at_its_bound_and_says_so() {
        let mut catalog = Catalog::default();
        let many: Vec<_> = (0..MAX_URIS + 1)
            .map(|n| json!({ "uri": format!("memo://{n}") }))
            .collect();
        assert!(!catalog.add(
            page(json!({ "resources": many })),
            &ResourceExposure::default()
        ));
        assert!(catalog.truncated());
        assert!(catalog.serves("memo://0"));
        assert!(!catalog.serves(&format!("memo://{MAX_URIS}")));
        let unreadable = Page::read(json!([1]));
        assert!(unreadable.next.is_none());
    }
}
