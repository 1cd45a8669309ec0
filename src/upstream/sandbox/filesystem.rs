//! Landlock: what a confined child may read and execute (the system's directories, its
//! command's own, what configuration adds), and write (configured paths and its private
//! directory); where the kernel has it (ABI 4), the TCP ports it may connect to; and (ABI 6)
//! no signal to a process outside its sandbox (the proxy, other sessions' children), nor, with
//! no network or only some ports, a connection to an abstract Unix socket made outside it.
//! Paths that do not exist are left out. Everything else, the proxy's configuration and secrets
//! and other sessions' directories included, is out of its reach, whatever its user may do.

use std::path::PathBuf;

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

use super::{Network, SandboxError};

/// The newest ABI the rules are written for; an older kernel enforces what it knows (or,
/// with `require`, the launcher refuses to run the server).
const ABI_WRITTEN_FOR: ABI = ABI::V6;

/// What every server needs to run: its loader and libraries, the system's programs, and the
/// few files of `/etc` a C library, Python or Node read (not the rest of `/etc`: the proxy's
/// configuration may be there).
pub const SYSTEM_READABLE: &[&str] = &[
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/os-release",
    "/etc/alternatives",
    "/etc/mime.types",
    "/proc/self",
    "/dev/urandom",
    "/dev/random",
];

/// Devices every process writes to (not `/dev/tty`: a server has no terminal of its own, and
/// the proxy's is not its to use).
pub const SYSTEM_WRITABLE: &[&str] = &["/dev/null", "/dev/zero"];

/// The Landlock ABI this kernel speaks, as far as the rules go (`None`: no Landlock at all):
/// found by creating rulesets (which restricts nothing), newest first.
pub fn landlock_abi() -> Option<u8> {
    [ABI::V6, ABI::V5, ABI::V4, ABI::V3, ABI::V2, ABI::V1]
        .into_iter()
        .find(|&abi| {
            Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_all(abi))
                .and_then(|ruleset| ruleset.scope(Scope::from_all(abi)))
                .and_then(|ruleset| ruleset.create())
                .is_ok()
        })
        .map(|abi| abi as u8)
}

/// The ABI the rules are written for, as a number.
pub fn landlock_abi_written_for() -> u8 {
    ABI_WRITTEN_FOR as u8
}

/// The filesystem (and TCP) rules of a child.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Paths {
    /// Read and executed beneath.
    pub read: Vec<PathBuf>,
    /// Read, written and executed beneath.
    pub write: Vec<PathBuf>,
    /// TCP ports it may connect to (none: every port, as far as Landlock goes).
    pub connect_ports: Vec<u16>,
    /// Refuse to run the server where the kernel cannot enforce every rule.
    pub require: bool,
}

impl Paths {
    /// Restricts this process (and what it executes) to the rules; abstract Unix sockets made
    /// outside are out of reach unless the network is allowed on every port.
    pub(super) fn restrict(&self, network: Network) -> Result<(), SandboxError> {
        let failed = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
        let level = match self.require {
            true => CompatLevel::HardRequirement,
            false => CompatLevel::BestEffort,
        };
        let abi = ABI_WRITTEN_FOR;
        let mut scopes: BitFlags<Scope> = Scope::Signal.into();
        if network == Network::None || !self.connect_ports.is_empty() {
            scopes |= Scope::AbstractUnixSocket;
        }
        let mut ruleset = Ruleset::default()
            .set_compatibility(level)
            .handle_access(AccessFs::from_all(abi))
            .map_err(failed)?
            .scope(scopes)
            .map_err(failed)?;
        if !self.connect_ports.is_empty() {
            ruleset = ruleset
                .handle_access(AccessNet::ConnectTcp | AccessNet::BindTcp)
                .map_err(failed)?;
        }
        let mut created = ruleset.create().map_err(failed)?;
        created = created
            .add_rules(path_beneath_rules(&self.read, AccessFs::from_read(abi)))
            .map_err(failed)?
            .add_rules(path_beneath_rules(&self.write, AccessFs::from_all(abi)))
            .map_err(failed)?;
        for &port in &self.connect_ports {
            created = created
                .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
                .map_err(failed)?;
        }
        let status = created.restrict_self().map_err(failed)?;
        if self.require && status.ruleset != RulesetStatus::FullyEnforced {
            let enforced = match status.ruleset {
                RulesetStatus::PartiallyEnforced => "in part",
                _ => "not at all",
            };
            return Err(SandboxError::Landlock(format!(
                "the kernel enforces the rules {enforced}"
            )));
        }
        Ok(())
    }
}
