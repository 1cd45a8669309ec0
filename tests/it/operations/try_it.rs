//! The book's "Try it" blocks (```` ```sh try-it ````), run as a reader runs them: each in an
//! empty folder of its own with `sh -e`, the proxy's binary and the clone's `scripts/`
//! (`wait-ready`, `mcp-session`) on the `PATH`, and every port it names (`127.0.0.1:PORT`,
//! `--port PORT`, `port PORT`) replaced by a free one. It must exit successfully and print every
//! `# prints:` line's text, in order; whatever it started in the background is stopped with it
//! (its process group), also when it fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::harness::{with_bound, within, DEMO};

const FENCE: &str = "```sh try-it\n";

/// A block's whole run at most: each of its own waits (`wait-ready`) is bounded at 20 s.
const BLOCK_BOUND: std::time::Duration = std::time::Duration::from_secs(120);

/// Every page that sets something up, each with its blocks.
const PAGES: &[&str] = &[
    "access/authorization.md",
    "access/exposure.md",
    "access/rate-limits.md",
    "access/tls.md",
    "clients-and-servers/data-layer-sessions.md",
    "clients-and-servers/gateway.md",
    "clients-and-servers/modern-clients.md",
    "clients-and-servers/protocol-sessions.md",
    "clients-and-servers/sandbox.md",
    "clients-and-servers/virtual-servers.md",
    "getting-started/first-client.md",
    "operations/health.md",
    "replicas/balancers.md",
    "replicas/index.md",
    "replicas/redis.md",
    "resume-and-replay.md",
];

fn book() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/src")
}

/// The page's "Try it" blocks, in order.
fn blocks(page: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = page;
    while let Some(at) = rest.find(FENCE) {
        let start = at + FENCE.len();
        let end = rest[start..].find("```").expect("the block ends") + start;
        found.push(rest[start..end].to_owned());
        rest = &rest[end + 3..];
    }
    found
}

/// The texts a block says it prints (its `# prints:` lines), in order.
fn stated(block: &str) -> Vec<&str> {
    block
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("# prints:"))
        .map(str::trim)
        .collect()
}

