//! A confined stdio server that attacks its box (`tests/servers/escape.py`): each case tried by a
//! real child with real sockets, on a proxy running as root (as in most containers) and, where
//! the case does not need root, on one running as `nobody` (or as this test's user, when the
//! tests do not run as root). io_uring makes no socket; the proxy's limits, priority, affinity,
//! scheduling and I/O priority are out of reach (a child's own are not); the x32 and 32-bit
//! entries are refused; with no network no Unix socket is reached by path (pairs work); with
//! `connect_ports` no UDP unless allowed; no child keeps a capability, confined or not, nor
//! reads a root proxy's environment; no descriptor the proxy inherited reaches a child; nothing
//! a child starts outlives it (nor a user id of a range it is given again); and the proxy
//! leaves no private directory behind, nor keeps one a killed proxy left.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::unistd::{Uid, User};
use serde_json::json;

use crate::harness::{eventually, spawn_proxy_command, Client, LogLines};

/// Who the proxy runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proxy {
    /// This test's user: root, where the tests run as root.
    Own,
    /// `nobody`, where the tests run as root.
    Nobody,
}

/// The proxies a case that does not need root is tried on.
fn every_proxy() -> Vec<Proxy> {
    match Uid::effective().is_root() {
        true => vec![Proxy::Own, Proxy::Nobody],
        false => vec![Proxy::Own],
    }
}

/// A folder of the test's own that the proxy's user may use: the proxy's binary and the server
/// (where `nobody` may run them), and the proxy's temporary directory.
struct Place {
    dir: PathBuf,
    binary: PathBuf,
    server: PathBuf,
}

impl Place {
    fn new(test: &str, proxy: Proxy) -> Place {
        let dir = std::env::temp_dir().join(format!(
            "mcp-hostile-{test}-{proxy:?}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        let binary = dir.join("mcp-session-proxy");
        std::fs::copy(crate::harness::DEMO, &binary).unwrap();
        // The server's folder is granted to its children: one of its own, not the place that
        // holds the children's private directories (which the start refuses).
        std::fs::create_dir_all(dir.join("server")).unwrap();
        let server = dir.join("server/escape.py");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/servers/escape.py");
        std::fs::copy(script, &server).unwrap();
        for (path, mode) in [
            (&dir, 0o755),
            (&dir.join("server"), 0o755),
            (&binary, 0o755),
            (&server, 0o644),
            (&dir.join("tmp"), 0o700),
        ] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let place = Place {
            dir,
            binary,
            server,
        };
        place.give(proxy, &place.tmp());
        place
    }

    /// Gives `path` to the proxy's user, `nobody` (the test's own already has it).
    fn give(&self, proxy: Proxy, path: &Path) {
        if proxy == Proxy::Nobody {
            let (uid, gid) = nobody();
            std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
        }
    }

    /// The proxy's binary, run as `proxy`.
    fn command(&self, proxy: Proxy) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.binary);
        as_user(&mut command, proxy);
        command
    }

    /// The proxy's temporary directory (its children's private directories, their caches).
    fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    /// A stream and a datagram Unix socket in the place, open to every user (a service's, a
    /// `docker.sock`, a `/dev/log`): their paths, and the sockets (listening while kept).
    fn unix_sockets(
        &self,
    ) -> (
        PathBuf,
        PathBuf,
        (
            std::os::unix::net::UnixListener,
            std::os::unix::net::UnixDatagram,
        ),
    ) {
        let (stream, datagram) = (
            self.dir.join("service.sock"),
            self.dir.join("datagrams.sock"),
        );
        let listener = std::os::unix::net::UnixListener::bind(&stream).unwrap();
        let datagrams = std::os::unix::net::UnixDatagram::bind(&datagram).unwrap();
        for path in [&stream, &datagram] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        (stream, datagram, (listener, datagrams))
    }

    /// The proxy, as `proxy`, in front of the server, with `flags`: its process, its address
    /// and its log (what was logged before it listened, and the rest).
    async fn start(
        &self,
        proxy: Proxy,
        flags: &[&str],
    ) -> (
        tokio::process::Child,
        SocketAddr,
        Vec<serde_json::Value>,
        LogLines,
    ) {
        let command = tokio::process::Command::new(&self.binary);
        self.start_with(command, proxy, flags).await
    }

