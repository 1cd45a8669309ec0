//! Member names unique at every depth (RFC 8259 §4: names "SHOULD be unique", and parsers
//! differ on duplicates: most keep the last, some the first, some refuse). A message with a
//! duplicated name means different things to the proxy's checks and to the server behind it,
//! so the proxy refuses it instead of guessing; then every reading of a message, the proxy's
//! and the server's, is the same one.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Where the first duplicated member name is (`params.arguments.x`, `id`,
/// `params.items[2].uri`), or `None` when every name is unique. `Err` when the walk could not
/// read the value whole: malformed JSON, or JSON it cannot take (nesting deeper than
/// serde_json's limit, a number beyond a double, a lone surrogate, bytes that are not UTF-8),
/// where names after that point went unchecked.
pub fn first_duplicate(bytes: &[u8]) -> Result<Option<String>, serde_json::Error> {
    let mut found = None;
    let mut path = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let walked = Walk {
        path: &mut path,
        found: &mut found,
    }
    .deserialize(&mut deserializer);
    match (found, walked) {
        (Some(member), _) => Ok(Some(member)),
        (None, Err(unread)) => Err(unread),
        (None, Ok(())) => Ok(None),
    }
}

/// One step of the path to a value.
enum Step<'de> {
    Member(Cow<'de, str>),
    Index(usize),
}

/// Walks one value, remembering the path to it; stops at the first duplicated name.
struct Walk<'a, 'de> {
    path: &'a mut Vec<Step<'de>>,
    found: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// Maps with more members than this are checked with a set instead of a scan.
const SCANNED_MEMBERS: usize = 16;

impl<'de> Visitor<'de> for Walk<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        loop {
            self.path.push(Step::Index(index));
            let next = seq.next_element_seed(Walk {
                path: self.path,
                found: self.found,
            });
            self.path.pop();
            if next?.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut names: Vec<Cow<'de, str>> = Vec::new();
        let mut many: Option<HashSet<Cow<'de, str>>> = None;
        while let Some(Name(name)) = map.next_key::<Name<'de>>()? {
            if name.starts_with(RESERVED) {
                // serde_json reads such an object as the JSON text in its string: the proxy's
                // reading of it would not be the server's.
                return Err(de::Error::custom(format!(
                    "the member name {name:?} is reserved by the proxy's JSON reader"
                )));
            }
            let seen = match &mut many {
                Some(set) => !set.insert(name.clone()),
                None => names.contains(&name),
            };
            if seen {
                self.path.push(Step::Member(name));
                *self.found = Some(render(self.path));
                return Err(de::Error::custom("duplicated member name"));
            }
            match &mut many {
                Some(_) => {}
                None if names.len() == SCANNED_MEMBERS => {
                    let mut set: HashSet<_> = names.drain(..).collect();
                    set.insert(name.clone());
                    many = Some(set);
                }
                None => names.push(name.clone()),
            }
            self.path.push(Step::Member(name));
            let value = map.next_value_seed(Walk {
                path: self.path,
                found: self.found,
            });
            self.path.pop();
            value?;
        }
        Ok(())
    }
}

/// Member names the JSON library gives a meaning of its own (`$serde_json::private::RawValue`):
/// a message that holds one anywhere is refused.
const RESERVED: &str = "$serde_json::private::";

/// A member name, borrowed from the message unless it had escapes.
struct Name<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, name: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(name)))
            }
            fn visit_str<E>(self, name: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(name.to_owned())))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

/// `a.b[2].c`; a name that is not a plain word is quoted (`a["x.y"]`).
fn render(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Index(index) => out.push_str(&format!("[{index}]")),
            Step::Member(name) if is_word(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Step::Member(name) => {
                out.push('[');
                out.push_str(&serde_json::Value::from(name.as_ref()).to_string());
                out.push(']');
            }
        }
    }
    out
}

fn is_word(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'/' | b'$'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_duplicate_at_any_depth_and_names_its_path() {
        let cases = [
            (r#"{"a":1,"a":2}"#, Some("a")),
            (r#"{"params":{"uri":"x","uri":"y"}}"#, Some("params.uri")),
            (
                r#"{"params":{"items":[{"k":1},{"k":1,"k":2}]}}"#,
                Some("params.items[1].k"),
            ),
            (r#"{"a":{"x.y":1,"x.y":2}}"#, Some(r#"a["x.y"]"#)),
            (r#"{"a":1,"b":{"a":1}}"#, None),
            (r#"[{"a":1},{"a":1}]"#, None),
            ("{not json", None),
        ];
        for (text, path) in cases {
            let found = first_duplicate(text.as_bytes()).unwrap_or_default();
            assert_eq!(found.as_deref(), path, "{text}");
        }
    }

    /// What the walk cannot read it says it could not: the names after it went unchecked.
    #[test]
    fn what_cannot_be_walked_whole_is_an_error_not_a_pass() {
        let after = r#""k":1,"k":2}"#;
        let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
        for unread in [
            format!(r#"{{"big":1e400,{after}"#).into_bytes(),
            format!(r#"{{"deep":{deep},{after}"#).into_bytes(),
            format!(r#"{{"odd":"\ud800",{after}"#).into_bytes(),
            [
                &b"{\"x\":\""[..],
                &[0xff],
                format!(r#"",{after}"#).as_bytes(),
            ]
            .concat(),
            b"{not json".to_vec(),
        ] {
            let text = String::from_utf8_lossy(&unread).into_owned();
            assert!(first_duplicate(&unread).is_err(), "{text}");
        }
        let fine = format!(
            r#"{{"deep":{},"n":1e300}}"#,
            "[".repeat(100) + &"]".repeat(100)
        );
        assert_eq!(first_duplicate(fine.as_bytes()).unwrap(), None);
    }

    #[test]
    fn a_name_the_json_library_reads_as_raw_json_is_refused_at_any_depth() {
        let text = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","_meta":{"x":{"$serde_json::private::RawValue":"{\"name\":1}"}}}}"#;
        let refused = first_duplicate(text).unwrap_err().to_string();
        assert!(refused.contains("reserved"), "{refused}");
        let escaped = br#"{"a":{"\u0024serde_json::private::RawValue":"b"}}"#;
        assert!(first_duplicate(escaped).is_err(), "however spelled");
        assert!(crate::wire::jsonrpc::Message::parse(bytes::Bytes::from_static(text)).is_err());
    }

    #[test]
    fn escapes_do_not_hide_a_duplicate() {
        let text = r#"{"params":{"uri":"a","\u0075ri":"b"}}"#;
        assert_eq!(
            first_duplicate(text.as_bytes()).unwrap().as_deref(),
            Some("params.uri")
        );
    }

    #[test]
    fn maps_with_many_members_are_checked_as_well() {
        let members: Vec<String> = (0..40).map(|n| format!("\"m{n}\":{n}")).collect();
        let unique = format!("{{{}}}", members.join(","));
        assert_eq!(first_duplicate(unique.as_bytes()).unwrap(), None);
        for repeated in [3, 20, 39] {
            let text = format!("{{{},\"m{repeated}\":0}}", members.join(","));
            let expected = format!("m{repeated}");
            assert_eq!(
                first_duplicate(text.as_bytes()).unwrap().as_deref(),
                Some(&*expected)
            );
        }
    }
}
