//! The book states a configuration key's default in one form, `` `key` (default V) ``, with V as
//! the configuration reference (rendered from the declarations, and checked against them by its
//! own test) writes it; in a TOML block, as a comment `# default V` (or `(default V)`) on the
//! key's line. A default stated that way and differing from the code's fails here, as does a
//! key the reference does not know.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The reference's keys (dotted) and their defaults as it writes them.
fn reference_defaults(book: &Path) -> BTreeMap<String, String> {
    let page = std::fs::read_to_string(book.join("reference/configuration.md")).unwrap();
    let mut defaults = BTreeMap::new();
    for row in page.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        if cells.len() > 2 {
            let key = cells[0].trim_start_matches("| ").trim_matches('`');
            defaults.insert(key.to_owned(), plain(cells[2]));
        }
    }
    defaults
}

/// A default as text to compare: without backticks, quotes and HTML escapes.
fn plain(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace(['`', '"'], "")
        .trim()
        .to_owned()
}

/// The key `named` stands for: itself when dotted (a named server's, `servers.<name>.…`, as the
/// default server's), else the one key ending in it.
fn resolve<'a>(named: &str, defaults: &'a BTreeMap<String, String>) -> Result<&'a str, String> {
    let named = match named.strip_prefix("servers.") {
        Some(rest) => rest.split_once('.').map_or(rest, |(_, key)| key),
        None => named,
    };
    if let Some((key, _)) = defaults.get_key_value(named) {
        return Ok(key);
    }
    let suffix = format!(".{named}");
    let mut found = defaults.keys().filter(|key| key.ends_with(&suffix));
    match (found.next(), found.next()) {
        (Some(key), None) => Ok(key),
        (Some(_), Some(_)) => Err(format!("`{named}` names several keys: write it dotted")),
        (None, _) => Err(format!(
            "`{named}` is no key of the configuration reference"
        )),
    }
}

fn pages(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            pages(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "md") {
            found.push(path);
        }
    }
}

/// The defaults stated in prose on `line`: (key, value) for each `` `key` (default V) ``.
fn in_prose(line: &str) -> Vec<(String, String)> {
    const MARK: &str = "` (default ";
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find(MARK) {
        let key = rest[..at].rsplit('`').next().unwrap_or_default();
        let after = &rest[at + MARK.len()..];
        let value = after.split(')').next().unwrap_or_default();
        if !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || "_.0123456789".contains(c))
        {
            found.push((key.to_owned(), value.to_owned()));
        }
        rest = after;
    }
    found
}

/// The default a TOML line states in its comment: (key, value) for `key = … # default V` or
/// `key = … # … (default V)`, the key commented out or not.
fn in_toml(line: &str) -> Option<(String, String)> {
    let line = line.trim().trim_start_matches('#').trim_start();
    let (key, rest) = line.split_once('=')?;
    let key = key.trim();
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
    {
        return None;
    }
    let comment = rest.split_once(" #")?.1.trim();
    let value = match comment.find("(default ") {
        Some(at) => comment[at + "(default ".len()..].split(')').next()?,
        None => comment.strip_prefix("default ")?,
    };
    Some((key.to_owned(), value.trim().to_owned()))
}

/// A table with a default column: the column, and the section its keys are in (named in the
/// first header cell, `` key (`[session]`) ``).
struct DefaultsTable {
    column: usize,
    section: String,
}

impl DefaultsTable {
    /// The table a header row begins, if it has a default column.
    fn of_header(line: &str) -> Option<DefaultsTable> {
        let cells = table_cells(line)?;
        let column = cells.iter().position(|cell| *cell == "default")?;
        let section = cells[0]
            .split("`[")
            .nth(1)
            .and_then(|s| s.split(']').next());
        Some(DefaultsTable {
            column,
            section: section.unwrap_or_default().to_owned(),
        })
    }

    /// The default a row states: (key, value).
    fn row(&self, line: &str) -> Option<(String, String)> {
        let cells = table_cells(line)?;
        let key = cells[0].strip_prefix('`')?.strip_suffix('`')?;
        let key = match self.section.is_empty() {
            true => key.to_owned(),
            false => format!("{}.{key}", self.section),
        };
        Some((key, cells.get(self.column)?.to_string()))
    }
}

/// The cells of a table row.
fn table_cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(inner.split(" | ").map(str::trim).collect())
}

/// Every default a page states: (line, key as written, value as written).
fn stated(page: &str) -> Vec<(usize, String, String)> {
    let mut found = Vec::new();
    let (mut toml, mut section) = (false, String::new());
    let mut table: Option<DefaultsTable> = None;
    for (n, line) in page.lines().enumerate() {
        if !line.starts_with('|') {
            table = None;
        } else if let Some(defaults) = &table {
            if let Some((key, value)) = defaults.row(line) {
                found.push((n + 1, key, value));
            }
            continue;
        } else if let Some(header) = DefaultsTable::of_header(line) {
            table = Some(header);
            continue;
        }
        if line.trim_start().starts_with("```") {
            toml = line.trim() == "```toml";
            section.clear();
            continue;
        }
        if !toml {
            found.extend(in_prose(line).into_iter().map(|(k, v)| (n + 1, k, v)));
            continue;
        }
        let header = line.trim().trim_start_matches('#').trim();
        if let Some(name) = header.strip_prefix('[').and_then(|h| h.split(']').next()) {
            section = name.trim_matches('[').to_owned();
        } else if let Some((key, value)) = in_toml(line) {
            let dotted = match section.is_empty() {
                true => key,
                false => format!("{section}.{key}"),
            };
            found.push((n + 1, dotted, value));
        }
    }
    found
}

#[test]
fn every_default_the_book_states_is_the_codes() {
    let book = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src");
    let defaults = reference_defaults(&book);
    assert!(defaults.len() > 100, "the reference's keys are read");
    let mut found = Vec::new();
    pages(&book, &mut found);
    let mut wrong = Vec::new();
    let mut checked = 0;
    for path in found {
        if path.ends_with("reference/configuration.md") {
            continue;
        }
        let page = std::fs::read_to_string(&path).unwrap();
        let name = path.strip_prefix(&book).unwrap().display().to_string();
        for (n, line) in page.lines().enumerate() {
            if line.contains("(default:") {
                wrong.push(format!("{name}:{}: write `key` (default V)", n + 1));
            }
        }
        for (line, key, value) in stated(&page) {
            checked += 1;
            match resolve(&key, &defaults) {
                Err(error) => wrong.push(format!("{name}:{line}: {error}")),
                Ok(key) if plain(&value) != defaults[key] => wrong.push(format!(
                    "{name}:{line}: `{key}` (default {value}), but its default is {}",
                    defaults[key]
                )),
                Ok(_) => {}
            }
        }
    }
    assert!(checked > 0, "the book states defaults");
    assert!(
        wrong.is_empty(),
        "defaults the book states wrongly:\n{}",
        wrong.join("\n")
    );
}
