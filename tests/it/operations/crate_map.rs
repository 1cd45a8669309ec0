//! The crate map (`src/lib.rs`'s documentation) names every module a reader looks for: each
//! layer and floor at the top, and each module of the layers the data flows through (front,
//! session, upstream, store) and of the replicas' hop and the start, so that where a thing is
//! done can be found from it. A module added without a word there fails this test; so does a
//! module written both as a file and as a folder.

use std::path::Path;

/// The folders whose every module the map names.
const MAPPED: &[&str] = &["front", "session", "upstream", "store", "hop", "server"];

/// Files that are not modules a reader looks for.
const NOT_MODULES: &[&str] = &["mod", "tests", "testing"];

#[test]
fn the_crate_map_names_every_module_of_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let map: String = std::fs::read_to_string(src.join("lib.rs"))
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let named = |name: &str| {
        [format!("`{name}`"), format!("`{name}/`")]
            .iter()
            .any(|form| map.contains(form))
    };
    let mut unnamed = Vec::new();
    for top in std::fs::read_dir(&src).unwrap().flatten() {
        let top_name = top.file_name().to_string_lossy().into_owned();
        if !top.path().is_dir() {
            continue;
        }
        if !named(&top_name) {
            unnamed.push(top_name.clone());
        }
        if !MAPPED.contains(&top_name.as_str()) {
            continue;
        }
        for entry in std::fs::read_dir(top.path()).unwrap().flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let name = file.strip_suffix(".rs").unwrap_or(&file);
            if !NOT_MODULES.contains(&name) && !named(name) {
                unnamed.push(format!("{top_name}/{name}"));
            }
        }
    }
    unnamed.sort();
    assert!(
        unnamed.is_empty(),
        "modules the crate map does not name: {unnamed:?}"
    );
}

/// One module style: a module with submodules is a folder with its `mod.rs`, never a file
/// beside a folder of the same name.
#[test]
fn no_module_is_both_a_file_and_a_folder() {
    let mut both = Vec::new();
    let mut folders = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.with_extension("rs").exists() {
                    both.push(path.display().to_string());
                }
                folders.push(path);
            }
        }
    }
    assert!(both.is_empty(), "a file and a folder each: {both:?}");
}

/// The bench's own code (its scripts, the chaos harness, the load generator) stays within 500
/// lines a module, as the crate's modules do.
#[test]
fn no_module_of_the_bench_is_over_500_lines() {
    fn walk(dir: &Path, long: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !["node", ".cargo", "__pycache__"].contains(&name.as_str()) {
                    walk(&path, long);
                }
                continue;
            }
            let code = [".py", ".rs", ".sh"].iter().any(|ext| name.ends_with(ext));
            let lines = std::fs::read_to_string(&path).map_or(0, |text| text.lines().count());
            if code && lines > 500 {
                long.push(format!("{} ({lines} lines)", path.display()));
            }
        }
    }
    let mut long = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("bench"),
        &mut long,
    );
    assert!(long.is_empty(), "bench modules over 500 lines: {long:?}");
}
