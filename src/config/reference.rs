//! The configuration reference (`docs/src/reference/configuration.md`), rendered from the
//! declarations: every key with its TOML path, type, default, flag, environment variable and
//! doc. A test holds the checked-in page to the rendering.

use clap::{Arg, CommandFactory};

use super::keys::{Declared, SettingKey};
use super::{Cli, ConfigFlags};

/// Where the reference is checked in, from the crate's root.
pub const REFERENCE_PATH: &str = "docs/src/reference/configuration.md";

const HEADER: &str = "\
# Configuration reference

<!-- Rendered from the declarations in src/config/ by `UPDATE_REFERENCE=1 cargo test --lib \
config::reference`; do not edit by hand. -->

Every key is optional. A key can be set in the TOML file named by `--config FILE` (see
`config/proxy.toml`, every key with its default, commented) and by its flag, which wins over
the file; where a key also has an environment variable, the variable stands for the flag.
A boolean flag takes a value to turn an option off as well as on (`--trace-headers=false`);
alone, it means `true`. A relative path in the file is read from the file's folder, one given by
a flag or a variable from the working directory (the start logs each path it uses, absolute).
A duration is written `250ms`, `15s`, `10m` or `1h` (a bare number is
seconds). An unknown key, a wrong type or an impossible value stops start-up with a message
naming the key and line. How the file, the flags and the environment combine:
[Configuration](../configuration/index.md).
";

/// A key as the reference lists it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its TOML path: `listen`, `session.idle_ttl`.
    pub path: String,
    pub ty: String,
    /// The checks it declares (`bounded`, `positive`).
    pub checks: Vec<&'static str>,
    pub default: String,
    /// Its flags (`--idle-ttl`), and the environment variables standing for them.
    pub flags: Vec<String>,
    pub env: Vec<String>,
    pub doc: String,
}

/// A table of keys: the top level (`""`) or a section.
struct Table {
    name: String,
    doc: String,
    entries: Vec<Entry>,
}

/// Every key of the file, walked through the declarations, in order.
pub fn entries() -> Vec<Entry> {
    tables()
        .into_iter()
        .flat_map(|table| table.entries)
        .collect()
}

fn tables() -> Vec<Table> {
    let command = Cli::command();
    let mut tables = Vec::new();
    collect(
        &command,
        "",
        String::new(),
        ConfigFlags::keys(),
        &mut tables,
    );
    tables
}

/// The table `name` of `keys`, then its sections (`upstream`, then `upstream.tls`), each after
/// the table that holds it.
fn collect(
    command: &clap::Command,
    name: &str,
    doc: String,
    keys: Vec<SettingKey>,
    tables: &mut Vec<Table>,
) {
    let at = tables.len();
    tables.push(Table {
        name: name.to_owned(),
        doc,
        entries: Vec::new(),
    });
    let path = |key: &str| match name {
        "" => key.to_owned(),
        table => format!("{table}.{key}"),
    };
    let mut sections = Vec::new();
    for key in keys {
        match key.nested {
            Some(nested) if key.per_name => {
                let name = format!("{}.<name>", path(key.name));
                sections.push((name, key.text(), nested()));
            }
            Some(nested) => sections.push((path(key.name), key.text(), nested())),
            None => {
                let entry = entry(command, &path(key.name), &key);
                tables[at].entries.push(entry);
            }
        }
    }
    for (name, doc, keys) in sections {
        collect(command, &name, doc, keys, tables);
    }
}

fn entry(command: &clap::Command, path: &str, key: &SettingKey) -> Entry {
    let args: Vec<Arg> = match (key.flag_id, key.flags) {
        (Some(id), _) => command
            .get_arguments()
            .filter(|arg| arg.get_id() == id)
            .cloned()
            .collect(),
        (None, Some(augment)) => augment(clap::Command::new("flags"))
            .get_arguments()
            .cloned()
            .collect(),
        (None, None) => Vec::new(),
    };
    let (doc, default) = key.doc_and_default();
    let values: Vec<String> = args
        .iter()
        .flat_map(|arg| arg.get_possible_values())
        .map(|value| format!("`\"{}\"`", value.get_name()))
        .collect();
    let sized = args.iter().any(|arg| {
        (arg.get_value_names()).is_some_and(|names| names.iter().any(|name| name == "SIZE"))
    });
    let mut ty = match type_name(key.ty) {
        Some("integer") if sized => SIZE.to_owned(),
        Some(ty) => ty.to_owned(),
        None if !values.is_empty() => format!("string: {}", values.join(", ")),
        None => format!("{UNDESCRIBED} {}", key.ty),
    };
    for check in key.checks {
        ty.push_str(match (*check, key.ty) {
            ("positive", "Duration") => ", longer than zero",
            ("positive", _) => ", at least 1",
            _ => ", at most 366 days",
        });
    }
    Entry {
        path: path.to_owned(),
        ty,
        checks: key.checks.to_vec(),
        default: default.unwrap_or_default(),
        flags: args
            .iter()
            .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
            .collect(),
        env: args
            .iter()
            .filter_map(|arg| arg.get_env().map(|env| env.to_string_lossy().into_owned()))
            .collect(),
        doc,
    }
}

