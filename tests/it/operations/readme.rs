//! The README's and the book's client snippets, run as a reader would run them: the curl
//! session of the README and of Getting started with `sh`, the TypeScript one on the pinned SDK,
//! the Python one on the pinned `mcp`, each against the real binary (its URL put in place of
//! the snippet's `http://127.0.0.1:8787/mcp`). Each must print the echo and exit on its own
//! within the usual bound.

use crate::harness::{node_dir, spawn_proxy, within};

const README: &str = include_str!("../../../README.md");
const GETTING_STARTED: &str = include_str!("../../../docs/src/getting-started/index.md");
const FIRST_CLIENT: &str = include_str!("../../../docs/src/getting-started/first-client.md");
const README_URL: &str = "http://127.0.0.1:8787/mcp";

/// The first fenced block of `language` in `page` after the line that contains `marker`.
fn snippet(page: &str, marker: &str, language: &str) -> String {
    let after = page
        .find(marker)
        .unwrap_or_else(|| panic!("the page says {marker:?}"));
    let fence = format!("```{language}\n");
    let start = page[after..]
        .find(&fence)
        .map(|at| after + at + fence.len())
        .unwrap_or_else(|| panic!("a {language} block after {marker:?}"));
    let end = page[start..].find("```").expect("the block ends") + start;
    let code = page[start..end].to_owned();
    assert!(code.contains(README_URL), "the snippet names {README_URL}");
    code
}

/// Runs `program` on `file` in `dir`; expects it to exit successfully on its own and print the
/// echo. Returns what it printed.
async fn runs_and_exits(
    what: &str,
    program: &std::path::Path,
    dir: &std::path::Path,
    file: &str,
) -> String {
    let run = tokio::process::Command::new(program)
        .arg(file)
        .current_dir(dir)
        .kill_on_drop(true)
        .output();
    let output = within(what, run).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("hello"), "{what} printed:\n{stdout}");
    stdout.into_owned()
}

#[tokio::test]
async fn the_typescript_snippet_prints_the_echo_and_exits() {
    let (_proxy, addr, _logs, _) = spawn_proxy(&["--listen", "127.0.0.1:0"]).await;
    let code = snippet(FIRST_CLIENT, "The official TypeScript SDK", "js")
        .replace(README_URL, &format!("http://{addr}/mcp"));
    let dir = node_dir();
    let file = format!("readme-snippet-{}.mjs", std::process::id());
    std::fs::write(dir.join(&file), code).unwrap();
    let node = dir.join("node_modules/.bin/node");
    let ran = tokio::spawn({
        let (dir, file) = (dir.clone(), file.clone());
        async move { runs_and_exits("the TypeScript snippet", &node, &dir, &file).await }
    })
    .await;
    let _ = std::fs::remove_file(dir.join(&file));
    ran.unwrap();
}

#[tokio::test]
async fn the_python_snippet_prints_the_echo_and_exits() {
    let (_proxy, addr, _logs, _) = spawn_proxy(&["--listen", "127.0.0.1:0"]).await;
    let code = snippet(FIRST_CLIENT, "The official Python SDK", "python")
        .replace(README_URL, &format!("http://{addr}/mcp"));
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python");
    let python = dir.join(".venv/bin/python");
    assert!(
        python.exists(),
        "the Python client is not installed: run scripts/test (it creates tests/python/.venv)"
    );
    let scratch = std::env::temp_dir().join(format!("readme-snippet-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("snippet.py"), code).unwrap();
    let ran = tokio::spawn({
        let scratch = scratch.clone();
        async move { runs_and_exits("the Python snippet", &python, &scratch, "snippet.py").await }
    })
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    ran.unwrap();
}

/// Runs a page's curl session with `sh` against a proxy of its own.
async fn the_curl_session_prints_the_echo(page: &str, what: &str) {
    let (_proxy, addr, _logs, _) = spawn_proxy(&["--listen", "127.0.0.1:0"]).await;
    let code = snippet(page, "A session with curl", "sh")
        .replace(README_URL, &format!("http://{addr}/mcp"));
    let scratch = std::env::temp_dir().join(format!("readme-curl-{}-{what}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("session.sh"), code).unwrap();
    let ran = tokio::spawn({
        let scratch = scratch.clone();
        let what = format!("the curl session of {what}");
        async move {
            let sh = std::path::Path::new("/bin/sh");
            runs_and_exits(&what, sh, &scratch, "session.sh").await
        }
    })
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    let stdout = ran.unwrap();
    let stated = stated_result(page);
    assert!(
        stdout.contains(stated),
        "{what} says it prints {stated}; it printed:\n{stdout}"
    );
}

/// The result a page says its curl session prints: the code span after "The last line prints
/// the result:".
fn stated_result(page: &str) -> &str {
    let marker = "The last line prints the result:";
    let after = page
        .find(marker)
        .expect("the page says what the session prints")
        + marker.len();
    let start = page[after..].find('`').expect("the result in backticks") + after + 1;
    let end = page[start..].find('`').expect("the backtick closes") + start;
    &page[start..end]
}

#[tokio::test]
async fn the_readme_curl_session_prints_the_echo() {
    the_curl_session_prints_the_echo(README, "the README").await;
}

#[tokio::test]
async fn the_getting_started_curl_session_prints_the_echo() {
    the_curl_session_prints_the_echo(GETTING_STARTED, "Getting started").await;
}
