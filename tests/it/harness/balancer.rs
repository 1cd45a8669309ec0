//! Real balancers for tests: nginx and HAProxy (Debian packages, installed by scripts/test)
//! running the configurations the project ships, config/nginx.conf and config/haproxy.cfg (and
//! their TLS forms, config/nginx-tls.conf and config/haproxy-tls.cfg, and their owner-aware
//! forms, config/nginx-owner.conf and config/haproxy-owner.cfg), rendered for replicas on
//! 127.0.0.1: the lines between `# replicas` and `# end replicas`
//! become one copy of their first line per replica (its address changed, `replica-1` numbered
//! on, or renamed after the replica's `--node-id`), the first group between `# each replica` and
//! `# end each replica` (up to the `}` that closes it) one copy per replica, renamed likewise,
//! whose own `# replicas` block takes its first line for that replica and its second for each of
//! the others; the lines between `# listen` and `# end listen` their first line listening on a
//! free loopback port, and nginx's paths (under /var/log/nginx/, /var/lib/nginx/, /run/, and its
//! temporary files) and the certificates' (under /etc/mcp-session-proxy/tls/) move to a folder of
//! the balancer's own. Each is stopped by its own handle,
//! also when a test fails.
//! bench/balancer.py (for bench/chaos.py and bench/run.py) renders them the same way.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use super::{free_port, within};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Nginx,
    Haproxy,
    /// nginx over TLS to clients and to the replicas.
    NginxTls,
    /// HAProxy over TLS to clients and to the replicas.
    HaproxyTls,
    /// nginx sending each request of a session to the replica its id names.
    NginxOwner,
    /// HAProxy sending each request of a session to the replica its id names.
    HaproxyOwner,
}

impl Kind {
    fn program(self) -> &'static str {
        match self {
            Kind::Nginx | Kind::NginxTls | Kind::NginxOwner => "nginx",
            Kind::Haproxy | Kind::HaproxyTls | Kind::HaproxyOwner => "haproxy",
        }
    }

    fn shipped(self) -> &'static str {
        match self {
            Kind::Nginx => "config/nginx.conf",
            Kind::Haproxy => "config/haproxy.cfg",
            Kind::NginxTls => "config/nginx-tls.conf",
            Kind::HaproxyTls => "config/haproxy-tls.cfg",
            Kind::NginxOwner => "config/nginx-owner.conf",
            Kind::HaproxyOwner => "config/haproxy-owner.cfg",
        }
    }

    /// Whether it routes on the replica a session id names (its servers named after the
    /// replicas' `--node-id`).
    pub fn owner_aware(self) -> bool {
        matches!(self, Kind::NginxOwner | Kind::HaproxyOwner)
    }

    pub fn tls(self) -> bool {
        matches!(self, Kind::NginxTls | Kind::HaproxyTls)
    }

    fn nginx(self) -> bool {
        self.program() == "nginx"
    }
}

/// A balancer process in front of replicas, listening on 127.0.0.1.
pub struct Balancer {
    child: Option<Child>,
    addr: SocketAddr,
    dir: PathBuf,
    kind: Kind,
}

impl Balancer {
    /// nginx running config/nginx.conf in front of `replicas`, once it accepts connections.
    pub async fn nginx(replicas: &[SocketAddr]) -> Balancer {
        Balancer::start(Kind::Nginx, replicas).await
    }

    pub async fn start(kind: Kind, replicas: &[SocketAddr]) -> Balancer {
        assert!(
            !kind.owner_aware(),
            "{kind:?} routes by the replicas' names: Balancer::start_named"
        );
        assert!(
            !kind.tls(),
            "{kind:?} needs certificates: Balancer::start_tls"
        );
        Balancer::launch(kind, &numbered(replicas), fresh_dir(kind.program())).await
    }

    /// A balancer in front of replicas named as their `--node-id` (`("a", address)`).
    pub async fn start_named(kind: Kind, replicas: &[(&str, SocketAddr)]) -> Balancer {
        assert!(
            !kind.tls(),
            "{kind:?} needs certificates: Balancer::start_tls"
        );
        let named: Vec<_> = replicas
            .iter()
            .map(|(name, addr)| (name.to_string(), *addr))
            .collect();
        Balancer::launch(kind, &named, fresh_dir(kind.program())).await
    }

    /// A balancer of a TLS kind, showing clients `server.pem` of `certificates` (for
    /// 127.0.0.1 and localhost) and trusting their `ca.pem` alone for the replicas.
    pub async fn start_tls(kind: Kind, replicas: &[SocketAddr], certificates: &Path) -> Balancer {
        assert!(kind.tls(), "{kind:?} speaks no TLS: Balancer::start");
        let dir = fresh_dir(kind.program());
        let tls = dir.join("tls");
        std::fs::create_dir(&tls).unwrap();
        let read = |name: &str| std::fs::read(certificates.join(name)).unwrap();
        let (cert, key) = (read("server.pem"), read("server-key.pem"));
        std::fs::write(tls.join("balancer.crt"), &cert).unwrap();
        std::fs::write(tls.join("balancer.key"), &key).unwrap();
        std::fs::write(tls.join("balancer.pem"), [cert, key].concat()).unwrap();
        std::fs::write(tls.join("replicas-ca.crt"), read("ca.pem")).unwrap();
        Balancer::launch(kind, &numbered(replicas), dir).await
    }