/// The ports a block names: after `127.0.0.1:`, `--port ` or `port `.
fn ports(block: &str) -> Vec<String> {
    let mut found = Vec::new();
    for marker in ["127.0.0.1:", "--port ", "port "] {
        for (at, _) in block.match_indices(marker) {
            let digits: String = block[at + marker.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if (4..=5).contains(&digits.len()) && !found.contains(&digits) {
                found.push(digits);
            }
        }
    }
    found
}

/// `block` with every whole-word occurrence of each port replaced by a free one.
fn with_free_ports(block: &str) -> String {
    // Held together while they are chosen, so that no two of a block's ports are the same.
    let held: Vec<std::net::TcpListener> = ports(block)
        .iter()
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let chosen: BTreeMap<String, String> = ports(block)
        .into_iter()
        .zip(&held)
        .map(|(port, free)| (port, free.local_addr().unwrap().port().to_string()))
        .collect();
    drop(held);
    let mut out = String::with_capacity(block.len());
    let mut word = String::new();
    for c in block.chars().chain(std::iter::once('\0')) {
        if c.is_ascii_digit() {
            word.push(c);
            continue;
        }
        let previous = out.chars().last();
        let whole = !previous.is_some_and(|p| p.is_ascii_alphanumeric() || p == '.')
            && !c.is_ascii_alphanumeric();
        match chosen.get(&word) {
            Some(port) if whole => out.push_str(port),
            _ => out.push_str(&word),
        }
        word.clear();
        if c != '\0' {
            out.push(c);
        }
    }
    out
}

/// Ends the process group of the block's shell: what it left running dies with it.
struct Group(i32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.0),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Runs `block`, the `index`th of `page`, in a fresh folder; checks what it prints.
async fn runs(page: &str, index: usize, block: &str) {
    let what = format!("the Try it block {index} of {page}");
    let dir = std::env::temp_dir().join(format!(
        "mcp-try-it-{}-{}-{index}",
        std::process::id(),
        page.replace('/', "-")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = with_free_ports(block);
    std::fs::write(dir.join("block.sh"), &script).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let binaries = Path::new(DEMO).parent().unwrap();
    // The Python client as pinned (tests/python/.venv, made by scripts/test) is the `python3`
    // a block runs.
    let path = format!(
        "{}:{}:{}:{}",
        binaries.display(),
        root.join("scripts").display(),
        root.join("tests/python/.venv/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // What the block prints goes to files, not pipes: a process it left running holds no
    // pipe open past its end.
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = tokio::process::Command::new("/bin/sh")
        .args(["-e", "block.sh"])
        .current_dir(&dir)
        .env("PATH", path)
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("sh runs");
    let group = Group(child.id().expect("the shell runs") as i32);
    let status = with_bound(BLOCK_BOUND, within(&what, child.wait()))
        .await
        .unwrap();
    drop(group);
    let stdout = std::fs::read_to_string(&out).unwrap();
    let stderr = std::fs::read_to_string(&err).unwrap();
    // What went wrong shows with what the block's processes logged; its folder is kept.
    let failed = |why: String| -> ! {
        panic!(
            "{what} {why}; it printed:\n{stdout}\n{stderr}\n{}(its folder: {})",
            logs_of(&dir),
            dir.display()
        )
    };
    if !status.success() {
        failed(format!("failed ({status})"));
    }
    let mut rest: &str = &stdout;
    for line in stated(&script) {
        match rest.find(line) {
            Some(at) => rest = &rest[at + line.len()..],
            None => failed(format!("says it prints {line:?} (after the lines before)")),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The last lines of each log a block wrote in `dir`.
fn logs_of(dir: &Path) -> String {
    let mut shown = String::new();
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        shown.push_str(&format!("--- {}:\n{tail}\n", log.display()));
    }
    shown
}

/// Runs every "Try it" block of `page` (a path under `docs/src`), one after the other.
async fn page_runs(page: &str) {
    let text = std::fs::read_to_string(book().join(page)).unwrap();
    let found = blocks(&text);
    assert!(!found.is_empty(), "{page} has a Try it block");
    for (index, block) in found.iter().enumerate() {
        assert!(
            !stated(block).is_empty(),
            "the Try it block {index} of {page} says what it prints (`# prints:` lines)"
        );
        runs(page, index, block).await;
    }
}

/// The pages under `dir` (relative to the book) with a "Try it" block.
fn pages_with_blocks(dir: &Path, found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            pages_with_blocks(&path, found);
        } else if path.extension().is_some_and(|e| e == "md")
            && std::fs::read_to_string(&path).unwrap().contains(FENCE)
        {
            let relative = path.strip_prefix(book()).unwrap();
            found.push(relative.to_string_lossy().into_owned());
        }
    }
}

#[test]
fn every_page_with_a_try_it_block_is_run_here() {
    let mut found = Vec::new();
    pages_with_blocks(&book(), &mut found);
    found.sort();
    assert_eq!(found, PAGES, "the pages with Try it blocks are PAGES");
}

#[test]
fn a_blocks_ports_are_replaced_whole_and_everywhere() {
    let block = "redis-server --port 6379 &\nwait-ready http://127.0.0.1:8787/readyz\n\
                 echo redis://127.0.0.1:6379/0 16379 8787x\n";
    let replaced = with_free_ports(block);
    assert!(
        !replaced.contains(" 6379 ") && !replaced.contains(":6379/"),
        "{replaced}"
    );
    assert!(!replaced.contains(":8787/"), "{replaced}");
    assert!(
        replaced.contains(" 16379 ") && replaced.contains(" 8787x"),
        "{replaced}"
    );
    assert_eq!(ports(block), ["8787", "6379"]);
}

#[tokio::test]
async fn the_authorization_pages_block_runs() {
    page_runs("access/authorization.md").await;
}

#[tokio::test]
async fn the_exposure_pages_block_runs() {
    page_runs("access/exposure.md").await;
}

#[tokio::test]
async fn the_rate_limits_pages_block_runs() {
    page_runs("access/rate-limits.md").await;
}

#[tokio::test]
async fn the_health_pages_block_runs() {
    page_runs("operations/health.md").await;
}

#[tokio::test]
async fn the_balancers_pages_block_runs() {
    page_runs("replicas/balancers.md").await;
}

#[tokio::test]
async fn the_resume_pages_block_runs() {
    page_runs("resume-and-replay.md").await;
}

#[tokio::test]
async fn the_tls_pages_block_runs() {
    page_runs("access/tls.md").await;
}

#[tokio::test]
async fn the_data_layer_sessions_pages_block_runs() {
    page_runs("clients-and-servers/data-layer-sessions.md").await;
}

#[tokio::test]
async fn the_gateway_pages_block_runs() {
    page_runs("clients-and-servers/gateway.md").await;
}

#[tokio::test]
async fn the_modern_clients_pages_block_runs() {
    page_runs("clients-and-servers/modern-clients.md").await;
}

#[tokio::test]
async fn the_protocol_sessions_pages_block_runs() {
    page_runs("clients-and-servers/protocol-sessions.md").await;
}

#[tokio::test]
async fn the_sandbox_pages_block_runs() {
    page_runs("clients-and-servers/sandbox.md").await;
}

#[tokio::test]
async fn the_virtual_servers_pages_block_runs() {
    page_runs("clients-and-servers/virtual-servers.md").await;
}

#[tokio::test]
async fn the_first_client_pages_block_runs() {
    page_runs("getting-started/first-client.md").await;
}

#[tokio::test]
async fn the_replicas_pages_block_runs() {
    page_runs("replicas/index.md").await;
}

#[tokio::test]
async fn the_redis_pages_block_runs() {
    page_runs("replicas/redis.md").await;
}
