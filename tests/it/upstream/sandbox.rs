//! Stdio children confined by the sandbox (`--sandbox`): a real child that tries what a
//! confined server must not do (`tests/servers/escape.py`) and reports what the system said:
//! ptrace of its parent, signalling it, a new namespace, a TCP connection with
//! `--sandbox-network none` (and the same connection without it), an abstract Unix socket made
//! outside with no network, memory, open files and processes past their limits (each child a
//! user of its own from `--upstream-user-range`); the filesystem: writing outside its private
//! directory, reading the proxy's configuration, its environment in `/proc`, another session's
//! directory, another command's package cache; TCP ports past `--sandbox-connect-port`. The
//! proxy and the session go on after each refusal (a child that ended is replaced). And real
//! servers run confined as they are: the demo, a Node server from its `node_modules`, a Python
//! one in its virtual environment, and servers `npx` and `uvx` fetch into their cache, then
//! start from it with no network.

use serde_json::json;

use crate::harness::{node_dir, spawn_proxy, Client};

/// Python as the sandbox sees it: its real executable, and the prefix its library is under
/// (a path the sandbox must be told to let it read, unless it is the system's).
fn python() -> (String, String) {
    let output = std::process::Command::new("python3")
        .args([
            "-c",
            "import os, sys; print(os.path.realpath(sys.executable)); print(sys.base_prefix)",
        ])
        .output()
        .expect("python3 runs");
    let text = String::from_utf8(output.stdout).unwrap();
    let mut lines = text.lines().map(str::to_owned);
    (lines.next().unwrap(), lines.next().unwrap())
}

/// A session with the probing server, behind a proxy started with `flags`.
async fn confined(flags: &[&str]) -> (tokio::process::Child, Client) {
    let (proxy, addr) = confining(flags).await;
    (proxy, Client::initialized(addr, "2025-11-25").await)
}

/// A proxy in front of the probing server, started with `flags`.
async fn confining(flags: &[&str]) -> (tokio::process::Child, std::net::SocketAddr) {
    confining_with(&[], flags).await
}

/// [`confining`], the server's command line ending in `words` (which it ignores).
async fn confining_with(
    words: &[&str],
    flags: &[&str],
) -> (tokio::process::Child, std::net::SocketAddr) {
    let mut args = escape_server(words);
    args.extend(flags.iter().map(|flag| flag.to_string()));
    let (proxy, addr, _logs, _) =
        spawn_proxy(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    (proxy, addr)
}

/// The proxy's arguments for the probing server (its command line ending in `words`, which it
/// ignores), listening on a free port.
fn escape_server(words: &[&str]) -> Vec<String> {
    let (python, prefix) = python();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/servers/escape.py");
    let server = shell_words::join([python.as_str(), script].iter().chain(words));
    [
        "--listen",
        "127.0.0.1:0",
        "--stdio",
        &server,
        "--sandbox-readable",
        &prefix,
    ]
    .map(str::to_owned)
    .to_vec()
}

#[tokio::test]
async fn a_confined_child_may_not_trace_nor_signal_its_parent_nor_make_a_namespace() {
    let (_proxy, mut client) = confined(&["--sandbox"]).await;
    assert_eq!(client.call_tool("ptrace", json!({})).await, "EPERM");
    assert_eq!(client.call_tool("signal", json!({})).await, "EPERM");
    assert_eq!(client.call_tool("unshare", json!({})).await, "EPERM");
    // The session goes on.
    assert_eq!(
        client.call_tool("open_files", json!({ "count": 3 })).await,
        "done"
    );
}

#[tokio::test]
async fn with_no_network_not_even_loopback_is_reached() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_proxy, mut client) = confined(&["--sandbox", "--sandbox-network", "none"]).await;
    assert_eq!(
        client.call_tool("connect", json!({ "port": port })).await,
        "EPERM"
    );
    // Allowed, the same connection is made.
    let (_proxy, mut allowed) = confined(&["--sandbox"]).await;
    assert_eq!(
        allowed.call_tool("connect", json!({ "port": port })).await,
        "done"
    );
}

