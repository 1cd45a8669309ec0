//! How a stdio child is started and confined. Every child goes through the launcher, the
//! proxy's own binary run as `sandbox-exec`: it stays as the server's parent and reaper
//! (every process the server starts, double-forked or not, is reparented to it and ended with
//! the server), and starts the server through `sandbox-confine`, a fresh single-threaded
//! process that drops every capability, sets `no_new_privs`, and, with the sandbox, the limits,
//! the Landlock rules and the seccomp filters on itself, then executes the server in its place.
//! Nothing runs between fork and exec but what is safe there, and a server can undo none of it.

mod cache_dir;
mod cache_view;
mod capabilities;
mod confine;
mod descendants;
mod filesystem;
mod launcher;
mod limits;
mod private_dir;
mod remove_tree;
mod seccomp;
mod syscalls;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::process::Command;

pub use cache_dir::{default_root as default_cache_root, CacheDir};
pub use cache_view::CacheView;
pub use capabilities::{may_cut_bounding_set, parse as parse_capability};
pub use filesystem::{
    landlock_abi, landlock_abi_written_for, Paths, SYSTEM_READABLE, SYSTEM_WRITABLE,
};
pub use launcher::END_NOW;
pub use limits::Limits;
pub use private_dir::{
    base as private_dirs_base, remove_own as remove_own_private_dirs,
    remove_stale as remove_stale_private_dirs, PrivateDir,
};
pub use remove_tree::remove_tree;

/// The subcommand the proxy's binary runs as a launcher by: `sandbox-exec -- PROGRAM ARGS…`.
pub const LAUNCHER: &str = "sandbox-exec";
/// The launcher's second step, which confines itself and becomes the server.
const CONFINE: &str = "sandbox-confine";
/// Ends every process of the user it runs as (`kill(-1)`): run as a child's user from a range
/// before the id is given to another child.
const REAP: &str = "sandbox-reap";

/// The variable the launcher reads what it is to do from (removed before the server runs).
const SPEC_VAR: &str = "MCP_PROXY_SANDBOX";

/// Whether the child may reach the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// As the proxy may.
    #[default]
    Allow,
    /// None: no socket at all can be made, not even a Unix one (a connected pair of its own,
    /// `socketpair`, and pipes still work).
    None,
}

impl std::str::FromStr for Network {
    type Err = UnknownChoice;

    fn from_str(text: &str) -> Result<Network, UnknownChoice> {
        match text {
            "allow" => Ok(Network::Allow),
            "none" => Ok(Network::None),
            other => Err(UnknownChoice(other.to_owned(), "allow", "none")),
        }
    }
}

/// As the configuration writes it.
impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Network::Allow => "allow",
            Network::None => "none",
        })
    }
}

/// As the configuration writes it.
impl std::fmt::Display for Udp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Udp::Allow => "allow",
            Udp::Deny => "deny",
        })
    }
}

/// A setting's value that is neither of its two words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is neither {1} nor {2}")]
pub struct UnknownChoice(String, &'static str, &'static str);

/// With `connect_ports`: whether UDP is allowed too (to any port: Landlock bounds TCP only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Udp {
    /// No UDP socket: names are resolved over TCP (`RES_OPTIONS=use-vc`).
    #[default]
    Deny,
    Allow,
}

impl std::str::FromStr for Udp {
    type Err = UnknownChoice;

    fn from_str(text: &str) -> Result<Udp, UnknownChoice> {
        match text {
            "allow" => Ok(Udp::Allow),
            "deny" => Ok(Udp::Deny),
            other => Err(UnknownChoice(other.to_owned(), "allow", "deny")),
        }
    }
}

/// How a child is confined.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    pub network: Network,
    pub udp: Udp,
    pub limits: Limits,
    /// What it may read, write and connect to.
    pub paths: Paths,
    /// Where its command's package cache is kept (`cache_dir`); not the launcher's concern.
    #[serde(skip)]
    pub cache: PathBuf,
    /// Whether the proxy warms that cache at start (`warm_cache`); not the launcher's concern.
    #[serde(skip)]
    pub warm_cache: bool,
}