/// What the reference says of a type it has no name for: the test of the page refuses it.
const UNDESCRIBED: &str = "undescribed type";

/// A byte count, as `parse_size` reads it.
const SIZE: &str = "size: bytes, or with a unit (`256MiB`, `1GiB`)";

/// The type as an operator writes it in the file; `None` for a string of named values (or a
/// type without a name here).
fn type_name(ty: &str) -> Option<&'static str> {
    let ty = ty.replace(' ', "");
    let inner = ty
        .strip_prefix("Option<")
        .and_then(|t| t.strip_suffix('>'))
        .unwrap_or(&ty);
    match inner {
        "Duration" => Some("duration"),
        "usize" | "u64" | "u32" | "u16" => Some("integer"),
        "f64" => Some("number"),
        "bool" => Some("boolean"),
        "String" => Some("string"),
        "PathBuf" => Some("path"),
        "SocketAddr" => Some("address (host:port)"),
        "Vec<String>" | "Vec<Glob>" | "Vec<UriGlob>" => Some("list of strings"),
        "Vec<Cidr>" => Some("list of networks (CIDR: `10.0.0.0/8`, `::1/128`)"),
        "Vec<PathBuf>" => Some("list of paths"),
        "Vec<u16>" => Some("list of integers"),
        "SecretSource" => Some("table (`{ env = \"NAME\" }` or `{ file = \"/path\" }`)"),
        "BTreeMap<String,String>" => Some("table of strings"),
        "BTreeMap<String,f64>" => Some("table of numbers"),
        "ToolsConfig" => Some("table: the keys of `[tools]`"),
        "PromptsConfig" => Some("table: the keys of `[prompts]`"),
        "ResourcesConfig" => Some("table: the keys of `[resources]`"),
        "UpstreamConfig" => Some("table: the keys of `[upstream]`"),
        "SessionConfig" => Some("table: the keys of `[session]`"),
        _ => None,
    }
}

/// The reference page.
pub fn render_reference() -> String {
    let mut page = String::from(HEADER);
    for table in tables() {
        match table.name.as_str() {
            "" => page.push_str("\n## Top-level keys\n\n"),
            name => page.push_str(&format!("\n## `[{name}]`\n\n{}.\n\n", table.doc)),
        }
        page.push_str("| Key | Type | Default | Flag | Environment | Description |\n");
        page.push_str("|---|---|---|---|---|---|\n");
        for entry in &table.entries {
            page.push_str(&row(entry));
        }
    }
    page
}

