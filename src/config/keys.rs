//! One declaration per configuration key: [`settings!`] takes each key's doc (the flag's help
//! and the reference text, ending in `[default: …]`), type, default, serde and clap attributes,
//! checks, and how its flag merges over the file; it writes the section as the file spells it,
//! its defaults, its flags (`clap::Args`), the merge, the checks, and the description the
//! reference is rendered from.

use std::collections::BTreeMap;

use super::SecretSource;

/// One key as declared: what the reference and the tests walk.
#[derive(Debug, Clone, Copy)]
pub struct SettingKey {
    /// Its name within its section (`idle_ttl`).
    pub name: &'static str,
    /// Its Rust type, as written in the declaration.
    pub ty: &'static str,
    /// The doc comment's lines.
    pub doc: &'static [&'static str],
    /// The id of the flag that sets it, if one does (its name, unless written by hand).
    pub flag_id: Option<&'static str>,
    /// Flags of their own that set it (a secret by where it is: `…-env`, `…-file`).
    pub flags: Option<fn(clap::Command) -> clap::Command>,
    /// The checks it declares (`bounded`, `positive`: functions of [`check`]).
    pub checks: &'static [&'static str],
    /// A section (a table of keys of its own): its keys.
    pub nested: Option<fn() -> Vec<SettingKey>>,
    /// A table of such sections by a name of the operator's (`[servers.<name>]`).
    pub per_name: bool,
    /// Its default as the reference writes a plain value (`256`, `10m`, `true`, `text`), for a
    /// key of such a type: what its `[default: …]` must say (read by the test of the texts).
    #[cfg_attr(not(test), allow(dead_code))]
    pub default_shown: fn() -> Option<String>,
}

impl SettingKey {
    /// The doc comment as one paragraph, as clap shows it (the trailing period dropped).
    pub fn text(&self) -> String {
        let joined = self
            .doc
            .iter()
            .map(|line| line.trim())
            .collect::<Vec<_>>()
            .join(" ");
        joined.trim_end_matches('.').to_owned()
    }

    /// The doc without its `[default: …]`, and what that says.
    pub fn doc_and_default(&self) -> (String, Option<String>) {
        let text = self.text();
        match text.rfind("[default: ") {
            Some(at) if text.ends_with(']') => (
                text[..at].trim_end().to_owned(),
                Some(text[at + "[default: ".len()..text.len() - 1].to_owned()),
            ),
            _ => (text, None),
        }
    }
}

/// A section whose keys are declared: its flags struct names them.
pub trait Declared {
    fn keys() -> Vec<SettingKey>;
}

/// The keys of a nested section, for kind `section` (and `named_sections`: a table of them).
macro_rules! nested_keys {
    (section, $($flag:tt)*) => {
        Some(<$($flag)* as $crate::config::keys::Declared>::keys as fn() -> Vec<$crate::config::keys::SettingKey>)
    };
    (named_sections, $($flag:tt)*) => {
        Some(<$($flag)* as $crate::config::keys::Declared>::keys as fn() -> Vec<$crate::config::keys::SettingKey>)
    };
    ($kind:ident, $($flag:tt)*) => {
        None
    };
}

/// The flags of their own that set a key of kind `secret`.
macro_rules! own_flags {
    (secret, $($flag:tt)*) => {
        Some(<$($flag)* as clap::Args>::augment_args as fn(clap::Command) -> clap::Command)
    };
    ($kind:ident, $($flag:tt)*) => {
        None
    };
}

/// The checks a key may declare (`#[check(bounded, positive)]`), each refusing a value with a
/// message naming the key.
pub mod check {
    use std::time::Duration;

    use anyhow::bail;

    use crate::base::clock::MAX_DURATION;

    /// A table whose keys declare checks.
    pub trait Checked {
        /// Every declared check of its keys; `prefix` names the table in messages.
        fn check_keys(&self, prefix: &str) -> anyhow::Result<()>;
    }

    impl<T: Checked> Checked for Option<T> {
        fn check_keys(&self, prefix: &str) -> anyhow::Result<()> {
            self.as_ref()
                .map_or(Ok(()), |table| table.check_keys(prefix))
        }
    }

    /// `prefix.name`, or `name` at the top level.
    pub fn path(prefix: &str, name: &str) -> String {
        let name = name.strip_prefix("r#").unwrap_or(name);
        match prefix {
            "" => name.to_owned(),
            prefix => format!("{prefix}.{name}"),
        }
    }