impl SandboxSpec {
    /// Whether this host can confine children so (seccomp is built for x86_64 and aarch64).
    pub fn check(&self) -> Result<(), SandboxError> {
        seccomp::filters(self.sockets()).map(drop)
    }

    /// The sockets the child may make.
    fn sockets(&self) -> seccomp::Sockets {
        match (self.network, self.paths.connect_ports.is_empty()) {
            (Network::None, _) => seccomp::Sockets::None,
            (Network::Allow, true) => seccomp::Sockets::Any,
            (Network::Allow, false) => seccomp::Sockets::Tcp {
                udp: self.udp == Udp::Allow,
            },
        }
    }

    /// Whether the child may make no UDP socket though it may reach some TCP ports: its
    /// names are then resolved over TCP.
    pub fn resolves_over_tcp(&self) -> bool {
        self.sockets() == seccomp::Sockets::Tcp { udp: false }
    }

    /// What of this confinement a kernel speaking Landlock ABI `abi` cannot enforce:
    /// `landlock_filesystem` (before ABI 5, or none), with `connect_ports`,
    /// `landlock_tcp_ports` (before ABI 4), and `landlock_scopes` (signals and abstract Unix
    /// sockets, before ABI 6).
    pub fn unenforced(&self, abi: Option<u8>) -> Vec<&'static str> {
        let abi = abi.unwrap_or(0);
        let mut missing = Vec::new();
        if abi < 5 {
            missing.push("landlock_filesystem");
        }
        if !self.paths.connect_ports.is_empty() && abi < 4 {
            missing.push("landlock_tcp_ports");
        }
        if abi < 6 {
            missing.push("landlock_scopes");
        }
        missing
    }
}

/// What the launcher is told of a child: its confinement (none: the sandbox is off), the
/// capabilities it keeps, how long the server has to end once told to, and the view of its
/// command's package cache it makes before the server runs (a session's child's).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Launch {
    pub sandbox: Option<SandboxSpec>,
    pub capabilities: Vec<String>,
    pub grace: Duration,
    pub cache_view: Option<CacheView>,
}

impl Launch {
    /// The command that runs `program` (a path) with `args` through the launcher. What it is
    /// to do is given with `tell`, once the child's environment is settled.
    pub fn command(program: &Path, args: &[String]) -> Command {
        let mut command = Command::new(launcher_path());
        command.arg(LAUNCHER).arg("--").arg(program).args(args);
        command
    }

    /// Tells the launcher of `command` what to do (in its environment, which it takes out
    /// before the server runs).
    pub fn tell(&self, command: &mut Command) -> std::io::Result<()> {
        let spec = serde_json::to_string(self).map_err(std::io::Error::other)?;
        command.env(SPEC_VAR, spec);
        Ok(())
    }
}

/// The proxy's binary, which runs the launcher: this executable, unless another was set.
static LAUNCHER_PATH: OnceLock<PathBuf> = OnceLock::new();

/// Runs the launcher from `path` (the proxy's binary) instead of this executable: for a
/// process that embeds the proxy without being its binary. The first call counts.
pub fn use_launcher(path: impl Into<PathBuf>) {
    let _ = LAUNCHER_PATH.set(path.into());
}