fn row(entry: &Entry) -> String {
    let code = |items: &[String]| {
        items
            .iter()
            .map(|item| format!("`{item}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let cell = |text: &str| {
        // `<` and `>` outside code spans would read as HTML.
        let parts = text.replace('|', "\\|");
        let parts = parts.split('`').enumerate().map(|(i, part)| match i % 2 {
            0 => part.replace('<', "&lt;").replace('>', "&gt;"),
            _ => part.to_owned(),
        });
        parts.collect::<Vec<_>>().join("`")
    };
    format!(
        "| `{}` | {} | {} | {} | {} | {} |\n",
        entry.path,
        cell(&entry.ty),
        cell(&entry.default),
        code(&entry.flags),
        code(&entry.env),
        cell(&entry.doc),
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_checked_in_reference_is_the_rendering() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(REFERENCE_PATH);
        let rendered = render_reference();
        if std::env::var_os("UPDATE_REFERENCE").is_some_and(|v| v == "1") {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &rendered).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == rendered,
            "{REFERENCE_PATH} differs from the declarations in src/config/: render it again with \
             `UPDATE_REFERENCE=1 cargo test --lib config::reference` and commit it"
        );
    }

    /// Every key's `[default: …]` (what the help and the reference say) begins with the value
    /// its declaration gives it, where that value is plain (a number, a boolean, a duration, a
    /// text): a default changed in the code and not in its text fails here.
    #[test]
    fn every_default_text_says_the_declared_default() {
        fn walk(prefix: &str, keys: Vec<SettingKey>, checked: &mut usize, wrong: &mut Vec<String>) {
            for key in keys {
                let path = match prefix {
                    "" => key.name.to_owned(),
                    prefix => format!("{prefix}.{}", key.name),
                };
                if let Some(nested) = key.nested {
                    walk(&path, nested(), checked, wrong);
                    continue;
                }
                let (Some(said), Some(shown)) = (key.doc_and_default().1, (key.default_shown)())
                else {
                    continue;
                };
                *checked += 1;
                let begins = [":", ",", " "]
                    .iter()
                    .any(|after| said.starts_with(&format!("{shown}{after}")));
                // A duration may be written in another unit (`60s` for `1m`).
                let duration = |text: &str| crate::config::duration::parse_duration(text).ok();
                let same_duration = shown.ends_with(['s', 'm', 'h'])
                    && duration(&said).is_some()
                    && duration(&said) == duration(&shown);
                if said != shown && !begins && !same_duration {
                    wrong.push(format!("{path}: [default: {said}], but it is {shown}"));
                }
            }
        }
        let (mut checked, mut wrong) = (0, Vec::new());
        walk("", ConfigFlags::keys(), &mut checked, &mut wrong);
        assert!(checked >= 60, "{checked} defaults checked");
        assert!(
            wrong.is_empty(),
            "default texts that differ from the code:\n{}",
            wrong.join("\n")
        );
    }

    #[test]
    fn every_declared_type_has_its_name_in_the_reference() {
        let undescribed: Vec<String> = entries()
            .into_iter()
            .filter(|entry| entry.ty.starts_with(UNDESCRIBED))
            .map(|entry| format!("{}: {}", entry.path, entry.ty))
            .collect();
        assert!(
            undescribed.is_empty(),
            "name these types in config::reference::type_name: {undescribed:?}"
        );
    }

    /// A value of the type the reference documents, as the file writes it.
    fn example_of(ty: &str) -> String {
        let example = match ty {
            ty if ty.starts_with("duration") => "\"1s\"",
            ty if ty.starts_with("integer") => "1",
            ty if ty.starts_with(SIZE) => "\"1MiB\"",
            "number" => "1.5",
            "boolean" => "true",
            "string" => "\"x\"",
            "path" => "\"/tmp/x\"",
            "address (host:port)" => "\"127.0.0.1:1\"",
            "list of strings" => "[\"x\"]",
            "list of paths" => "[\"/tmp\"]",
            "list of integers" => "[1]",
            ty if ty.starts_with("list of networks") => "[\"10.0.0.0/8\"]",
            ty if ty.starts_with("table (`{ env") => "{ env = \"X\" }",
            "table of strings" => "{ a = \"b\" }",
            "table of numbers" => "{ a = 1.5 }",
            ty if ty.starts_with("table: the keys of") => "{}",
            // The first of the words it lists: `string: `"auto"`, `"sse"``.
            ty if ty.starts_with("string: `\"") => {
                let first = &ty["string: `".len()..];
                return first[..first.find('`').unwrap()].to_owned();
            }
            other => panic!("no example of the documented type {other:?}"),
        };
        example.to_owned()
    }

    /// Written as the reference documents it, every key loads: a type the page states wrongly
    /// (a list said to be a string, say) fails here.
    #[test]
    fn every_key_loads_written_in_its_documented_type() {
        for entry in entries() {
            let path = entry.path.replace("<name>", "n");
            let value = example_of(&entry.ty);
            let file = match path.rsplit_once('.') {
                Some((table, key)) => format!("[{table}]\n{key} = {value}\n"),
                None => format!("{path} = {value}\n"),
            };
            if let Err(error) = super::super::Config::parse(&file) {
                panic!("{} as `{}`: {error}\n{file}", entry.path, entry.ty);
            }
        }
    }

    #[test]
    fn the_node_id_rule_the_reference_states_is_the_codes() {
        let node_id = entries().into_iter().find(|e| e.path == "cluster.node_id");
        let rule = format!("1 to {}", crate::base::ids::MAX_NODE_NAME);
        assert!(node_id.unwrap().doc.contains(&rule), "{rule}");
    }

    #[test]
    fn the_reference_names_every_key_and_every_flag_of_the_help() {
        let page = render_reference();
        let entries = entries();
        assert!(entries.len() >= 90, "{} keys", entries.len());
        for entry in &entries {
            let named = format!("| `{}` |", entry.path);
            assert!(
                page.contains(&named),
                "{} is not in the reference",
                entry.path
            );
        }
        let listed: Vec<&String> = entries.iter().flat_map(|e| &e.flags).collect();
        let help = Cli::command().render_long_help().to_string();
        for arg in Cli::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let flag = format!("--{long}");
            if matches!(long, "config" | "help" | "version") {
                continue;
            }
            assert!(help.contains(&flag), "{flag} is not in --help");
            assert!(
                listed.contains(&&flag),
                "{flag} is in --help but sets no key of the reference"
            );
        }
    }

    #[test]
    fn every_duration_is_bounded_but_those_that_never_were() {
        // Durations the configuration has never held to the bound; every new one is.
        let unbounded = [
            "session.anonymous_pool_wait",
            "auth.clock_skew",
            "auth.jwks_refetch_floor",
            "auth.jwks_max_age",
            "auth.jwks_stale_grace",
        ];
        for entry in entries().iter().filter(|e| e.ty.starts_with("duration")) {
            let bounded = entry.checks.contains(&"bounded");
            assert!(
                bounded != unbounded.contains(&entry.path.as_str()),
                "{}: declare #[check(bounded)] (at most 366 days)",
                entry.path
            );
        }
    }

    #[test]
    fn every_key_states_its_default_and_its_type() {
        for entry in entries() {
            assert!(!entry.default.is_empty(), "{}: no [default: …]", entry.path);
            assert!(!entry.doc.is_empty(), "{}: no doc", entry.path);
        }
    }
}