    async fn launch(kind: Kind, replicas: &[(String, SocketAddr)], dir: PathBuf) -> Balancer {
        let program = installed(kind.program());
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let shipped = std::fs::read_to_string(root.join(kind.shipped())).unwrap();
        // A port another test takes between our look and the balancer's bind: try another.
        let mut tries = 0;
        loop {
            tries += 1;
            let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let config = dir.join(kind.program()).with_extension("conf");
            std::fs::write(&config, render(kind, &shipped, addr, replicas, &dir)).unwrap();
            let output = std::fs::File::create(dir.join("output.log")).unwrap();
            let mut command = Command::new(&program);
            match kind.program() {
                "nginx" => command
                    .arg("-c")
                    .arg(&config)
                    .arg("-p")
                    .arg(format!("{}/", dir.display()))
                    .args(["-e", "stderr", "-g", "daemon off;"]),
                _ => command.arg("-f").arg(&config).arg("-db"),
            };
            let mut child = command
                .stdin(Stdio::null())
                .stdout(output.try_clone().unwrap())
                .stderr(output)
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|e| panic!("{} does not start: {e}", program.display()));
            if accepting(&mut child, addr).await {
                return Balancer {
                    child: Some(child),
                    addr,
                    dir,
                    kind,
                };
            }
            let said = std::fs::read_to_string(dir.join("output.log")).unwrap_or_default();
            assert!(
                tries < 3,
                "{} exited at start ({}):\n{said}",
                kind.program(),
                dir.display()
            );
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its MCP endpoint: `http://127.0.0.1:<port>/mcp` (https:// over TLS).
    pub fn url(&self) -> String {
        let scheme = if self.kind.tls() { "https" } else { "http" };
        format!("{scheme}://{}/mcp", self.addr)
    }

    /// What it logged of trouble: a replica marked down, an upstream error, any alert.
    pub fn complaints(&self) -> Vec<String> {
        let marks: &[&str] = match self.kind.nginx() {
            true => &["[error]", "[crit]", "[alert]", "[emerg]"],
            false => &["[ALERT]", "[WARNING]", " is DOWN"],
        };
        self.logs()
            .lines()
            .filter(|line| marks.iter().any(|mark| line.contains(mark)))
            .map(str::to_owned)
            .collect()
    }

    /// What it wrote: its output, and nginx's error and access logs.
    pub fn logs(&self) -> String {
        ["output.log", "error.log", "mcp-access.log"]
            .iter()
            .filter_map(|name| {
                let text = std::fs::read_to_string(self.dir.join(name)).ok()?;
                Some(format!("--- {name}\n{text}"))
            })
            .collect()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let Some(child) = self.child.take() else {
            return;
        };
        terminate(child);
        if std::thread::panicking() {
            eprintln!(
                "{:?} in {} kept for a look:\n{}",
                self.kind,
                self.dir.display(),
                self.logs()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Stops `child` (nginx, HAProxy) by its own PID: SIGTERM, for nginx's master stops its
/// workers before it exits (a SIGKILL would leave them serving), then its exit awaited (up to
/// 5 s; `kill_on_drop` sends SIGKILL after that).
pub(super) fn terminate(mut child: Child) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// `replicas` named as the round-robin files name their servers: `replica-1`, `replica-2`, ...
fn numbered(replicas: &[SocketAddr]) -> Vec<(String, SocketAddr)> {
    let named = |(n, addr): (usize, &SocketAddr)| (format!("replica-{}", n + 1), *addr);
    replicas.iter().enumerate().map(named).collect()
}

/// The shipped configuration `text` for a balancer on `listen` in front of `replicas` (each
/// named as its `--node-id`), with its paths in `dir`.
pub fn render(
    kind: Kind,
    text: &str,
    listen: SocketAddr,
    replicas: &[(String, SocketAddr)],
    dir: &Path,
) -> String {
    let dir = dir.display().to_string();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let (line, mark) = (lines[at], lines[at].trim());
        if ["# replicas", "# listen", "# each replica"].contains(&mark) {
            let end = closing(&lines, at);
            let inside = &lines[at + 1..end];
            out.push(line.to_owned());
            match mark {
                "# replicas" => out.extend(replica_lines(inside, replicas, None)),
                "# listen" => {
                    let first = first_line(inside, 0).expect("a line in the listen block");
                    out.push(moved_paths(&listening_on(first, listen), &dir));
                }
                _ => out.extend(each_replica(inside, replicas)),
            }
            out.push(lines[end].to_owned());
            at = end + 1;
            continue;
        }
        out.push(moved_paths(line, &dir));
        if kind.nginx() && mark == "http {" {
            for temp in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
                out.push(format!("    {temp}_temp_path {dir}/{temp};"));
            }
        }
        at += 1;
    }
    out.join("\n") + "\n"
}

/// Where the block opened at `at` (`# replicas`) ends: its `# end replicas` line.
fn closing(lines: &[&str], at: usize) -> usize {
    let end = format!("# end {}", &lines[at].trim()[2..]);
    (at + 1..lines.len())
        .find(|&n| lines[n].trim() == end)
        .unwrap_or_else(|| panic!("{:?} without {end:?}", lines[at].trim()))
}

/// The `nth` line of `block` that is neither blank nor a comment.
fn first_line<'a>(block: &[&'a str], nth: usize) -> Option<&'a str> {
    block
        .iter()
        .copied()
        .filter(|line| !line.trim().is_empty() && !line.trim().starts_with('#'))
        .nth(nth)
}

/// One line per replica: the block's first (its address and `replica-1` changed); in the
/// group of `owner`, its second for the replicas other than `owner`.
fn replica_lines(
    block: &[&str],
    replicas: &[(String, SocketAddr)],
    owner: Option<&str>,
) -> Vec<String> {
    let first = first_line(block, 0).expect("a line in the replicas block");
    let other = owner.and(first_line(block, 1)).unwrap_or(first);
    replicas
        .iter()
        .map(|(name, addr)| {
            let line = if owner.is_none_or(|owner| owner == name.as_str()) {
                first
            } else {
                other
            };
            replace_address(line, &addr.to_string()).replace("replica-1", name)
        })
        .collect()
}

/// The first group of `block` (its first line up to the `}` that closes it), once per replica,
/// `replica-1` renamed, its own `# replicas` block rendered for that replica.
fn each_replica(block: &[&str], replicas: &[(String, SocketAddr)]) -> Vec<String> {
    let first = first_line(block, 0).expect("a group in the each replica block");
    let start = block.iter().position(|line| *line == first).unwrap();
    let indent = &first[..first.len() - first.trim_start().len()];
    let end = (start..block.len())
        .find(|&n| block[n] == format!("{indent}}}"))
        .expect("the group's closing }");
    let group = &block[start..=end];
    let mut out = Vec::new();
    for (name, _) in replicas {
        let mut at = 0;
        while at < group.len() {
            if group[at].trim() == "# replicas" {
                let stop = closing(group, at);
                out.push(group[at].to_owned());
                out.extend(replica_lines(&group[at + 1..stop], replicas, Some(name)));
                out.push(group[stop].to_owned());
                at = stop + 1;
            } else {
                out.push(group[at].replace("replica-1", name));
                at += 1;
            }
        }
    }
    out
}

/// `line` with its first `a.b.c.d:port` replaced by `address` (as it is, if it has none).
fn replace_address(line: &str, address: &str) -> String {
    let found = line.split_whitespace().find(|word| {
        let word = word.trim_end_matches(';');
        word.parse::<SocketAddr>().is_ok()
    });
    match found {
        Some(word) => line.replacen(word.trim_end_matches(';'), address, 1),
        None => line.to_owned(),
    }
}

/// `listen 80;`, `listen 443 ssl;` or `bind :80`: the same directive on `addr`, with what
/// followed the address.
fn listening_on(line: &str, addr: SocketAddr) -> String {
    let indent = &line[..line.len() - line.trim_start().len()];
    let mut words = line.split_whitespace();
    let directive = words.next().unwrap();
    let address = words.next().unwrap();
    let rest: Vec<&str> = words.collect();
    match (rest.is_empty(), address.ends_with(';')) {
        (true, true) => format!("{indent}{directive} {addr};"),
        (true, false) => format!("{indent}{directive} {addr}"),
        (false, _) => format!("{indent}{directive} {addr} {}", rest.join(" ")),
    }
}

/// Paths under nginx's folders, /run/ and the certificates' folder, moved to `dir`.
fn moved_paths(line: &str, dir: &str) -> String {
    let mut line = line.to_owned();
    for prefix in [" /var/log/nginx/", " /var/lib/nginx/", " /run/"] {
        line = line.replace(prefix, &format!(" {dir}/"));
    }
    line = line.replace(" /etc/mcp-session-proxy/tls/", &format!(" {dir}/tls/"));
    line
}

/// `program` on the PATH or in /usr/sbin (Debian's place, off a user's PATH).
pub(super) fn installed(program: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("{program} is not installed: run scripts/test (it installs nginx and haproxy)")
        })
}

/// Waits (bounded) until `child` accepts connections on `addr`: false if it exited first.
pub(super) async fn accepting(child: &mut Child, addr: SocketAddr) -> bool {
    within("the balancer to accept connections", async {
        loop {
            if child.try_wait().unwrap().is_some() {
                return false;
            }
            if TcpStream::connect(addr).await.is_ok() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// A new folder for one balancer's configuration, logs and temporary files; readable by
/// nginx's workers, which run as www-data when the tests run as root.
pub(super) fn fresh_dir(program: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "mcp-{program}-{}-{nanos}-{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}