    /// At most [`MAX_DURATION`]: a deadline must fit the clock.
    pub fn bounded(value: &Duration, key: &str) -> anyhow::Result<()> {
        if *value > MAX_DURATION {
            bail!(
                "{key} is {}s; a duration may be at most {}s (366 days)",
                value.as_secs(),
                MAX_DURATION.as_secs()
            );
        }
        Ok(())
    }

    /// A count of at least 1, a duration longer than zero.
    pub fn positive<T: Positive>(value: &T, key: &str) -> anyhow::Result<()> {
        value.positive(key)
    }

    /// What `positive` means for a type.
    pub trait Positive {
        fn positive(&self, key: &str) -> anyhow::Result<()>;
    }

    impl Positive for usize {
        fn positive(&self, key: &str) -> anyhow::Result<()> {
            if *self == 0 {
                bail!("{key} must be at least 1");
            }
            Ok(())
        }
    }

    impl Positive for Duration {
        fn positive(&self, key: &str) -> anyhow::Result<()> {
            if self.is_zero() {
                bail!("{key} must be longer than zero");
            }
            Ok(())
        }
    }
}

/// A nested section's own checks, for kind `section`; each named one's, for `named_sections`.
macro_rules! check_nested {
    (section, $value:expr, $key:expr) => {
        $crate::config::keys::check::Checked::check_keys($value, $key)?
    };
    (named_sections, $value:expr, $key:expr) => {
        for (name, table) in $value {
            $crate::config::keys::check::Checked::check_keys(table, &format!("{}.{name}", $key))?
        }
    };
    ($kind:ident, $value:expr, $key:expr) => {};
}