    /// [`Place::start`], started by `command` (which runs the binary).
    async fn start_with(
        &self,
        mut command: tokio::process::Command,
        proxy: Proxy,
        flags: &[&str],
    ) -> (
        tokio::process::Child,
        SocketAddr,
        Vec<serde_json::Value>,
        LogLines,
    ) {
        as_user(&mut command, proxy);
        let stdio = format!("/usr/bin/python3 {}", self.server.display());
        let mut args = vec!["--listen", "127.0.0.1:0", "--stdio", &stdio];
        args.extend(flags);
        let tmp = self.tmp();
        let tmp = tmp.to_str().unwrap();
        let (child, addr, logs, seen) =
            spawn_proxy_command(command, &args, &[("TMPDIR", tmp)]).await;
        (child, addr, seen, logs)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `command` as `proxy`'s user.
fn as_user(command: &mut tokio::process::Command, proxy: Proxy) {
    if proxy == Proxy::Nobody {
        let (uid, gid) = nobody();
        command.uid(uid).gid(gid);
    }
}

fn nobody() -> (u32, u32) {
    let user = User::from_name("nobody")
        .unwrap()
        .expect("a user named nobody");
    (user.uid.as_raw(), user.gid.as_raw())
}

/// With or without a network, a ring makes no socket: io_uring is refused.
#[tokio::test]
async fn io_uring_is_refused_so_no_socket_is_made_past_the_rules() {
    for proxy in every_proxy() {
        let place = Place::new("io-uring", proxy);
        for network in ["none", "allow"] {
            let (_proxy, addr, ..) = place
                .start(proxy, &["--sandbox", "--sandbox-network", network])
                .await;
            let mut client = Client::initialized(addr, "2025-11-25").await;
            assert_eq!(
                client.call_tool("io_uring", json!({})).await,
                "EPERM",
                "{proxy:?}, network {network}"
            );
        }
    }
}

/// A child may set its own limits, priority, affinity, scheduling and I/O priority, and none of
/// the proxy's: the proxy serves new sessions after every try.
#[tokio::test]
async fn a_child_throttles_neither_the_proxy_nor_anything_outside_but_itself() {
    for proxy in every_proxy() {
        let place = Place::new("throttle", proxy);
        let (child, addr, ..) = place.start(proxy, &["--sandbox"]).await;
        let proxy_pid = child.id().unwrap();
        let mut client = Client::initialized(addr, "2025-11-25").await;
        for tool in ["prlimit", "setpriority", "affinity", "scheduler", "ioprio"] {
            assert_eq!(
                client.call_tool(tool, json!({ "pid": proxy_pid })).await,
                "EPERM",
                "{tool} on the proxy, {proxy:?}"
            );
            assert_eq!(
                client.call_tool(tool, json!({ "pid": 0 })).await,
                "done",
                "{tool} on itself, {proxy:?}"
            );
        }
        let mut next = Client::initialized(addr, "2025-11-25").await;
        assert_eq!(next.call_tool("fd", json!({ "n": 1 })).await, "done");
    }
}

/// No system call goes around the filter through another entry: the x32 one is refused, and the
/// 32-bit one (`int 0x80`) ends the child, whose session goes on with a new one.
#[tokio::test]
async fn the_x32_and_32_bit_entries_are_refused() {
    for proxy in every_proxy() {
        let place = Place::new("entries", proxy);
        let (_proxy, addr, ..) = place
            .start(proxy, &["--sandbox", "--sandbox-network", "none"])
            .await;
        let mut client = Client::initialized(addr, "2025-11-25").await;
        assert_ne!(client.call_tool("x32", json!({})).await, "done");
        if cfg!(target_arch = "x86_64") {
            let ended = client
                .request("tools/call", json!({ "name": "int80", "arguments": {} }))
                .await;
            let message = ended["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("SIGSYS"), "{ended}");
            assert_eq!(client.call_tool("fd", json!({ "n": 1 })).await, "done");
        }
    }
}

/// With no network, not even a Unix socket is reached by its path (a Redis, a Docker socket);
/// pairs of its own and pipes still work. With the network allowed, the same path is reached.
#[tokio::test]
async fn with_no_network_no_unix_socket_is_reached_by_path() {
    for proxy in every_proxy() {
        let place = Place::new("unix-path", proxy);
        let (path, dgram_path, _sockets) = place.unix_sockets();
        let path = path.to_str().unwrap();
        let (_proxy, addr, ..) = place
            .start(proxy, &["--sandbox", "--sandbox-network", "none"])
            .await;
        let mut client = Client::initialized(addr, "2025-11-25").await;
        let by_path = client.call_tool("unix_path", json!({ "path": path })).await;
        assert_eq!(by_path, "EPERM", "{proxy:?}");
        assert_eq!(client.call_tool("socketpair", json!({})).await, "done");
        let inet6 = json!({ "family": "AF_INET6" });
        let other_pair = client.call_tool("socketpair_of", inet6).await;
        assert_eq!(other_pair, "EPERM", "a pair of another family, {proxy:?}");
        let dgram = dgram_path.to_str().unwrap();
        let datagram = client
            .call_tool("unix_dgram", json!({ "path": dgram }))
            .await;
        assert_eq!(datagram, "EPERM", "a datagram pair's sendto, {proxy:?}");
        let (_proxy, addr, ..) = place.start(proxy, &["--sandbox"]).await;
        let mut allowed = Client::initialized(addr, "2025-11-25").await;
        let by_path = allowed
            .call_tool("unix_path", json!({ "path": path }))
            .await;
        assert_eq!(by_path, "done", "{proxy:?}");
        let datagram = allowed
            .call_tool("unix_dgram", json!({ "path": dgram }))
            .await;
        assert_eq!(datagram, "done", "{proxy:?}");
    }
}

/// With `connect_ports`, UDP is refused (names are then resolved over TCP: `RES_OPTIONS`),
/// unless `udp = "allow"`: then the datagram arrives.
#[tokio::test]
async fn with_connect_ports_udp_is_refused_unless_allowed() {
    let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    receiver
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let port = receiver.local_addr().unwrap().port();
    for proxy in every_proxy() {
        let place = Place::new("udp", proxy);
        let ports = ["--sandbox", "--sandbox-connect-port", "443"];
        let (_proxy, addr, ..) = place.start(proxy, &ports).await;
        let mut client = Client::initialized(addr, "2025-11-25").await;
        assert_eq!(
            client.call_tool("udp", json!({ "port": port })).await,
            "EPERM",
            "{proxy:?}"
        );
        assert_eq!(
            client
                .call_tool("env", json!({ "name": "RES_OPTIONS" }))
                .await,
            "use-vc"
        );
        let allowed = [&ports[..], &["--sandbox-udp", "allow"]].concat();
        let (_proxy, addr, ..) = place.start(proxy, &allowed).await;
        let mut client = Client::initialized(addr, "2025-11-25").await;
        assert_eq!(
            client.call_tool("udp", json!({ "port": port })).await,
            "done"
        );
        let mut datagram = [0u8; 16];
        let (length, _) = receiver.recv_from(&mut datagram).unwrap();
        assert_eq!(&datagram[..length], b"escaped");
    }
}

/// With `connect_ports`, a child reaches no Unix socket by path (a stream or a datagram one:
/// `docker.sock`, D-Bus, a Redis on a socket) and listens on no port (`listen` would bind an
/// unbound socket to one of the kernel's choosing, on every address); a pair of its own works.
#[tokio::test]
async fn with_connect_ports_no_unix_socket_is_reached_and_nothing_listens() {
    for proxy in every_proxy() {
        let place = Place::new("ports-unix", proxy);
        let (path, dgram_path, _sockets) = place.unix_sockets();
        let ports = ["--sandbox", "--sandbox-connect-port", "443"];
        let (_proxy, addr, ..) = place.start(proxy, &ports).await;
        let mut client = Client::initialized(addr, "2025-11-25").await;
        let path = path.to_str().unwrap();
        let by_path = client.call_tool("unix_path", json!({ "path": path })).await;
        assert_eq!(by_path, "EPERM", "{proxy:?}");
        let dgram = dgram_path.to_str().unwrap();
        let datagram = client
            .call_tool("unix_dgram", json!({ "path": dgram }))
            .await;
        assert_eq!(datagram, "EPERM", "{proxy:?}");
        assert_eq!(client.call_tool("listen", json!({})).await, "EPERM");
        assert_eq!(client.call_tool("socketpair", json!({})).await, "done");
        let (_proxy, addr, ..) = place.start(proxy, &["--sandbox"]).await;
        let mut allowed = Client::initialized(addr, "2025-11-25").await;
        assert_eq!(allowed.call_tool("listen", json!({})).await, "done");
    }
}

/// No child makes a set-user-id or set-group-id file, by `chmod` (of its own file, or of one of
/// the system's it owns as root: Landlock does not bound whose modes it changes) or by creating
/// one with that mode; other modes are its to set on its own files.
#[tokio::test]
async fn no_child_makes_a_set_id_program() {
    for proxy in every_proxy() {
        let place = Place::new("set-id", proxy);
        let system = place.dir.join("system-program");
        std::fs::write(&system, "#!/bin/sh\n").unwrap();
        place.give(proxy, &system);
        std::fs::set_permissions(&system, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (_proxy, addr, ..) = place.start(proxy, &["--sandbox"]).await;
        let mut client = Client::initialized(addr, "2025-11-25").await;
        let home = client.call_tool("home", json!({})).await;
        let own = format!("{home}/program");
        for (tool, path, mode, said) in [
            ("open_create", own.as_str(), "4755", "EPERM"),
            ("open_create", &own, "2755", "EPERM"),
            ("open_create", &own, "755", "done"),
            ("chmod", &own, "4755", "EPERM"),
            ("chmod", &own, "2711", "EPERM"),
            ("chmod", &own, "700", "done"),
            ("chmod", system.to_str().unwrap(), "4755", "EPERM"),
        ] {
            let args = json!({ "path": path, "mode": mode });
            let answer = client.call_tool(tool, args).await;
            assert_eq!(answer, said, "{proxy:?}: {tool} {path} {mode}");
        }
        let mode = std::fs::metadata(&system).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755, "{proxy:?}");
    }
}

/// A root proxy's children keep no capability, confined or not (bounding set included): they
/// cannot rename the host, nor read the proxy's environment (its secret there); the start warns
/// that they run as root. A capability configuration names is kept.
#[tokio::test]
async fn no_child_of_a_root_proxy_keeps_a_capability_confined_or_not() {
    if !Uid::effective().is_root() {
        eprintln!("skipped: a child's capabilities are a root proxy's question");
        return;
    }
    let place = Place::new("capabilities", Proxy::Own);
    for flags in [&[][..], &["--sandbox"][..]] {
        let (child, addr, seen, _) = place.start(Proxy::Own, flags).await;
        let warned = seen.iter().any(|entry| {
            entry["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("stdio children run as root"))
        });
        assert!(warned, "{seen:?}");
        let mut client = Client::initialized(addr, "2025-11-25").await;
        let none = "0000000000000000 0000000000000000 0000000000000000 0000000000000000";
        assert_eq!(client.call_tool("capabilities", json!({})).await, none);
        assert_eq!(client.call_tool("sethostname", json!({})).await, "EPERM");
        let environ = format!("/proc/{}/environ", child.id().unwrap());
        let read = client.call_tool("read", json!({ "path": environ })).await;
        assert_ne!(read, "done", "{flags:?}");
    }
    let (_proxy, addr, ..) = place
        .start(Proxy::Own, &["--upstream-capability", "net_bind_service"])
        .await;
    let mut client = Client::initialized(addr, "2025-11-25").await;
    let kept = "0000000000000400 0000000000000400 0000000000000400 0000000000000400";
    assert_eq!(client.call_tool("capabilities", json!({})).await, kept);
}

/// A child leads a session of its own, with no controlling terminal (not the one the proxy was
/// started from), and types into no terminal (`TIOCSTI` refused); it makes no System V IPC
/// object, which would outlive it, be shared with the next child of its user id and escape
/// its limits.
#[tokio::test]
async fn a_child_has_no_terminal_nor_system_v_ipc() {
    for proxy in every_proxy() {
        let place = Place::new("terminal", proxy);
        let (_proxy, addr, ..) = place.start(proxy, &[]).await;
        let mut unconfined = Client::initialized(addr, "2025-11-25").await;
        assert_eq!(unconfined.call_tool("session", json!({})).await, "leader");
        let (_proxy, addr, ..) = place.start(proxy, &["--sandbox"]).await;
        let mut client = Client::initialized(addr, "2025-11-25").await;
        assert_eq!(client.call_tool("session", json!({})).await, "leader");
        assert_eq!(
            client.call_tool("tiocsti", json!({})).await,
            "EPERM",
            "{proxy:?}"
        );
        assert_eq!(
            client.call_tool("shm", json!({})).await,
            "EPERM",
            "{proxy:?}"
        );
    }
}

/// A child that floods its stderr costs the proxy's log a budget of lines: past it, its lines
/// are read and dropped, and counted.
#[tokio::test]
async fn a_stderr_flood_is_logged_to_a_budget_and_the_rest_counted() {
    let place = Place::new("stderr", Proxy::Own);
    let (_proxy, addr, _, mut logs) = place.start(Proxy::Own, &["--sandbox"]).await;
    let mut client = Client::initialized(addr, "2025-11-25").await;
    // A line that would overwrite its own start on a terminal with a forged entry.
    let forged =
        json!({ "text": "harmless\r2026-12-07T00:00:00Z ERROR mcp_session_proxy: forged" });
    assert_eq!(client.call_tool("stderr", forged).await, "done");
    crate::harness::within("the line, its carriage return escaped", async {
        while let Ok(Some(line)) = logs.next_line().await {
            let entry: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            let message = entry["fields"]["message"].as_str().unwrap_or_default();
            if message.starts_with("harmless") {
                assert!(message.starts_with("harmless\\r2026"), "{message:?}");
                return;
            }
        }
        panic!("the proxy's log ended");
    })
    .await;
    tokio::spawn(async move { while let Ok(Some(_)) = logs.next_line().await {} });
    let flooded = client
        .call_tool("flood_stderr", json!({ "lines": 20000 }))
        .await;
    assert_eq!(flooded, "done");
    // Lines on stdout that are not messages: what is said of them has a budget too.
    let flooded = client
        .call_tool("flood_stdout", json!({ "lines": 20000 }))
        .await;
    assert_eq!(flooded, "done");
    let dropped = || async {
        let metrics = Client::new(addr)
            .send_to("/metrics", http::Method::GET, &[], None)
            .await
            .bytes()
            .await;
        crate::harness::metric_in(
            &String::from_utf8_lossy(&metrics),
            "mcp_proxy_upstream_stderr_lines_dropped_total",
        )
    };
    crate::harness::within("the flood's lines past the budget counted", async {
        // Twice 20,000 lines against a burst of 1,000 and 100 a second: most are dropped.
        while dropped().await < 30_000 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// A descriptor the proxy was started with, without close-on-exec, reaches no child.
#[tokio::test]
async fn no_descriptor_the_proxy_inherited_reaches_a_child() {
    for proxy in every_proxy() {
        let place = Place::new("descriptors", proxy);
        for flags in [&[][..], &["--sandbox"][..]] {
            // A shell opens descriptor 7, then becomes the proxy.
            let mut shell = tokio::process::Command::new("sh");
            shell.args(["-c", "exec 7</dev/null; exec \"$0\" \"$@\""]);
            shell.arg(&place.binary);
            let (_proxy, addr, ..) = place.start_with(shell, proxy, flags).await;
            let mut client = Client::initialized(addr, "2025-11-25").await;
            assert_eq!(client.call_tool("fd", json!({ "n": 7 })).await, "EBADF");
        }
    }
}

/// A process a child double-forks into a session of its own ends with the child's session,
/// confined or not.
#[tokio::test]
async fn nothing_a_child_starts_outlives_its_session() {
    for proxy in every_proxy() {
        let place = Place::new("daemon", proxy);
        for flags in [&[][..], &["--sandbox"][..]] {
            let (_proxy, addr, ..) = place.start(proxy, flags).await;
            let mut client = Client::initialized(addr, "2025-11-25").await;
            let daemon = client.call_tool("daemon", json!({})).await;
            assert!(alive(&daemon), "{daemon}");
            // A chain of processes, each the child of the one before, each in a session of
            // its own: the launcher ends them one by one, each reparented to it in turn.
            let chain = client.call_tool("chain", json!({ "count": 200 })).await;
            let chain: Vec<&str> = chain.split_whitespace().collect();
            assert_eq!(chain.len(), 200);
            client.delete().await;
            eventually("the daemon to end with its session", || !alive(&daemon)).await;
            eventually("the chain to end with its session", || {
                chain.iter().all(|pid| !alive(pid))
            })
            .await;
        }
    }
}

/// With `user_range`, an id is given to the next child only once nothing runs as it: with one
/// id, the next session is refused (502) until the last one's child is released, and its child
/// starts after the daemon the last one left has ended.
#[tokio::test]
async fn a_user_id_is_given_again_only_once_nothing_runs_as_it() {
    if !Uid::effective().is_root() {
        eprintln!("skipped: running children as other users needs root, and this test is not");
        return;
    }
    let place = Place::new("range", Proxy::Own);
    let range = ["--upstream-user-range", "100020-100020", "--sandbox"];
    let (_proxy, addr, ..) = place.start(Proxy::Own, &range).await;
    let mut first = Client::initialized(addr, "2025-11-25").await;
    let daemon = first.call_tool("daemon", json!({})).await;
    let who = first.call_tool("whoami", json!({})).await;
    first.delete().await;
    let mut next = crate::harness::within("the id to be given again", async {
        loop {
            let mut client = Client::new(addr);
            match client.try_initialize("2025-11-25").await {
                Ok(_) => break client,
                Err(status) => assert_eq!(status, http::StatusCode::BAD_GATEWAY),
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(
        next.call_tool("whoami", json!({})).await,
        who,
        "the same id"
    );
    assert!(!alive(&daemon), "the daemon of the id's last child");
}

/// The proxy's private directories go with it: its own at exit (a folder a child closed to its
/// own user included), a killed one's at the next start.
#[tokio::test]
async fn the_proxy_leaves_no_private_directory_behind() {
    for proxy in every_proxy() {
        let place = Place::new("private-dirs", proxy);
        let stale = place.tmp().join("mcp-session-proxy-99999999");
        std::fs::create_dir_all(stale.join("a-child")).unwrap();
        for path in [&stale, &stale.join("a-child")] {
            place.give(proxy, path);
        }
        let (mut child, addr, ..) = place.start(proxy, &["--sandbox"]).await;
        assert!(!stale.exists(), "a killed proxy's, removed at start");
        let own = place
            .tmp()
            .join(format!("mcp-session-proxy-{}", child.id().unwrap()));
        let mut client = Client::initialized(addr, "2025-11-25").await;
        assert_eq!(client.call_tool("lock_home", json!({})).await, "done");
        assert!(own.exists());
        let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        crate::harness::within("the proxy to stop", child.wait())
            .await
            .unwrap();
        assert!(!own.exists(), "its own, removed at exit");
    }
}

/// A child that leaves a folder tree deeper than a path can name (20,000 folders, made from the
/// bottom up) has its directory removed when its session ends, off the proxy's runtime and a
/// folder at a time: the proxy goes on serving (it aborted, its stack overflowed, before) and
/// nothing of the tree is left.
#[tokio::test]
async fn a_folder_tree_a_child_leaves_however_deep_is_removed_and_the_proxy_goes_on() {
    for proxy in every_proxy() {
        let place = Place::new("deep", proxy);
        let (mut child, addr, ..) = place.start(proxy, &["--sandbox"]).await;
        let client = {
            let mut client = Client::initialized(addr, "2025-11-25").await;
            let home = client.call_tool("home", json!({})).await;
            let deep = json!({ "levels": 20_000 });
            assert_eq!(client.call_tool("deep", deep).await, "done", "{proxy:?}");
            assert!(client.delete().await.is_success());
            eventually("the child's directory removed", || {
                !Path::new(&home).exists()
            })
            .await;
            client
        };
        drop(client);
        let mut next = Client::initialized(addr, "2025-11-25").await;
        assert!(!next.call_tool("home", json!({})).await.is_empty());
        assert!(
            child.try_wait().unwrap().is_none(),
            "{proxy:?}: the proxy runs"
        );
    }
}

/// With `upstream.user`, the package cache is lent to that user while it is warmed and sealed
/// after: the proxy's, so a session's child (running as that user) changes nothing of it, its
/// modes included, and reads it through its view.
#[tokio::test]
async fn with_a_configured_user_the_sealed_cache_is_the_proxys() {
    if !Uid::effective().is_root() {
        eprintln!("skipped: running children as another user needs root");
        return;
    }
    let place = Place::new("user-cache", Proxy::Own);
    // The temporary directory the children's own are in, open for them to pass through.
    std::fs::set_permissions(place.tmp(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let cache = place.dir.join("cache");
    let cache_flag = cache.to_str().unwrap();
    let flags = [
        "--sandbox",
        "--upstream-user",
        "nobody",
        "--sandbox-cache-dir",
        cache_flag,
    ];
    let (_proxy, addr, ..) = place.start(Proxy::Own, &flags).await;
    let mut client = Client::initialized(addr, "2025-11-25").await;
    crate::upstream::sandbox::the_sealed_cache_is_the_proxys(&mut client, &cache).await;
}

/// The directories the proxy grants a confined child by itself are checked as well: a
/// configuration beside the server's script, or in a folder below it, or a secret file in the
/// server's `node_modules`, stops the start naming the command and the file, with the fix.
#[tokio::test]
async fn a_file_of_the_proxys_own_in_the_commands_own_directories_stops_the_start() {
    for proxy in every_proxy() {
        let place = Place::new("own-reach", proxy);
        let dir = place.tmp();
        std::fs::create_dir_all(dir.join("conf")).unwrap();
        std::fs::create_dir_all(dir.join("app/node_modules/server")).unwrap();
        let script = dir.join("server.py");
        let module = dir.join("app/node_modules/server/index.js");
        let secret = dir.join("app/node_modules/secret");
        std::fs::write(&script, "").unwrap();
        std::fs::write(&module, "").unwrap();
        std::fs::write(&secret, "0123456789abcdef0123456789abcdef").unwrap();
        let elsewhere = place.dir.join("elsewhere.toml");
        let with_secret = format!(
            "[cluster]\nsecret_file = {:?}\n",
            secret.display().to_string()
        );
        let cases = [
            (
                dir.join("proxy.toml"),
                "/usr/bin/python3",
                &script,
                "proxy.toml",
            ),
            (
                dir.join("conf/proxy.toml"),
                "/usr/bin/python3",
                &script,
                "conf/proxy.toml",
            ),
            (elsewhere, "node", &module, "secret"),
        ];
        for (config, program, file, named) in cases {
            let text = match named {
                "secret" => with_secret.as_str(),
                _ => "[session]\nidle_ttl = \"10m\"\n",
            };
            std::fs::write(&config, text).unwrap();
            let stdio = format!("{program} {}", file.display());
            let config = config.display().to_string();
            let args = [
                "--listen",
                "127.0.0.1:0",
                "--config",
                &config,
                "--stdio",
                &stdio,
                "--sandbox",
            ];
            let command = place.command(proxy);
            let stderr = crate::harness::refused_start_command(command, &args, &[]).await;
            assert!(
                stderr.contains("upstream.stdio")
                    && stderr.contains(named)
                    && stderr.contains("move the file"),
                "{proxy:?}, {stdio}: {stderr}"
            );
        }
    }
}

/// A child cannot widen a later child's reach: the command's own directories are found once,
/// at start, so a `pyvenv.cfg` a child writes beside its script (in a folder it may write),
/// naming the proxy's configuration folder as its Python's home, opens nothing to the next.
#[tokio::test]
async fn what_a_child_writes_beside_its_script_widens_no_later_childs_reach() {
    let proxy = Proxy::Own;
    let place = Place::new("plant", proxy);
    let (app, conf) = (place.dir.join("app"), place.dir.join("conf"));
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(conf.join("bin")).unwrap();
    let server = app.join("escape.py");
    std::fs::copy(&place.server, &server).unwrap();
    let config = conf.join("proxy.toml");
    std::fs::write(&config, "[session]\nidle_ttl = \"10m\"\n").unwrap();
    let stdio = format!("/usr/bin/python3 {}", server.display());
    let (config_arg, app_arg) = (config.display().to_string(), app.display().to_string());
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--config",
        &config_arg,
        "--stdio",
        &stdio,
        "--sandbox",
        "--sandbox-writable",
        &app_arg,
    ];
    let tmp = place.tmp().display().to_string();
    let (_proxy, addr, ..) =
        spawn_proxy_command(place.command(proxy), &args, &[("TMPDIR", &tmp)]).await;
    let read_config = json!({ "path": config_arg });
    let mut first = Client::initialized(addr, "2025-11-25").await;
    let planted = json!({
        "path": app.join("pyvenv.cfg").display().to_string(),
        "text": format!("home = {}\n", conf.join("bin").display()),
    });
    assert_eq!(first.call_tool("write_text", planted).await, "done");
    assert_eq!(first.call_tool("cat", read_config.clone()).await, "EACCES");
    let mut next = Client::initialized(addr, "2025-11-25").await;
    assert_eq!(
        next.call_tool("cat", read_config).await,
        "EACCES",
        "the next child reads the proxy's configuration"
    );
}

/// A command whose own folder holds the children's private directories (a script in the
/// temporary directory itself) stops the start: each child would read every other's.
#[tokio::test]
async fn a_command_whose_folder_holds_the_childrens_private_directories_stops_the_start() {
    let proxy = Proxy::Own;
    let place = Place::new("own-private", proxy);
    let script = place.tmp().join("server.py");
    std::fs::copy(&place.server, &script).unwrap();
    let stdio = format!("/usr/bin/python3 {}", script.display());
    let args = ["--listen", "127.0.0.1:0", "--stdio", &stdio, "--sandbox"];
    let tmp = place.tmp().display().to_string();
    let stderr =
        crate::harness::refused_start_command(place.command(proxy), &args, &[("TMPDIR", &tmp)])
            .await;
    assert!(
        stderr.contains("upstream.stdio") && stderr.contains("the children's private directories"),
        "{stderr}"
    );
}

/// The start line names the scheme the listener speaks: `https://` with `[tls]`. (The files are
/// the test's: a proxy as `nobody` reads them from a folder of its own.)
#[tokio::test]
async fn the_start_line_says_https_with_tls() {
    for proxy in every_proxy() {
        let place = Place::new("scheme", proxy);
        let certificates = crate::harness::tls::Certificates::make();
        let mut flags = Vec::new();
        for (flag, name) in [
            ("--tls-cert", "server.pem"),
            ("--tls-key", "server-key.pem"),
        ] {
            let copy = place.tmp().join(name);
            std::fs::copy(certificates.path(name), &copy).unwrap();
            place.give(proxy, &copy);
            flags.extend([flag.to_owned(), copy.display().to_string()]);
        }
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let (_proxy, addr, seen, _) = place.start(proxy, &flags).await;
        let line = seen.last().unwrap()["fields"]["message"].to_string();
        assert!(
            line.contains(&format!("listening on https://{addr}/mcp")),
            "{line}"
        );
    }
}

/// The proxy's own children share its loopback: while they may reach the network, a principal
/// header from loopback is refused at start unless the trusted proxies prove themselves with a
/// token; then a child that names a principal is refused (403), and the trusted proxy, with
/// its token, is heard.
#[tokio::test]
async fn a_child_cannot_name_a_principal_to_the_proxy() {
    for proxy in every_proxy() {
        let place = Place::new("principal", proxy);
        let header = ["--principal-header", "x-user"];
        let command = place.command(proxy);
        let stdio = format!("/usr/bin/python3 {}", place.server.display());
        let mut args = vec!["--listen", "127.0.0.1:0", "--stdio", &stdio];
        args.extend(header);
        let stderr = crate::harness::refused_start_command(command, &args, &[]).await;
        for key in [
            "http.principal_header",
            "http.trusted_proxies",
            "http.trusted_proxy_token_file",
        ] {
            assert!(stderr.contains(key), "{key}: {stderr}");
        }
        let token = place.tmp().join("proxy-token");
        std::fs::write(&token, "a-token-only-the-balancer-knows").unwrap();
        place.give(proxy, &token);
        let token_file = ["--trusted-proxy-token-file", token.to_str().unwrap()];
        let (_proxy, addr, ..) = place
            .start(proxy, &[&header[..], &token_file[..]].concat())
            .await;
        let mut client = Client::initialized(addr, "2025-11-25").await;
        let named = json!({ "port": addr.port(), "header": "x-user", "user": "alice" });
        assert_eq!(client.call_tool("post_as", named).await, "403", "{proxy:?}");
        let named = |token: &[&str]| {
            let mut client = Client::new(addr);
            client.extra_headers = vec![("x-user".into(), "alice".into())];
            let tokens = token
                .iter()
                .map(|t| ("x-trusted-proxy-token".into(), t.to_string()));
            client.extra_headers.extend(tokens);
            client
        };
        // A guessed token, or the token sent twice (one a guess), is no proof.
        for token in [
            &["guess"][..],
            &["guess", "a-token-only-the-balancer-knows"][..],
        ] {
            let refused = named(token).try_initialize("2025-11-25").await;
            assert_eq!(
                refused.unwrap_err(),
                http::StatusCode::FORBIDDEN,
                "{token:?}"
            );
        }
        named(&["a-token-only-the-balancer-knows"])
            .initialize("2025-11-25")
            .await;
    }
}

/// Whether process `pid` (a number in text) runs, and is not a zombie.
fn alive(pid: &str) -> bool {
    let stat = std::fs::read_to_string(Path::new("/proc").join(pid).join("stat"));
    stat.is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}
