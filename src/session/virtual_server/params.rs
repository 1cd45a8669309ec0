//! A request's params read as their members, each value left as it came: what a virtual server
//! needs to read one member (a call's `name`) and write the params again with that member
//! changed, without reading the others (a call's arguments) or parsing what it writes.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

/// The members of a params object in their order, names read (borrowed where they have no
/// escapes), values unread.
pub struct ParamMembers<'a> {
    members: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> ParamMembers<'a> {
    /// `None` when `text` is not a JSON object.
    pub fn read(text: &'a str) -> Option<ParamMembers<'a>> {
        serde_json::from_str(text).ok()
    }

    /// A member's value as a string: `None` when absent or not a string.
    pub fn string(&self, name: &str) -> Option<Cow<'a, str>> {
        let (_, value) = self.members.iter().find(|(key, _)| key == name)?;
        let text: &'a str = value.get();
        serde_json::from_str::<&'a str>(text)
            .map(Cow::Borrowed)
            .or_else(|_| serde_json::from_str::<String>(text).map(Cow::Owned))
            .ok()
    }

    /// A member's value, unread: `None` when absent.
    pub fn raw(&self, name: &str) -> Option<&'a RawValue> {
        let (_, value) = self.members.iter().find(|(key, _)| key == name)?;
        Some(value)
    }

    /// The params with the string `value` for the member `name` (every other as it came),
    /// written once.
    pub fn with_string(&self, name: &str, value: &str) -> Option<Box<RawValue>> {
        serde_json::value::to_raw_value(&Replaced {
            params: self,
            name,
            value,
        })
        .ok()
    }
}

impl<'de> Deserialize<'de> for ParamMembers<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = ParamMembers<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<ParamMembers<'de>, M::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some((key, value)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    members.push((key.0, value));
                }
                Ok(ParamMembers { members })
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// A member's name: borrowed from the text unless it had escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl<'de> Visitor<'de> for Name {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, name: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(name)))
            }
            fn visit_str<E>(self, name: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(name.to_owned())))
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// [`ParamMembers::with_string`]'s form as it is written.
struct Replaced<'p, 'a> {
    params: &'p ParamMembers<'a>,
    name: &'p str,
    value: &'p str,
}

impl Serialize for Replaced<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.params.members.len()))?;
        for (key, value) in &self.params.members {
            match key == self.name {
                true => map.serialize_entry(key, self.value)?,
                false => map.serialize_entry(key, value)?,
            }
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_is_replaced_where_it_stands_and_the_others_are_written_as_they_came() {
        let text = r#" { "arguments" : {"b":"\u00e9", "a":[1, 2]} , "n\u0061me" : "x__\u0065cho", "_meta":{} }"#;
        let params = ParamMembers::read(text).unwrap();
        assert_eq!(params.string("name").as_deref(), Some("x__echo"));
        let written = params.with_string("name", "echo\"1").unwrap();
        assert_eq!(
            written.get(),
            r#"{"arguments":{"b":"\u00e9", "a":[1, 2]},"name":"echo\"1","_meta":{}}"#
        );
    }

    #[test]
    fn what_is_not_an_object_or_not_a_string_reads_as_nothing() {
        assert!(ParamMembers::read("[1]").is_none());
        assert!(ParamMembers::read("{\"name\":").is_none());
        let params = ParamMembers::read(r#"{"name":7}"#).unwrap();
        assert_eq!(params.string("name"), None);
        assert_eq!(params.string("other"), None);
    }
}
