//! Real balancers for tests: nginx and HAProxy (Debian packages, installed by scripts/test)
//! running the configurations the project ships, config/nginx.conf and config/haproxy.cfg (and
//! their TLS forms, config/nginx-tls.conf and config/haproxy-tls.cfg), rendered for replicas on
//! 127.0.0.1: the lines between `# replicas` and `# end replicas`
//! become one copy of their first line per replica (its address changed, `replica-1` numbered
//! on), the lines between `# listen` and `# end listen` their first line listening on a free
//! loopback port, and nginx's paths (under /var/log/nginx/, /var/lib/nginx/, /run/, and its
//! temporary files) and the certificates' (under /etc/mcp-session-proxy/tls/) move to a folder of
//! the balancer's own. Each is stopped by its own handle,
//! also when a test fails.
//! bench/chaos.py renders them the same way.

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
}

impl Kind {
    fn program(self) -> &'static str {
        match self {
            Kind::Nginx | Kind::NginxTls => "nginx",
            Kind::Haproxy | Kind::HaproxyTls => "haproxy",
        }
    }

    fn shipped(self) -> &'static str {
        match self {
            Kind::Nginx => "config/nginx.conf",
            Kind::Haproxy => "config/haproxy.cfg",
            Kind::NginxTls => "config/nginx-tls.conf",
            Kind::HaproxyTls => "config/haproxy-tls.cfg",
        }
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
            !kind.tls(),
            "{kind:?} needs certificates: Balancer::start_tls"
        );
        Balancer::launch(kind, replicas, fresh_dir(kind.program())).await
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
        Balancer::launch(kind, replicas, dir).await
    }

    async fn launch(kind: Kind, replicas: &[SocketAddr], dir: PathBuf) -> Balancer {
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

/// The shipped configuration `text` for a balancer on `listen` in front of `replicas`, with
/// its paths in `dir`.
pub fn render(
    kind: Kind,
    text: &str,
    listen: SocketAddr,
    replicas: &[SocketAddr],
    dir: &Path,
) -> String {
    let dir = dir.display().to_string();
    let mut out = Vec::new();
    let mut block: Option<(&str, Option<&str>)> = None;
    for line in text.lines() {
        let mark = line.trim();
        match block {
            None if mark == "# replicas" || mark == "# listen" => {
                block = Some((&mark[2..], None));
                out.push(line.to_owned());
            }
            Some((name, first)) if mark == format!("# end {name}") => {
                let first = first.unwrap_or_else(|| panic!("no line in the {name} block"));
                if name == "replicas" {
                    for (n, replica) in replicas.iter().enumerate() {
                        let line = replace_address(first, &replica.to_string());
                        out.push(line.replace("replica-1", &format!("replica-{}", n + 1)));
                    }
                } else {
                    out.push(moved_paths(&listening_on(first, listen), &dir));
                }
                out.push(line.to_owned());
                block = None;
            }
            Some((name, None)) if !mark.is_empty() && !mark.starts_with('#') => {
                block = Some((name, Some(line)));
            }
            Some(_) => {}
            None => {
                out.push(moved_paths(line, &dir));
                if kind.nginx() && mark == "http {" {
                    for temp in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
                        out.push(format!("    {temp}_temp_path {dir}/{temp};"));
                    }
                }
            }
        }
    }
    assert!(block.is_none(), "a block without its end marker");
    out.join("\n") + "\n"
}

/// `line` with its first `a.b.c.d:port` replaced by `address`.
fn replace_address(line: &str, address: &str) -> String {
    let found = line.split_whitespace().find(|word| {
        let word = word.trim_end_matches(';');
        word.parse::<SocketAddr>().is_ok()
    });
    let word = found
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .trim_end_matches(';');
    line.replacen(word, address, 1)
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
