//! Whether a client may reach a thing on a member, by the member's own rules
//! (`[servers.<m>.tools]`, `.prompts`, `.resources`) as at the member's own path: the one
//! decision every route takes (`tools/call`, `prompts/get`, `resources/read`, `subscribe`,
//! `unsubscribe`, `completion/complete` of both kinds of reference, a URI read through a
//! template). The virtual server's own rules are held at the session's door before a request
//! gets here; lists are shown by the same rules (`names`).

use super::names::{MemberNames, NameList};
use crate::wire::named::Named as Target;

/// The thing a request names, as the decision reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thing<'a> {
    /// A tool or prompt by the name clients of the virtual server call it.
    Name(NameList, &'a str),
    /// A resource, or a template, by its URI (as sent).
    Uri(&'a str),
}

impl<'a> From<&'a Target> for Thing<'a> {
    fn from(target: &'a Target) -> Thing<'a> {
        match target {
            Target::Tool(name) => Thing::Name(NameList::Tools, name),
            Target::Prompt(name) | Target::PromptReference(name) => {
                Thing::Name(NameList::Prompts, name)
            }
            Target::Resource(uri) | Target::ResourceReference(uri) => Thing::Uri(uri),
        }
    }
}

/// What a member is sent for a thing it may be reached for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reached {
    /// The member's own name of the tool or prompt.
    Name(String),
    /// The URI, as the client sent it.
    Uri,
}

/// Whether `thing` may be reached on `member` (`separator` composes its names), and as what;
/// `None`: it is none of the member's that its rules let clients see.
pub fn reach(member: &MemberNames, separator: &str, thing: Thing<'_>) -> Option<Reached> {
    match thing {
        Thing::Name(kind, composed) => member
            .server_name(kind, separator, composed)
            .map(Reached::Name),
        Thing::Uri(uri) => member.resources.shows(uri).then_some(Reached::Uri),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::exposure::{Exposure, ResourceExposure};

    fn tasks() -> MemberNames {
        MemberNames {
            name: "tasks".into(),
            tools: Exposure {
                deny: vec!["sleep".into()],
                ..Exposure::default()
            },
            prompts: Exposure::default(),
            resources: ResourceExposure {
                deny: vec![
                    "test://template/secret/data".into(),
                    "file:///etc/*".into(),
                    "file:///private/secret".into(),
                ],
                ..ResourceExposure::default()
            },
        }
    }

    #[test]
    fn a_members_rules_decide_for_names_and_uris_alike() {
        let tasks = tasks();
        let reach = |thing| reach(&tasks, "__", thing);
        assert_eq!(
            reach(Thing::Name(NameList::Tools, "tasks__echo")),
            Some(Reached::Name("echo".into()))
        );
        assert_eq!(reach(Thing::Name(NameList::Tools, "tasks__sleep")), None);
        assert_eq!(reach(Thing::Name(NameList::Tools, "notes__echo")), None);
        assert_eq!(
            reach(Thing::Name(NameList::Prompts, "tasks__greet")),
            Some(Reached::Name("greet".into()))
        );
        assert_eq!(
            reach(Thing::Uri("test://template/1/data")),
            Some(Reached::Uri)
        );
        for denied in [
            "test://template/secret/data",
            "file:///etc/passwd",
            "file:///private/secret",
            "file:///private/secret?",
            "file:///private/secret#x",
            "file:///private/secret?a=1",
            "file:///private/%73ecret",
            "file:///private/x/../secret",
        ] {
            assert_eq!(reach(Thing::Uri(denied)), None, "{denied}");
        }
    }

    #[test]
    fn every_kind_of_target_reads_as_a_thing() {
        let targets = [
            (Target::Tool("a".into()), Thing::Name(NameList::Tools, "a")),
            (
                Target::Prompt("b".into()),
                Thing::Name(NameList::Prompts, "b"),
            ),
            (
                Target::PromptReference("c".into()),
                Thing::Name(NameList::Prompts, "c"),
            ),
            (Target::Resource("d://".into()), Thing::Uri("d://")),
            (
                Target::ResourceReference("e://{x}".into()),
                Thing::Uri("e://{x}"),
            ),
        ];
        for (target, thing) in &targets {
            assert_eq!(Thing::from(target), *thing);
        }
    }
}
