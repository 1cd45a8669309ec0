//! What a member serves of resources, for routing: every URI and template its lists name,
//! every page of them, kept until it says its resources changed. A URI goes to the first member
//! in `servers` whose catalog has it, however it is spelled (as listed, or as a server that
//! normalises it and reads its path without query and fragment reads it), or a template
//! matching it, whether or not the client listed anything, so member order alone decides; that
//! member's rules then decide whether the client may reach it (one it lists but hides is not
//! served by a later member either). A catalog that could not be read whole gives no URI it
//! lacks to a later member.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::Value;

use super::names::template_matches;
use crate::session::exposure::uri_readings;

/// The URIs a catalog holds at most, the templates, and their bytes (each URI counted in its
/// three spellings kept): a member's lists cannot grow a session without bound.
pub const MAX_URIS: usize = 10_000;
pub const MAX_TEMPLATES: usize = 1_000;
pub const MAX_BYTES: usize = 2 << 20;
/// The longest URI or template kept: a longer one is left out (the catalog is then not whole).
pub const MAX_ENTRY_BYTES: usize = 2048;
/// The pages of each list read at most: a member whose cursor never ends is read no further.
pub const MAX_PAGES: usize = 100;

/// One member's resources and templates.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Its URIs as listed.
    uris: HashSet<String>,
    /// Its URIs as a server that normalises them and reads the path alone reads them (the
    /// normalised and the decoded reading without query and fragment).
    paths: HashSet<String>,
    templates: Vec<String>,
    /// The bytes of all it keeps.
    bytes: usize,
    /// Whether a bound stopped the reading (a list longer than it, an entry longer, a cursor
    /// past it).
    truncated: bool,
    /// Whether the reading failed (an error, no answer in time).
    failed: bool,
}

/// What becomes of an entry a page offers.
enum Room {
    Taken,
    /// Too long: left out, the reading goes on.
    Skipped,
    /// A bound reached: the reading stops.
    Full,
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
        for uri in uris {
            if !self.add_uri(uri) {
                return false;
            }
        }
        for template in templates {
            if !self.add_template(template) {
                return false;
            }
        }
        true
    }

    fn add_uri(&mut self, uri: String) -> bool {
        if self.uris.contains(&uri) {
            return true;
        }
        let [.., normal_path, decoded_path] = uri_readings(&uri);
        let bytes = uri.len() + normal_path.len() + decoded_path.len();
        match self.room_for(uri.len(), bytes, self.uris.len() < MAX_URIS) {
            Room::Taken => {
                self.paths.insert(normal_path.into_owned());
                self.paths.insert(decoded_path.into_owned());
                self.uris.insert(uri);
                true
            }
            Room::Skipped => true,
            Room::Full => false,
        }
    }

    fn add_template(&mut self, template: String) -> bool {
        if self.templates.contains(&template) {
            return true;
        }
        let counted_room = self.templates.len() < MAX_TEMPLATES;
        match self.room_for(template.len(), template.len(), counted_room) {
            Room::Taken => {
                self.templates.push(template);
                true
            }
            Room::Skipped => true,
            Room::Full => false,
        }
    }

    /// Whether an entry of `length` bytes (`bytes` kept) is taken; one left out leaves the
    /// catalog not whole.
    fn room_for(&mut self, length: usize, bytes: usize, counted_room: bool) -> Room {
        if length > MAX_ENTRY_BYTES {
            self.truncated = true;
            return Room::Skipped;
        }
        if !counted_room || self.bytes + bytes > MAX_BYTES {
            self.truncated = true;
            return Room::Full;
        }
        self.bytes += bytes;
        Room::Taken
    }

    /// Notes that a list went on past [`MAX_PAGES`].
    pub fn cut_short(&mut self) {
        self.truncated = true;
    }

    /// Notes that the reading failed: what was read is kept for this routing, not for later.
    pub fn fail(&mut self) {
        self.failed = true;
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }

    pub fn failed(&self) -> bool {
        self.failed
    }

    /// Whether the catalog is the member's whole lists.
    pub fn whole(&self) -> bool {
        !self.truncated && !self.failed
    }

    /// Whether the member lists `uri` (however spelled), or a template it matches (or that
    /// template itself, as a completion names it).
    pub fn serves(&self, uri: &str) -> bool {
        if self.uris.contains(uri) {
            return true;
        }
        let [sent, normalised, decoded, _, normal_path, decoded_path] = uri_readings(uri);
        if self.paths.contains(&*normal_path) || self.paths.contains(&*decoded_path) {
            return true;
        }
        let spellings = [sent, normalised, decoded, normal_path, decoded_path];
        self.templates.iter().any(|template| {
            template == uri
                || spellings
                    .iter()
                    .any(|spelling| template_matches(template, spelling))
        })
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
    fn a_catalog_serves_its_uris_however_spelled_and_what_its_templates_match() {
        let mut catalog = Catalog::default();
        let first = page(
            json!({ "resources": [{ "uri": "memo://good/notes" }, { "uri": "memo://good/secret" }],
                                 "nextCursor": "2" }),
        );
        assert_eq!(first.next.as_deref(), Some("2"));
        assert!(catalog.add(first));
        assert!(catalog.add(page(
            json!({ "resourceTemplates": [{ "uriTemplate": "file:///{path}" }] })
        )));
        for spelling in [
            "memo://good/notes",
            "memo://good/%6Eotes",
            "MEMO://good/notes",
            "memo://good/./notes",
            "memo://good/notes#x",
            "memo://good/%73ecret",
            "memo://good/secret?a",
        ] {
            assert!(catalog.serves(spelling), "{spelling}");
        }
        assert!(!catalog.serves("memo://good/other"));
        assert!(catalog.serves("file:///x"), "through the template");
        assert!(
            catalog.serves("FILE:///x"),
            "through the template, however spelled"
        );
        assert!(catalog.serves("file:///{path}"), "the template itself");
        assert!(catalog.whole());
    }

    #[test]
    fn a_catalog_stops_at_its_bounds_and_is_then_not_whole() {
        let mut catalog = Catalog::default();
        let many: Vec<_> = (0..MAX_URIS + 1)
            .map(|n| json!({ "uri": format!("memo://{n}") }))
            .collect();
        assert!(!catalog.add(page(json!({ "resources": many }))));
        assert!(catalog.truncated() && !catalog.whole());
        assert!(catalog.serves("memo://0"));
        assert!(!catalog.serves(&format!("memo://{MAX_URIS}")));
        let unreadable = Page::read(json!([1]));
        assert!(unreadable.next.is_none());

        // A long entry is left out, and the catalog is not whole; the bytes have a bound.
        let mut catalog = Catalog::default();
        let long = "x".repeat(MAX_ENTRY_BYTES + 1);
        assert!(catalog.add(page(json!({ "resources": [{ "uri": long }] }))));
        assert!(!catalog.serves(&long) && !catalog.whole());
        let fat: Vec<_> = (0..MAX_BYTES / 3000 + 1)
            .map(|n| json!({ "uri": format!("memo://{n}/{}", "y".repeat(990)) }))
            .collect();
        let mut catalog = Catalog::default();
        assert!(!catalog.add(page(json!({ "resources": fat }))));
        assert!(catalog.truncated());
        let mut failed = Catalog::default();
        failed.fail();
        assert!(failed.failed() && !failed.whole());
    }
}