fn launcher_path() -> PathBuf {
    LAUNCHER_PATH
        .get_or_init(|| std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe")))
        .clone()
}

/// Runs the launcher's subcommand `args` names (`args[1]`), if it names one: the exit status
/// to end with.
pub fn run_subcommand(args: &[OsString]) -> Option<std::process::ExitCode> {
    let subcommand = args.get(1)?;
    let rest = || match args.get(2).is_some_and(|a| a == "--") {
        true => Some(args[3..].to_vec()),
        false => None,
    };
    let error = if subcommand == LAUNCHER {
        launcher::supervise(rest()?)
    } else if subcommand == CONFINE {
        confine::exec_confined(rest()?)
    } else if subcommand == REAP {
        return Some(descendants::end_every_process_of_this_user());
    } else {
        return None;
    };
    eprintln!(
        "mcp-session-proxy {}: {error}",
        subcommand.to_string_lossy()
    );
    Some(std::process::ExitCode::from(126))
}

/// Ends every process running as `uid` (what a child of a range left behind), waiting at most
/// `timeout`: run before the id is given to another child. Whether that was done.
pub async fn end_every_process_of(uid: u32, gid: u32, timeout: Duration) -> bool {
    let mut command = Command::new(launcher_path());
    command
        .arg(REAP)
        .uid(uid)
        .gid(gid)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    let ended = match command.spawn() {
        Ok(mut reaper) => match tokio::time::timeout(timeout, reaper.wait()).await {
            Ok(Ok(status)) if status.success() => return true,
            Ok(Ok(status)) => status.to_string(),
            Ok(Err(error)) => error.to_string(),
            Err(_) => "it took too long".to_owned(),
        },
        Err(error) => error.to_string(),
    };
    tracing::error!(uid, %ended, "cannot end the processes of a child's user: the id is given to no other child");
    false
}

/// Why a child could not be confined.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("the launcher was started without its confinement ({SPEC_VAR})")]
    NoSpec,
    #[error("the confinement given to the launcher cannot be read: {0}")]
    BadSpec(String),
    #[error("the launcher was given no command to run")]
    NoCommand,
    #[error("cannot set the limit of {limit}: {error}")]
    Limit {
        limit: &'static str,
        error: nix::Error,
    },
    #[error("cannot restrict the filesystem (Landlock): {0}")]
    Landlock(String),
    #[error("cannot set no_new_privs: {0}")]
    NoNewPrivs(nix::Error),
    #[error("cannot build the seccomp filter: {0}")]
    Seccomp(String),
    #[error("cannot install the seccomp filter: {0}")]
    SeccompInstall(String),
    #[error("cannot drop the capabilities: {0}")]
    Capabilities(String),
    #[error("{0:?} is not a capability (CAP_NET_BIND_SERVICE, net_bind_service)")]
    NotACapability(String),
    #[error("cannot start the server: {0}")]
    Spawn(std::io::Error),
    #[error("cannot start a session of its own: {0}")]
    Session(nix::Error),
    #[error("cannot become the server's reaper: {0}")]
    Reaper(nix::Error),
    #[error("cannot wait for the server: {0}")]
    Wait(nix::Error),
    #[error("cannot run {program:?}: {error}")]
    Exec {
        program: OsString,
        error: nix::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_older_kernel_cannot_enforce_is_named() {
        let mut spec = SandboxSpec::default();
        assert_eq!(
            spec.unenforced(Some(landlock_abi_written_for())),
            Vec::<&str>::new()
        );
        assert_eq!(spec.unenforced(Some(5)), ["landlock_scopes"]);
        assert_eq!(
            spec.unenforced(Some(4)),
            ["landlock_filesystem", "landlock_scopes"]
        );
        spec.paths.connect_ports = vec![443];
        assert_eq!(
            spec.unenforced(Some(4)),
            ["landlock_filesystem", "landlock_scopes"]
        );
        assert_eq!(
            spec.unenforced(None),
            [
                "landlock_filesystem",
                "landlock_tcp_ports",
                "landlock_scopes"
            ]
        );
    }

    #[test]
    fn this_kernel_speaks_landlock_or_says_it_does_not() {
        // Whatever the host, detecting restricts nothing: this process can still read a file
        // no rule would allow.
        let _ = landlock_abi();
        assert!(std::fs::read_to_string("Cargo.toml").is_ok());
    }
}
