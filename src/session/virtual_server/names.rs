//! What a virtual server's clients call each member's tools, prompts and resources, and which
//! member a name or URI they send belongs to. A member's items are seen after its own rules
//! (`[servers.<m>.tools]` and the others: allow, deny, rename) under `<member><separator>`, or
//! under the member's own prefix where it has one.

use serde_json::value::RawValue;
use serde_json::Value;

use crate::session::exposure::{Exposure, ResourceExposure, ResourceList};

/// One member's rules, as its own server's clients see it.
#[derive(Debug, Clone)]
pub struct MemberNames {
    pub name: String,
    pub tools: Exposure,
    pub prompts: Exposure,
    pub resources: ResourceExposure,
}

/// Tools or prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameList {
    Tools,
    Prompts,
}

impl NameList {
    /// The list's key in a list result.
    pub fn key(self) -> &'static str {
        match self {
            NameList::Tools => "tools",
            NameList::Prompts => "prompts",
        }
    }
}

impl MemberNames {
    fn exposure(&self, kind: NameList) -> &Exposure {
        match kind {
            NameList::Tools => &self.tools,
            NameList::Prompts => &self.prompts,
        }
    }

    /// The member's name of the item clients call `composed`; `None` when it is none of the
    /// member's (another member's, or one its rules hide). Clients see the member's (exposed)
    /// names under `<member><separator>`, or as they are where the member has a prefix of its
    /// own.
    pub fn server_name(&self, kind: NameList, separator: &str, composed: &str) -> Option<String> {
        let exposure = self.exposure(kind);
        let exposed = match exposure.prefix.is_empty() {
            true => composed
                .strip_prefix(self.name.as_str())?
                .strip_prefix(separator)?,
            false => composed,
        };
        exposure.server_name(exposed)
    }

    /// What clients of the virtual server see before the member's (exposed) names: nothing
    /// where the member has a prefix of its own.
    fn composed_prefix(&self, kind: NameList, separator: &str) -> String {
        match self.exposure(kind).prefix.is_empty() {
            true => format!("{}{separator}", self.name),
            false => String::new(),
        }
    }

    /// A member's list result (`tools/list`, `prompts/list`) as the virtual server's clients
    /// see it: its rules applied, every name composed. `None`: not a list result.
    pub fn list(&self, kind: NameList, separator: &str, result: &RawValue) -> Option<Vec<Value>> {
        let exposed = match self.exposure(kind).is_identity() {
            true => None,
            false => Some(self.exposure(kind).list(result, kind.key())?),
        };
        let result = exposed.as_deref().unwrap_or(result);
        let mut result: Value = serde_json::from_str(result.get()).ok()?;
        let items = result.get_mut(kind.key())?.as_array_mut()?;
        let prefix = self.composed_prefix(kind, separator);
        for item in items.iter_mut() {
            if let Some(name) = item["name"].as_str() {
                item["name"] = Value::from(format!("{prefix}{name}"));
            }
        }
        Some(std::mem::take(items))
    }

    /// A member's `resources/list` or `resources/templates/list` result as the virtual
    /// server's clients see it: its resource rules applied (URIs are not renamed).
    pub fn resources(&self, list: ResourceList, result: &RawValue) -> Option<Vec<Value>> {
        let shown = match self.resources.is_identity() {
            true => None,
            false => Some(self.resources.list(result, list)?),
        };
        let result = shown.as_deref().unwrap_or(result);
        let mut result: Value = serde_json::from_str(result.get()).ok()?;
        let key = match list {
            ResourceList::Resources => "resources",
            ResourceList::Templates => "resourceTemplates",
        };
        Some(std::mem::take(result.get_mut(key)?.as_array_mut()?))
    }
}

/// Whether `uri` is one of the URIs of an RFC 6570 `template`: its literal parts in order,
/// each expression standing for any text (this decides which member a URI goes to, not what
/// the member makes of it).
pub fn template_matches(template: &str, uri: &str) -> bool {
    let mut literals = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        literals.push(&rest[..open]);
        match rest[open..].find('}') {
            Some(close) => rest = &rest[open + close + 1..],
            None => return false,
        }
    }
    literals.push(rest);
    let (first, last) = (literals[0], literals[literals.len() - 1]);
    if literals.len() == 1 {
        return uri == first;
    }
    let Some(mut remaining) = uri.strip_prefix(first) else {
        return false;
    };
    let Some(end) = remaining.len().checked_sub(last.len()) else {
        return false;
    };
    if !remaining.ends_with(last) {
        return false;
    }
    remaining = &remaining[..end];
    for literal in &literals[1..literals.len() - 1] {
        match remaining.find(literal) {
            Some(at) => remaining = &remaining[at + literal.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, tools: Exposure) -> MemberNames {
        MemberNames {
            name: name.to_owned(),
            tools,
            prompts: Exposure::default(),
            resources: ResourceExposure::default(),
        }
    }

    fn raw(value: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&value).unwrap()
    }

    #[test]
    fn names_are_the_members_behind_its_name_and_the_separator_both_ways() {
        let github = member("github", Exposure::default());
        let listed = github
            .list(
                NameList::Tools,
                "__",
                &raw(serde_json::json!({"tools": [{"name": "search"}]})),
            )
            .unwrap();
        assert_eq!(listed[0]["name"], "github__search");
        assert_eq!(
            github.server_name(NameList::Tools, "__", "github__search"),
            Some("search".into())
        );
        assert_eq!(
            github.server_name(NameList::Tools, "__", "tickets__search"),
            None
        );
        assert_eq!(github.server_name(NameList::Tools, "__", "search"), None);
    }

    #[test]
    fn a_members_own_rules_come_first_and_its_own_prefix_replaces_the_composed_one() {
        let rules = Exposure {
            deny: vec!["delete*".into()],
            rename: [("search".to_owned(), "find".to_owned())].into(),
            prefix: "gh_".into(),
            ..Exposure::default()
        };
        let github = member("github", rules);
        let result = raw(serde_json::json!({"tools": [
            {"name": "search"}, {"name": "delete_repo"}, {"name": "star"}
        ]}));
        let listed = github.list(NameList::Tools, "__", &result).unwrap();
        let names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["gh_find", "gh_star"]);
        assert_eq!(
            github.server_name(NameList::Tools, "__", "gh_find"),
            Some("search".into())
        );
        assert_eq!(
            github.server_name(NameList::Tools, "__", "gh_delete_repo"),
            None
        );
        assert_eq!(
            github.server_name(NameList::Tools, "__", "github__star"),
            None
        );
    }

    #[test]
    fn a_uri_matches_a_template_by_its_literal_parts_in_order() {
        assert!(template_matches(
            "demo://resource/{id}",
            "demo://resource/7"
        ));
        assert!(template_matches("file:///{+path}.md", "file:///a/b.md"));
        assert!(template_matches("x://{a}/y/{b}", "x://1/y/2"));
        assert!(!template_matches("x://{a}/y/{b}", "x://1/z/2"));
        assert!(!template_matches(
            "demo://resource/{id}",
            "test://resource/7"
        ));
        assert!(!template_matches("a{b}cd", "ac"));
        assert!(template_matches("static://only", "static://only"));
        assert!(!template_matches("broken://{open", "broken://x"));
    }
}
