//! Confining a stdio child: resource limits, `no_new_privs`, a seccomp filter of what no MCP
//! server needs, and no network but Unix sockets where configured. The proxy's own binary
//! applies them as a launcher (`sandbox-exec`): a fresh, single-threaded process that confines
//! itself and then executes the server in its place (same process, same pid), so nothing runs
//! between fork and exec but what is safe there, and a server cannot undo any of it.

mod cache_dir;
mod filesystem;
mod launcher;
mod limits;
mod private_dir;
mod seccomp;

use std::ffi::OsString;

use serde::{Deserialize, Serialize};
use tokio::process::Command;

pub use cache_dir::{default_root as default_cache_root, CacheDir};
pub use filesystem::{
    landlock_abi, landlock_abi_written_for, Paths, SYSTEM_READABLE, SYSTEM_WRITABLE,
};
pub use launcher::exec_confined;
pub use limits::Limits;
pub use private_dir::PrivateDir;

/// The subcommand the proxy's binary runs as a launcher by.
pub const LAUNCHER: &str = "sandbox-exec";

/// The variable the launcher reads its confinement from (removed before the server runs).
const SPEC_VAR: &str = "MCP_PROXY_SANDBOX";

/// Whether the child may reach the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// As the proxy may.
    #[default]
    Allow,
    /// Unix sockets only: no socket of any other family (not even loopback) can be made.
    None,
}

impl std::str::FromStr for Network {
    type Err = String;

    fn from_str(text: &str) -> Result<Network, String> {
        match text {
            "allow" => Ok(Network::Allow),
            "none" => Ok(Network::None),
            other => Err(format!("{other:?} is neither allow nor none")),
        }
    }
}

/// How a child is confined.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    pub network: Network,
    pub limits: Limits,
    /// What it may read, write and connect to.
    pub paths: Paths,
    /// Where its command's package cache is kept (`cache_dir`); not the launcher's concern.
    #[serde(skip)]
    pub cache: std::path::PathBuf,
}

impl SandboxSpec {
    /// The command that runs `program` (a path) with `args` confined: the proxy's binary as
    /// the launcher. Its confinement is given with `tell`, once the child's environment is
    /// settled.
    pub fn command(&self, program: &std::path::Path, args: &[String]) -> std::io::Result<Command> {
        let launcher = std::env::current_exe()?;
        let mut command = Command::new(launcher);
        command.arg(LAUNCHER).arg("--").arg(program).args(args);
        Ok(command)
    }

    /// Tells the launcher of `command` its confinement (in its environment, which it takes
    /// out before the server runs).
    pub fn tell(&self, command: &mut Command) -> std::io::Result<()> {
        let spec = serde_json::to_string(self).map_err(std::io::Error::other)?;
        command.env(SPEC_VAR, spec);
        Ok(())
    }

    /// Whether this host can confine children so (seccomp is built for x86_64 and aarch64).
    pub fn check(&self) -> Result<(), SandboxError> {
        seccomp::filters(self.network).map(drop)
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