#[tokio::test]
async fn with_no_network_no_abstract_unix_socket_made_outside_is_reached() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("mcp-proxy-test-{}", std::process::id());
    let address = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind_addr(&address).unwrap();
    let (_proxy, mut client) = confined(&["--sandbox", "--sandbox-network", "none"]).await;
    assert_eq!(
        client.call_tool("unix", json!({ "name": name })).await,
        "EPERM"
    );
    // Allowed, the same connection is made.
    let (_proxy, mut allowed) = confined(&["--sandbox"]).await;
    assert_eq!(
        allowed.call_tool("unix", json!({ "name": name })).await,
        "done"
    );
}

#[tokio::test]
async fn a_child_past_its_limits_fails_and_its_session_goes_on() {
    let (_proxy, mut client) = confined(&[
        "--sandbox",
        "--sandbox-memory",
        "256MiB",
        "--sandbox-open-files",
        "64",
    ])
    .await;
    assert_eq!(
        client.call_tool("allocate", json!({ "mib": 512 })).await,
        "ENOMEM"
    );
    assert_eq!(
        client
            .call_tool("open_files", json!({ "count": 100 }))
            .await,
        "EMFILE"
    );
    assert_eq!(
        client.call_tool("allocate", json!({ "mib": 16 })).await,
        "done"
    );
}