/// Declares a section of the configuration, one entry per key:
///
/// ```text
/// /// Help and reference text [default: 10m].
/// #[serde(deserialize_with = "duration")]            // how the file spells it
/// #[arg(long, value_name = "DURATION", value_parser = parse_duration)]  // its flag
/// pub idle_ttl: Duration = Duration::from_secs(600), set;
/// ```
///
/// The last word is how the flag merges over the file (a function of [`merge`]), optionally
/// with the flag's type (`list(Vec<String>)`; `Option<T>` when absent). `none(())` with
/// `#[arg(skip)]` is a key without a flag; `#[flag_id = "…"]` (last, before the key) names
/// its flag's id where its name is another table's key's too (with `#[arg(id = "…")]`);
/// `section(FooFlags)` with `#[command(flatten)]` a
/// table of keys declared on their own; `named_sections(FooFlags)` with `#[arg(skip)]` a table of
/// such tables by a name of the operator's, without flags; `secret(FooFlags)` a secret's `…-env`
/// and `…-file`.
macro_rules! settings {
    // Each key's flag type made explicit (`Option<T>` unless given), as clap reads it.
    (
        $(#[doc = $sdoc:literal])*
        pub struct $name:ident, flags $flags:ident { $($keys:tt)* }
    ) => {
        $crate::config::keys::settings!(@explicit
            { $(#[doc = $sdoc])* pub struct $name, flags $flags } [] $($keys)*
        );
    };
    (@explicit { $($head:tt)* } [$($done:tt)*]
        $(#[$($attr:tt)*])*
        pub $field:ident: $ty:ty = $default:expr, $kind:ident;
        $($rest:tt)*
    ) => {
        $crate::config::keys::settings!(@explicit { $($head)* } [$($done)*
            $(#[$($attr)*])* pub $field: $ty = $default, $kind(Option<$ty>);
        ] $($rest)*);
    };
    (@explicit { $($head:tt)* } [$($done:tt)*]
        $(#[$($attr:tt)*])*
        pub $field:ident: $ty:ty = $default:expr, $kind:ident($($flag:tt)*);
        $($rest:tt)*
    ) => {
        $crate::config::keys::settings!(@explicit { $($head)* } [$($done)*
            $(#[$($attr)*])* pub $field: $ty = $default, $kind($($flag)*);
        ] $($rest)*);
    };
    (@explicit { $($head:tt)* } [$($done:tt)*]) => {
        $crate::config::keys::settings!(@emit { $($head)* } $($done)*);
    };
    (@emit
        {
            $(#[doc = $sdoc:literal])*
            pub struct $name:ident, flags $flags:ident
        }
        $(
            $(#[doc = $doc:literal])*
            $(#[serde($($serde:tt)*)])*
            $(#[arg($($arg:tt)*)])*
            $(#[command($($cmd:tt)*)])*
            $(#[check($($check:ident),*)])?
            $(#[flag_id = $fid:literal])?
            pub $field:ident: $ty:ty = $default:expr, $kind:ident($($flag:tt)*);
        )*
    ) => {
        $(#[doc = $sdoc])*
        #[derive(Debug, Clone, serde::Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct $name {
            $(
                $(#[doc = $doc])*
                $(#[serde($($serde)*)])*
                pub $field: $ty,
            )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $($field: $default,)* }
            }
        }

        $(#[doc = $sdoc])*
        /// Its flags: each replaces the file's value when given.
        #[derive(Debug, Clone, Default, clap::Args)]
        pub struct $flags {
            $(
                $(#[doc = $doc])*
                $(#[arg($($arg)*)])*
                $(#[command($($cmd)*)])*
                pub $field: $($flag)*,
            )*
        }

        impl $flags {
            /// The flags given, over `config`.
            pub fn apply(&self, config: &mut $name) {
                $($crate::config::keys::merge::$kind(&mut config.$field, &self.$field);)*
            }
        }

        impl $crate::config::keys::check::Checked for $name {
            // A table without checks names neither.
            #[allow(unused_variables, unused_imports)]
            fn check_keys(&self, prefix: &str) -> anyhow::Result<()> {
                use $crate::config::keys::check::path;
                $(
                    $($(
                        $crate::config::keys::check::$check(
                            &self.$field,
                            &path(prefix, stringify!($field)),
                        )?;
                    )*)?
                    $crate::config::keys::check_nested!(
                        $kind, &self.$field, &path(prefix, stringify!($field))
                    );
                )*
                Ok(())
            }
        }

        impl $crate::config::paths::VisitPaths for $name {
            fn visit_paths(
                &mut self,
                prefix: &str,
                visit: &mut dyn FnMut(&str, &mut std::path::PathBuf),
            ) {
                #[allow(unused_imports)]
                use $crate::config::paths::{NotVisited as _, Visited as _};
                $(
                    (&$crate::config::paths::Probe(std::cell::RefCell::new(&mut self.$field)))
                        .visit(&$crate::config::keys::check::path(prefix, stringify!($field)), visit);
                )*
            }
        }

        impl $crate::config::keys::merge::Section<$name> for $flags {
            fn apply_to(&self, config: &mut $name) {
                self.apply(config);
            }
        }

        impl $crate::config::keys::Declared for $flags {
            fn keys() -> Vec<$crate::config::keys::SettingKey> {
                vec![$(
                    $crate::config::keys::SettingKey {
                        name: $crate::config::keys::key_name(stringify!($field)),
                        ty: stringify!($ty),
                        doc: &[$($doc),*],
                        flag_id: match stringify!($kind) {
                            "none" | "section" | "named_sections" | "secret" => None,
                            _ => Some($crate::config::keys::first!($($fid,)? stringify!($field))),
                        },
                        flags: $crate::config::keys::own_flags!($kind, $($flag)*),
                        checks: &[$($(stringify!($check)),*)?],
                        nested: $crate::config::keys::nested_keys!($kind, $($flag)*),
                        per_name: stringify!($kind) == "named_sections",
                        default_shown: || {
                            #[allow(unused_imports)]
                            use $crate::config::keys::shown::{Plain as _, NotPlain as _};
                            (&$crate::config::keys::shown::Probe(&$name::default().$field)).shown()
                        },
                    },
                )*]
            }
        }
    };
}

/// A default as the reference writes it, for the types whose values are plain (numbers,
/// booleans, durations, text); for any other, nothing (picked by method resolution on
/// `&Probe`: `Plain::shown` where the type is plain, else `NotPlain::shown` one reference out).
pub mod shown {
    use std::time::Duration;

    pub struct Probe<'a, T>(pub &'a T);

    /// A type whose default is written as a plain value.
    pub trait Written {
        fn written(&self) -> String;
    }

    macro_rules! displayed {
        ($($ty:ty),*) => {$(
            impl Written for $ty {
                fn written(&self) -> String {
                    self.to_string()
                }
            }
        )*};
    }
    displayed!(usize, u64, u32, u16, u8, i64, f64, bool, String);

    /// In the largest unit that divides it: `10m`, `5s`, `250ms`, `0s`.
    impl Written for Duration {
        fn written(&self) -> String {
            crate::base::clock::written(*self)
        }
    }

    pub trait Plain {
        fn shown(&self) -> Option<String>;
    }

    /// An empty text is no value: such a key's default is said in words (`none`, `its URL`).
    impl<T: Written> Plain for Probe<'_, T> {
        fn shown(&self) -> Option<String> {
            Some(self.0.written()).filter(|written| !written.is_empty())
        }
    }

    pub trait NotPlain {
        fn shown(&self) -> Option<String> {
            None
        }
    }

    impl<T> NotPlain for &Probe<'_, T> {}
}

/// A key's name as the file spells it: its field's, without the `r#` of a field named after
/// a Rust keyword (`virtual`).
pub fn key_name(field: &'static str) -> &'static str {
    field.strip_prefix("r#").unwrap_or(field)
}

/// The first of its arguments: a key's flag id as declared (`#[flag_id = "…"]`, the id its
/// `#[arg(id = …)]` gives it where its name is another key's too), else its name.
macro_rules! first {
    ($first:expr $(, $rest:expr)*) => {
        $first
    };
}

pub(crate) use {check_nested, first, nested_keys, own_flags, settings};

/// How a flag merges over the file's value, by the kind its key declares.
pub mod merge {
    use super::*;

    /// A value given replaces the file's.
    pub fn set<T: Clone>(value: &mut T, flag: &Option<T>) {
        if let Some(flag) = flag {
            *value = flag.clone();
        }
    }

    /// An optional key: a value given replaces the file's, absence leaves it.
    pub fn some<T: Clone>(value: &mut Option<T>, flag: &Option<T>) {
        if flag.is_some() {
            *value = flag.clone();
        }
    }

    /// A repeatable flag: the values given replace the file's list.
    pub fn list<T: Clone>(value: &mut Vec<T>, flag: &[T]) {
        if !flag.is_empty() {
            *value = flag.to_vec();
        }
    }

    /// A repeatable flag whose values may come from a comma-separated variable: trimmed, and a
    /// variable set empty names nothing (the file's list stays).
    pub fn trimmed(value: &mut Vec<String>, flag: &[String]) {
        let given: Vec<String> = flag
            .iter()
            .map(|item| item.trim())
            .filter(|item| !item.is_empty())
            .map(str::to_owned)
            .collect();
        list(value, &given);
    }

    /// `NAME=VALUE` pairs set over the file's table.
    pub fn extend(value: &mut BTreeMap<String, String>, flag: &[(String, String)]) {
        value.extend(flag.iter().cloned());
    }

    /// A key without a flag.
    pub fn none<T>(_: &mut T, _: &()) {}

    /// A nested section: its own flags over it.
    pub fn section<T, F: Section<T>>(value: &mut T, flags: &F) {
        flags.apply_to(value);
    }

    /// Tables by a name of the operator's: no flags set them.
    pub fn named_sections<T, F>(_: &mut BTreeMap<String, T>, _: &F) {}

    /// A secret by where it is: the `…-env` or `…-file` flag given replaces the file's.
    pub fn secret<F: SecretFlags>(value: &mut Option<SecretSource>, flags: &F) {
        if let Some(source) = flags.source() {
            *value = Some(source);
        }
    }

    /// The two flags of a secret: the variable holding it, or the file.
    pub trait SecretFlags {
        fn source(&self) -> Option<SecretSource>;
    }

    /// The flags of a nested section.
    pub trait Section<T> {
        fn apply_to(&self, config: &mut T);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_doc_reads_as_the_help_does_with_its_default_apart() {
        let key = SettingKey {
            name: "idle_ttl",
            ty: "Duration",
            doc: &[" End a session after this long", " unused [default: 10m]."],
            flag_id: Some("idle_ttl"),
            flags: None,
            checks: &[],
            nested: None,
            per_name: false,
            default_shown: || Some("10m".into()),
        };
        assert_eq!(
            key.text(),
            "End a session after this long unused [default: 10m]"
        );
        let (doc, default) = key.doc_and_default();
        assert_eq!(doc, "End a session after this long unused");
        assert_eq!(default.as_deref(), Some("10m"));
    }

    #[test]
    fn flags_replace_what_they_give_and_leave_the_rest() {
        let mut hosts = vec!["file.example".to_owned()];
        merge::trimmed(&mut hosts, &[" ".to_owned()]);
        assert_eq!(
            hosts,
            ["file.example"],
            "a variable set empty names no host"
        );
        merge::trimmed(
            &mut hosts,
            &[" a.example".to_owned(), "b.example ".to_owned()],
        );
        assert_eq!(hosts, ["a.example", "b.example"]);
        let mut limit = 5;
        merge::set(&mut limit, &None);
        assert_eq!(limit, 5);
        merge::set(&mut limit, &Some(7));
        assert_eq!(limit, 7);
        let mut env = BTreeMap::from([("A".to_owned(), "1".to_owned())]);
        merge::extend(&mut env, &[("B".to_owned(), "2".to_owned())]);
        assert_eq!(env.len(), 2, "--env adds to the file's table");
    }
}
