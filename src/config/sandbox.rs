//! `[upstream.sandbox]` (and `[servers.<name>.upstream.sandbox]`): how each stdio child is
//! confined (`crate::upstream::sandbox`).

use serde::{Deserialize, Deserializer};

use super::duration::{number_and_unit, QuantityError};
use super::keys::settings;
use super::parsers::choices;
use std::path::PathBuf;

use crate::upstream::sandbox::{
    default_cache_root, Limits, Network, Paths, SandboxSpec, Udp, SYSTEM_READABLE, SYSTEM_WRITABLE,
};

settings! {
    /// How each stdio server's children are confined.
    pub struct SandboxConfig, flags SandboxFlags {
        /// stdio: confine each child (no_new_privs, Landlock: the paths below, the system's
        /// and a private directory; a seccomp filter of what no MCP server needs; the limits
        /// below) (true/false) [default: false].
        #[arg(long = "sandbox", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub enabled: bool = false, set;

        /// With the sandbox: allow (as the proxy) or none (no socket at all, not even a Unix
        /// one or loopback; pipes and socketpair work) [default: allow].
        #[arg(long = "sandbox-network", value_name = "NETWORK", value_parser = choices::<Network>(&["allow", "none"]))]
        pub network: Network = Network::Allow, set;

        /// With the sandbox and connect_ports: allow or deny UDP sockets (to any port: the
        /// ports bound TCP only); denied, names are resolved over TCP (RES_OPTIONS=use-vc)
        /// [default: deny].
        #[arg(long = "sandbox-udp", value_name = "UDP", value_parser = choices::<Udp>(&["allow", "deny"]))]
        pub udp: Udp = Udp::Deny, set;

        /// With the sandbox: a path a child may read and execute beneath, besides the system's
        /// directories and its command's own (repeatable) [default: none].
        #[arg(long = "sandbox-readable", value_name = "PATH")]
        pub readable: Vec<PathBuf> = Vec::new(), list(Vec<PathBuf>);

        /// With the sandbox: a path a child may write beneath, besides its private directory
        /// (its HOME and TMPDIR) (repeatable) [default: none].
        #[arg(long = "sandbox-writable", value_name = "PATH")]
        pub writable: Vec<PathBuf> = Vec::new(), list(Vec<PathBuf>);

        /// With the sandbox and network = "allow": the only TCP ports a child may connect to
        /// (repeatable; Landlock ABI 4, Linux 6.7) [default: none: every port].
        #[arg(long = "sandbox-connect-port", value_name = "PORT")]
        pub connect_ports: Vec<u16> = Vec::new(), list(Vec<u16>);

        /// With the sandbox: where package caches are kept, one per command line (npx's, uv's,
        /// pip's, XDG_CACHE_HOME): fetched once, a server starts from its cache, also with no
        /// network [default: <temporary directory>/mcp-session-proxy-cache].
        #[arg(long = "sandbox-cache-dir", value_name = "PATH")]
        pub cache_dir: Option<PathBuf> = None, some(Option<PathBuf>);

        /// With the sandbox: warm each command's package cache at start (one child of the
        /// proxy's own, before any session, the only one that writes it; sessions' children
        /// each get a view of it, thrown away with them); false: the cache is only read, as it
        /// was warmed before (true/false) [default: true].
        #[arg(long = "sandbox-warm-cache", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub warm_cache: bool = true, set;

        /// With the sandbox: refuse to run a child where the kernel cannot enforce every
        /// filesystem and port rule (else what it cannot is not enforced) (true/false)
        /// [default: false].
        #[arg(long = "sandbox-require", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub require: bool = false, set;

        /// With the sandbox: a child's address space at most, in bytes or with a unit (256MiB,
        /// 1GiB) [default: none].
        #[serde(deserialize_with = "size")]
        #[arg(long = "sandbox-memory", value_name = "SIZE", value_parser = parse_size)]
        pub memory: Option<u64> = None, some(Option<u64>);

        /// With the sandbox: a child's CPU time at most, in seconds (then SIGXCPU) [default:
        /// none].
        #[arg(long = "sandbox-cpu-seconds", value_name = "SECONDS")]
        pub cpu_seconds: Option<u64> = None, some(Option<u64>);

        /// With the sandbox: the files a child may have open at once [default: none].
        #[arg(long = "sandbox-open-files", value_name = "COUNT")]
        pub open_files: Option<u64> = None, some(Option<u64>);

        /// With the sandbox: the largest file a child may write, in bytes or with a unit (then
        /// SIGXFSZ) [default: none].
        #[serde(deserialize_with = "size")]
        #[arg(long = "sandbox-file-size", value_name = "SIZE", value_parser = parse_size)]
        pub file_size: Option<u64> = None, some(Option<u64>);

        /// With the sandbox: the processes of the child's user at most (counted per user: binds
        /// a child alone with upstream.user_range, all children together with upstream.user;
        /// root is not bound) [default: none].
        #[arg(long = "sandbox-processes", value_name = "COUNT")]
        pub processes: Option<u64> = None, some(Option<u64>);
    }
}

impl SandboxConfig {
    /// The confinement of each child, when the sandbox is on.
    pub fn spec(&self) -> Option<SandboxSpec> {
        self.enabled.then_some(SandboxSpec {
            network: self.network,
            udp: self.udp,
            limits: Limits {
                memory: self.memory,
                cpu_seconds: self.cpu_seconds,
                open_files: self.open_files,
                file_size: self.file_size,
                processes: self.processes,
            },
            paths: Paths {
                read: SYSTEM_READABLE
                    .iter()
                    .map(PathBuf::from)
                    .chain(self.readable.iter().cloned())
                    .collect(),
                write: SYSTEM_WRITABLE
                    .iter()
                    .map(PathBuf::from)
                    .chain(self.writable.iter().cloned())
                    .collect(),
                connect_ports: self.connect_ports.clone(),
                require: self.require,
            },
            cache: self.cache_dir.clone().unwrap_or_else(default_cache_root),
            warm_cache: self.warm_cache,
        })
    }
}

/// A size: bytes, or a number with KiB, MiB or GiB.
pub fn parse_size(text: &str) -> Result<u64, QuantityError> {
    let text = text.trim();
    let (number, unit) =
        number_and_unit(text).ok_or_else(|| QuantityError::NotASize(text.to_owned()))?;
    let scale: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => return Err(QuantityError::SizeUnit(other.to_owned())),
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| QuantityError::TooLarge(text.to_owned()))
}

/// A size in the file: a number of bytes, or a string `parse_size` reads.
fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Bytes(bytes) => Ok(Some(bytes)),
        Size::Text(text) => parse_size(&text)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_bytes_or_binary_units() {
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("12MB").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999999GiB").is_err());
    }
}