#[tokio::test]
async fn the_demo_server_runs_confined() {
    let (_proxy, addr, _logs, started) = spawn_proxy(&[
        "--listen",
        "127.0.0.1:0",
        "--sandbox",
        "--sandbox-network",
        "none",
        "--sandbox-memory",
        "1GiB",
    ])
    .await;
    // The start says how children are confined on this host.
    let told = started
        .iter()
        .find(|entry| {
            entry["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("stdio children confined"))
        })
        .expect("the start says how children are confined");
    assert!(told["fields"]["landlock_abi"].is_u64(), "{told}");
    let mut client = Client::initialized(addr, "2025-11-25").await;
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    assert_eq!(
        client
            .call_tool("echo", json!({ "text": "confined" }))
            .await,
        "confined"
    );
}

#[tokio::test]
async fn a_child_writes_only_its_own_directory_and_reads_nothing_of_the_proxys() {
    let outside = std::env::temp_dir().join(format!("mcp-sandbox-outside-{}", std::process::id()));
    std::fs::create_dir_all(&outside).unwrap();
    let config = outside.join("proxy.toml");
    std::fs::write(&config, "[session]\nidle_ttl = \"10m\"\n").unwrap();
    let (proxy, addr) = confining(&["--sandbox", "--config", config.to_str().unwrap()]).await;
    let mut client = Client::initialized(addr, "2025-11-25").await;
    let home = client.call_tool("home", json!({})).await;
    assert!(!home.is_empty(), "a HOME of its own");
    let mine = format!("{home}/notes");
    assert_eq!(
        client.call_tool("write", json!({ "path": mine })).await,
        "done"
    );
    let elsewhere = outside.join("escaped");
    assert_eq!(
        client
            .call_tool("write", json!({ "path": elsewhere }))
            .await,
        "EACCES"
    );
    assert!(!elsewhere.exists());
    assert_eq!(
        client.call_tool("read", json!({ "path": config })).await,
        "EACCES",
        "the proxy's configuration"
    );
    let environ = format!("/proc/{}/environ", proxy.id().unwrap());
    assert_eq!(
        client.call_tool("read", json!({ "path": environ })).await,
        "EACCES",
        "the proxy's environment"
    );
    // Another session's directory is out of reach too, and each is removed with its session.
    let mut other = Client::initialized(addr, "2025-11-25").await;
    let theirs = other.call_tool("home", json!({})).await;
    assert_ne!(theirs, home);
    assert_eq!(
        client.call_tool("list", json!({ "path": theirs })).await,
        "EACCES"
    );
    assert_eq!(
        client
            .call_tool("read", json!({ "path": format!("{theirs}/../") }))
            .await,
        "EACCES"
    );
    assert_eq!(other.delete().await, http::StatusCode::OK);
    crate::harness::until("the ended session's directory to be removed", true, || {
        let theirs = theirs.clone();
        async move { !std::path::Path::new(&theirs).exists() }
    })
    .await;
    assert!(
        std::path::Path::new(&home).exists(),
        "the live session's stays"
    );
    let _ = std::fs::remove_dir_all(outside);
}

#[tokio::test]
async fn with_connect_ports_only_those_are_reached() {
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (allowed, refused) = (
        allowed.local_addr().unwrap().port(),
        refused.local_addr().unwrap().port(),
    );
    let port = allowed.to_string();
    let (_proxy, mut client) = confined(&["--sandbox", "--sandbox-connect-port", &port]).await;
    assert_eq!(
        client
            .call_tool("connect", json!({ "port": allowed }))
            .await,
        "done"
    );
    assert_eq!(
        client
            .call_tool("connect", json!({ "port": refused }))
            .await,
        "EACCES"
    );
}

/// A proxy confining `server` with the default settings and `flags`, and a session; the
/// session's `initialize` answer.
async fn confined_server(
    server: &str,
    flags: &[&str],
) -> (tokio::process::Child, Client, serde_json::Value) {
    let mut args = vec!["--listen", "127.0.0.1:0", "--stdio", server, "--sandbox"];
    args.extend(flags);
    let (proxy, addr, _logs, _) = spawn_proxy(&args).await;
    let mut client = Client::new(addr);
    let initialized = client.initialize("2025-11-25").await;
    (proxy, client, initialized)
}

/// No network at all.
const NO_NETWORK: &[&str] = &["--sandbox-network", "none"];

#[tokio::test]
async fn a_node_server_from_its_node_modules_runs_confined_as_it_is() {
    let script =
        node_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let server = format!(
        "node {} stdio",
        shell_words::quote(&script.to_string_lossy())
    );
    let (_proxy, mut client, _) = confined_server(&server, NO_NETWORK).await;
    assert_eq!(
        client
            .call_tool("echo", json!({ "message": "confined" }))
            .await,
        "Echo: confined"
    );
}

/// A proxy confining `server` with `network`, its package caches in `cache` (a fetch may take
/// a while), and a session; the session's `initialize` answer.
async fn cached_server(
    server: &str,
    network: &str,
    cache: &Scratch,
) -> (tokio::process::Child, Client, serde_json::Value) {
    let root = cache.0.display().to_string();
    let flags = [
        "--sandbox-network",
        network,
        "--sandbox-cache-dir",
        &root,
        "--request-timeout",
        "120s",
    ];
    let fetch = std::time::Duration::from_secs(110);
    crate::harness::with_bound(fetch, confined_server(server, &flags)).await
}

/// `npx` fetches a server from the registry into its command's cache, confined as it is; then,
/// with no network at all, the same command starts from that cache.
#[tokio::test]
async fn npx_fetches_into_the_cache_and_then_starts_from_it_with_no_network() {
    let cache = Scratch::new("npx");
    let server = "npx -y @modelcontextprotocol/server-everything@2026.8.31 stdio";
    for network in ["allow", "none"] {
        let (proxy, mut client, _) = cached_server(server, network, &cache).await;
        assert_eq!(
            client
                .call_tool("echo", json!({ "message": network }))
                .await,
            format!("Echo: {network}"),
            "network {network}"
        );
        drop(proxy);
    }
}

/// `uvx` the same: a server from PyPI fetched into the cache (with its environment), then
/// started from it with no network.
#[tokio::test]
async fn uvx_fetches_into_the_cache_and_then_starts_from_it_with_no_network() {
    let cache = Scratch::new("uvx");
    let uvx = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/.venv/bin/uvx");
    let server = format!("{} mcp-server-time==2026.10.19", shell_words::quote(uvx));
    for network in ["allow", "none"] {
        let (proxy, mut client, initialized) = cached_server(&server, network, &cache).await;
        assert_eq!(
            initialized["result"]["serverInfo"]["name"], "mcp-time",
            "network {network}: {initialized}"
        );
        let time = client
            .call_tool("get_current_time", json!({ "timezone": "UTC" }))
            .await;
        assert!(time.contains("UTC"), "network {network}: {time}");
        drop(proxy);
    }
}

#[tokio::test]
async fn a_python_server_in_its_virtual_environment_runs_confined_as_it_is() {
    let root = env!("CARGO_MANIFEST_DIR");
    let server = format!(
        "{} {}",
        shell_words::quote(&format!("{root}/tests/python/.venv/bin/python")),
        shell_words::quote(&format!("{root}/tests/python/example_server.py"))
    );
    let (_proxy, mut client, _) = confined_server(&server, NO_NETWORK).await;
    assert_eq!(
        client.call_tool("add", json!({ "a": 2, "b": 3 })).await,
        "5"
    );
}

#[tokio::test]
async fn a_child_past_its_cpu_time_ends_with_an_error_naming_the_limit_its_session_goes_on_and_writes_stop_at_its_file_size(
) {
    let (proxy, addr) = confining(&[
        "--sandbox",
        "--sandbox-cpu-seconds",
        "1",
        "--sandbox-file-size",
        "1MiB",
    ])
    .await;
    let mut client = Client::initialized(addr, "2025-11-25").await;
    let ended = client
        .request("tools/call", json!({ "name": "spin", "arguments": {} }))
        .await;
    let message = ended["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("SIGXCPU") && message.contains("sandbox.cpu_seconds"),
        "{ended}"
    );
    // The session goes on with a new child, as confined. Python ignores SIGXFSZ: its write
    // past the limit fails instead.
    assert_eq!(client.call_tool("grow", json!({ "mib": 4 })).await, "EFBIG");
    // The proxy goes on: a new session is served by a child of its own.
    let mut other = Client::initialized(addr, "2025-11-25").await;
    assert_eq!(
        other.call_tool("open_files", json!({ "count": 2 })).await,
        "done"
    );
    drop(proxy);
}

#[tokio::test]
async fn a_sandbox_that_would_let_a_child_read_the_configuration_stops_the_start() {
    let dir = std::env::temp_dir().join(format!("mcp-sandbox-reach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("proxy.toml");
    std::fs::write(&config, "[session]\nidle_ttl = \"10m\"\n").unwrap();
    let stderr = crate::harness::refused_start(
        &[
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--config".as_ref(),
            config.as_os_str(),
            "--sandbox".as_ref(),
            "--sandbox-readable".as_ref(),
            dir.as_os_str(),
        ],
        &[],
    )
    .await;
    assert!(
        stderr.contains("upstream.sandbox.readable") && stderr.contains("proxy.toml"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A grant over what children share stops the start, naming the key, the place and the fix: a
/// `writable` holding the package caches (a session's child could change what another's runs:
/// `/tmp`, with the caches in the temporary directory) or a grant holding the children's
/// private directories (another session's would be open to it).
#[tokio::test]
async fn a_grant_over_the_package_caches_or_the_private_directories_stops_the_start() {
    let cache = Scratch::new("shared-grant");
    let caches = cache.0.join("caches");
    let tmp = std::env::temp_dir();
    for (flags, names) in [
        (
            vec![
                "--sandbox-cache-dir",
                caches.to_str().unwrap(),
                "--sandbox-writable",
                cache.0.to_str().unwrap(),
            ],
            "the package caches",
        ),
        (
            vec![
                "--sandbox-cache-dir",
                caches.to_str().unwrap(),
                "--sandbox-readable",
                tmp.to_str().unwrap(),
            ],
            "private directories",
        ),
    ] {
        let mut args = vec!["--listen", "127.0.0.1:0", "--sandbox"];
        args.extend(flags);
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let stderr = crate::harness::refused_start(&args, &[]).await;
        assert!(
            stderr.contains("upstream.sandbox.")
                && stderr.contains(names)
                && stderr.contains("grant a folder of its own"),
            "{stderr}"
        );
    }
}

/// A host without Landlock (its calls refused, as by a kernel without it or a container profile
/// older than them, `tests/servers/no_landlock.py`): with `require`, the proxy does not start,
/// naming what it cannot enforce; without, it starts, warns of each missing piece and counts it,
/// and confines children with the rest (seccomp: no network), the filesystem left open as it
/// said.
#[tokio::test]
async fn without_landlock_require_stops_the_start_and_else_each_missing_piece_is_warned_and_counted(
) {
    let without_landlock = || {
        let mut command = tokio::process::Command::new("python3");
        command
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/servers/no_landlock.py"
            ))
            .arg(crate::harness::DEMO);
        command
    };
    let mut args = escape_server(&[]);
    args.extend(["--sandbox", "--sandbox-network", "none"].map(str::to_owned));
    let mut required = args.clone();
    required.push("--sandbox-require".to_owned());
    let stderr = crate::harness::refused_start_command(without_landlock(), &required, &[]).await;
    assert!(
        stderr.contains(
            "upstream.sandbox.require: this host cannot enforce landlock_filesystem and \
             landlock_scopes (Landlock ABI 0"
        ),
        "{stderr}"
    );

    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_proxy, addr, _logs, started) =
        crate::harness::spawn_proxy_command(without_landlock(), &args, &[]).await;
    let warned: Vec<&str> = started
        .iter()
        .filter(|entry| entry["level"] == "WARN")
        .filter_map(|entry| entry["fields"]["message"].as_str())
        .filter(|message| message.starts_with("the sandbox cannot enforce"))
        .collect();
    assert_eq!(
        warned,
        [
            "the sandbox cannot enforce landlock_filesystem on this host: it is not enforced",
            "the sandbox cannot enforce landlock_scopes on this host: it is not enforced"
        ]
    );
    let metrics = Client::new(addr)
        .send_to("/metrics", http::Method::GET, &[], None)
        .await
        .bytes()
        .await;
    let metrics = String::from_utf8_lossy(&metrics);
    for what in ["landlock_filesystem", "landlock_scopes"] {
        let sample =
            format!("mcp_proxy_sandbox_unenforced{{server=\"upstream\",what=\"{what}\"}} 1");
        assert!(metrics.contains(&sample), "{sample} in\n{metrics}");
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut client = Client::initialized(addr, "2025-11-25").await;
    assert_eq!(
        client.call_tool("connect", json!({ "port": port })).await,
        "EPERM",
        "seccomp still holds"
    );
    let outside = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    assert_eq!(
        client.call_tool("read", json!({ "path": outside })).await,
        "done",
        "the filesystem is not confined, as the warning said"
    );
}

/// A command's package cache is written only while it is warmed, at start, by a child of the
/// proxy's own (here, `escape.py` writing `_npx/fetched.js` as `npx` would): every session's
/// child finds what was fetched in a view of its own, can change nothing of the cache (through
/// the view's links, at the cache's own path, a new file in it), and what it writes in its
/// view no other session's child sees. Another command's cache is out of reach; with no
/// network, package managers are told to take what they fetched before without asking.
#[tokio::test]
async fn no_session_leaves_in_the_package_cache_what_another_sessions_child_runs() {
    let cache = Scratch::new("cache");
    let root = cache.0.display().to_string();
    let flags = ["--sandbox", "--sandbox-cache-dir", &root];
    let (_proxy, addr) = confining(&flags).await;
    let mut first = Client::initialized(addr, "2025-11-25").await;
    let npm = first
        .call_tool("env", json!({ "name": "npm_config_cache" }))
        .await;
    let home = first.call_tool("home", json!({})).await;
    assert!(npm.starts_with(&home), "a view of the child's own: {npm}");
    assert_eq!(
        first
            .call_tool("env", json!({ "name": "npm_config_prefer_offline" }))
            .await,
        "",
        "with the network, npm asks the registry as usual"
    );
    let sealed = sealed_cache(&cache);
    let fetched = std::fs::read_to_string(sealed.join("npm/_npx/fetched.js")).unwrap();
    assert!(
        fetched.starts_with("fetched by"),
        "warmed at start: {fetched}"
    );
    let in_view = format!("{npm}/_npx/fetched.js");
    assert_eq!(
        first.call_tool("cat", json!({ "path": in_view })).await,
        fetched
    );
    for path in [
        in_view.clone(),
        sealed.join("npm/_npx/fetched.js").display().to_string(),
        sealed.join("npm/_npx/planted.js").display().to_string(),
    ] {
        assert_eq!(
            first.call_tool("write", json!({ "path": path })).await,
            "EACCES",
            "{path}"
        );
    }
    let planted = format!("{npm}/_npx/planted.js");
    assert_eq!(
        first.call_tool("write", json!({ "path": planted })).await,
        "done",
        "its own view"
    );

    let mut second = Client::initialized(addr, "2025-11-25").await;
    let own = second
        .call_tool("env", json!({ "name": "npm_config_cache" }))
        .await;
    assert_ne!(own, npm);
    assert_eq!(
        second
            .call_tool("cat", json!({ "path": format!("{own}/_npx/fetched.js") }))
            .await,
        fetched,
        "the cache as warmed"
    );
    assert_eq!(
        second
            .call_tool("cat", json!({ "path": format!("{own}/_npx/planted.js") }))
            .await,
        "ENOENT",
        "nothing of another session's"
    );
    assert_eq!(
        second.call_tool("cat", json!({ "path": planted })).await,
        "EACCES"
    );
    assert_eq!(
        std::fs::read_to_string(sealed.join("npm/_npx/fetched.js")).unwrap(),
        fetched
    );

    let mut flags = flags.to_vec();
    flags.extend(["--sandbox-network", "none"]);
    let (_other, addr) = confining_with(&["another-server"], &flags).await;
    let mut other = Client::initialized(addr, "2025-11-25").await;
    assert_eq!(
        other
            .call_tool("cat", json!({ "path": sealed.join("npm/_npx/fetched.js") }))
            .await,
        "EACCES",
        "another command's cache"
    );
    assert_eq!(
        other
            .call_tool("env", json!({ "name": "npm_config_prefer_offline" }))
            .await,
        "true"
    );
}

/// With `--sandbox-warm-cache false` the proxy writes no cache: its children find it as it
/// was (here, empty), each in a view of its own.
#[tokio::test]
async fn with_warm_cache_off_the_package_cache_is_only_read() {
    let cache = Scratch::new("cold-cache");
    let root = cache.0.display().to_string();
    let flags = [
        "--sandbox",
        "--sandbox-cache-dir",
        &root,
        "--sandbox-warm-cache",
        "false",
    ];
    let (_proxy, addr) = confining(&flags).await;
    let mut child = Client::initialized(addr, "2025-11-25").await;
    let npm = child
        .call_tool("env", json!({ "name": "npm_config_cache" }))
        .await;
    let fetched = child
        .call_tool("cat", json!({ "path": format!("{npm}/_npx/fetched.js") }))
        .await;
    assert!(
        fetched.starts_with("fetched by"),
        "its own fetch, in its view: {fetched}"
    );
    let sealed = sealed_cache(&cache);
    assert_eq!(
        std::fs::read_dir(&sealed).unwrap().count(),
        0,
        "nothing written"
    );
}

/// The one command's cache under `cache`.
fn sealed_cache(cache: &Scratch) -> std::path::PathBuf {
    let mut entries = std::fs::read_dir(&cache.0).unwrap();
    let sealed = entries.next().expect("a command's cache").unwrap().path();
    assert!(entries.next().is_none(), "one command, one cache");
    sealed
}

/// With `upstream.user_range` each child runs as a user of its own, and `sandbox.processes`
/// bounds the processes it may have: a fork past it fails (EAGAIN), fewer are made, and the
/// session goes on. Run as root (switching users needs it).
#[tokio::test]
async fn each_child_runs_as_a_user_of_its_own_and_forks_no_more_than_its_processes() {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: running children as other users needs root, and this test is not");
        return;
    }
    // The proxy's binary (also the launcher, which runs as the child's user) and the server,
    // where any user may run them, with the system's Python.
    let dir = Scratch::new("user-range");
    let binary = dir.0.join("mcp-session-proxy");
    std::fs::copy(crate::harness::DEMO, &binary).unwrap();
    let server = dir.0.join("escape.py");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/servers/escape.py"),
        &server,
    )
    .unwrap();
    for path in [&dir.0, &binary, &server] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let python = "/usr/bin/python3";
    assert!(std::path::Path::new(python).exists(), "Debian's python3");
    let stdio = format!("{python} {}", server.display());
    let cache = dir.0.join("cache");
    let (_proxy, addr, _logs, _) = crate::harness::spawn_proxy_command(
        tokio::process::Command::new(&binary),
        &[
            "--listen",
            "127.0.0.1:0",
            "--stdio",
            &stdio,
            "--upstream-user-range",
            "100000-100009",
            "--sandbox",
            "--sandbox-processes",
            "4",
            "--sandbox-cache-dir",
            &cache.display().to_string(),
        ],
        &[],
    )
    .await;
    let mut a = Client::initialized(addr, "2025-11-25").await;
    let mut b = Client::initialized(addr, "2025-11-25").await;
    let (who_a, who_b) = (
        a.call_tool("whoami", json!({})).await,
        b.call_tool("whoami", json!({})).await,
    );
    assert_ne!(who_a, who_b, "a user each");
    for who in [&who_a, &who_b] {
        let ids: Vec<u32> = who.split(' ').map(|id| id.parse().unwrap()).collect();
        assert!((100_000..=100_009).contains(&ids[0]), "{who}");
        assert_eq!(ids[1], ids[0], "its own id as its group");
    }
    assert_eq!(a.call_tool("fork", json!({ "count": 10 })).await, "EAGAIN");
    assert_eq!(a.call_tool("fork", json!({ "count": 2 })).await, "done");
    // The other session's child counts its own processes.
    assert_eq!(b.call_tool("fork", json!({ "count": 3 })).await, "done");

    // The package cache, warmed by a child of the range, is sealed.
    the_sealed_cache_is_the_proxys(&mut a, &cache).await;
}

/// Checks that the one command's cache under `cache`, warmed by a child running as another
/// user, is sealed: the proxy's, read by `child` through its view, changed by it in nothing
/// (its contents, its modes).
pub(super) async fn the_sealed_cache_is_the_proxys(child: &mut Client, cache: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let mut entries = std::fs::read_dir(cache).unwrap();
    let sealed = entries.next().expect("a command's cache").unwrap().path();
    let fetched = sealed.join("npm/_npx/fetched.js");
    let metadata = std::fs::symlink_metadata(&fetched).unwrap();
    assert_eq!((metadata.uid(), metadata.mode() & 0o777), (0, 0o644));
    let npm = child
        .call_tool("env", json!({ "name": "npm_config_cache" }))
        .await;
    let in_view = format!("{npm}/_npx/fetched.js");
    let warmed = child.call_tool("cat", json!({ "path": in_view })).await;
    assert!(warmed.starts_with("fetched by"), "{warmed}");
    let written = child.call_tool("write", json!({ "path": in_view })).await;
    assert_eq!(written, "EACCES");
    let folder = sealed.join("npm/_npx").display().to_string();
    let closed = json!({ "path": folder, "mode": "0" });
    assert_eq!(
        child.call_tool("chmod", closed).await,
        "EPERM",
        "not its own"
    );
}

/// Where children run as the cache's owner (here root, with no user range), Landlock does not
/// keep one from changing the modes of the sealed cache (the book says so): a folder closed
/// leaves it out of later children's views (the rest of each view is made), and the next
/// start's seal sets the modes right again.
#[tokio::test]
async fn a_mode_a_child_changed_in_the_package_cache_is_set_right_at_the_next_start() {
    let cache = Scratch::new("cache-modes");
    let root = cache.0.display().to_string();
    let flags = ["--sandbox", "--sandbox-cache-dir", &root];
    let (proxy, addr) = confining(&flags).await;
    let mut first = Client::initialized(addr, "2025-11-25").await;
    let sealed = sealed_cache(&cache);
    let warmed = std::fs::read_to_string(sealed.join("npm/_npx/fetched.js")).unwrap();
    let folder = sealed.join("npm/_npx").display().to_string();
    let closed = json!({ "path": folder, "mode": "0" });
    if first.call_tool("chmod", closed).await != "done" {
        eprintln!("skipped: this child does not own the cache");
        return;
    }
    let mut second = Client::initialized(addr, "2025-11-25").await;
    let npm = second
        .call_tool("env", json!({ "name": "npm_config_cache" }))
        .await;
    let fetched = json!({ "path": format!("{npm}/_npx/fetched.js") });
    // Left out of its view (the server fetched it again, into the view).
    assert_ne!(second.call_tool("cat", fetched).await, warmed);
    drop(proxy);
    let (_proxy, addr) = confining(&flags).await;
    let mut third = Client::initialized(addr, "2025-11-25").await;
    let npm = third
        .call_tool("env", json!({ "name": "npm_config_cache" }))
        .await;
    let fetched = third
        .call_tool("cat", json!({ "path": format!("{npm}/_npx/fetched.js") }))
        .await;
    assert_eq!(fetched, warmed, "set right");
}

/// A folder of a test's own under the temporary directory, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("mcp-sandbox-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
