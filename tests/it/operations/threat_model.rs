//! The book's threat model is kept true: every party it names has a section, every section a
//! table of promises, and every promise names a test that exists (a test function, or a module
//! of tests, found in `tests/` or `src/`; `name*` stands for the tests that begin so).

use std::path::Path;

const THREAT_MODEL: &str = include_str!("../../../docs/src/security/threat-model.md");

/// The parties every threat model names, by their section's heading.
const PARTIES: [&str; 8] = [
    "A client",
    "A member server",
    "A confined child",
    "A peer replica",
    "The balancer",
    "Redis",
    "The issuer",
    "The network",
];

/// Every `.rs` file under `dir`, read.
fn sources(dir: &Path, into: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            into.push((name, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// Whether a test (or a module of them) named as `named` exists: its last path segment is a
/// function, a module or a file of that name (`*`: a function that begins so, or that the tests
/// a macro makes for each transport are named after).
fn exists(named: &str, code: &[(String, String)]) -> bool {
    let last = named.rsplit("::").next().unwrap_or(named).trim();
    match last.strip_suffix('*') {
        // Tests made by a macro for each transport: the function they call is the stem.
        Some(prefix) => {
            let stem = prefix.trim_end_matches('_');
            code.iter()
                .any(|(_, text)| text.contains(&format!("fn {stem}")))
        }
        None => code.iter().any(|(file, text)| {
            file == last
                || text.contains(&format!("fn {last}("))
                || text.contains(&format!("mod {last}"))
        }),
    }
}

/// The text in backticks of `cell`: what it names.
fn named(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

#[test]
fn every_promise_of_the_threat_model_names_a_test_that_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut code = Vec::new();
    sources(&root.join("tests"), &mut code);
    sources(&root.join("src"), &mut code);
    let sections: Vec<(&str, &str)> = THREAT_MODEL
        .split("\n## ")
        .skip(1)
        .map(|section| section.split_once('\n').unwrap_or((section, "")))
        .collect();
    for party in PARTIES {
        let (_, body) = sections
            .iter()
            .find(|(heading, _)| heading.trim() == party)
            .unwrap_or_else(|| panic!("the threat model has no section `## {party}`"));
        let rows: Vec<&str> = body
            .lines()
            .skip_while(|line| !line.starts_with("| promise |"))
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .collect();
        assert!(!rows.is_empty(), "{party}: no promises");
        for row in rows {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
            let tests = cells.last().copied().unwrap_or_default();
            let names = named(tests);
            assert!(!names.is_empty(), "{party}: a promise names no test: {row}");
            for name in names {
                assert!(
                    exists(name, &code),
                    "{party}: `{name}` is no test here (in: {row})"
                );
            }
        }
    }
}
