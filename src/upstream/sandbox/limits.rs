//! Resource limits: a child over one ends or fails as the kernel makes it (SIGXCPU past its
//! CPU time, SIGXFSZ past its file size, an allocation failing past its address space).

use nix::sys::resource::{setrlimit, Resource};
use serde::{Deserialize, Serialize};

use super::SandboxError;

/// The limits set on a child (hard and soft alike: it cannot raise them, but for CPU time, whose
/// hard limit is a second past the soft one); `None`: the proxy's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Address space, in bytes.
    pub memory: Option<u64>,
    /// CPU time, in seconds.
    pub cpu_seconds: Option<u64>,
    /// Open files at once.
    pub open_files: Option<u64>,
    /// Largest file it may write, in bytes.
    pub file_size: Option<u64>,
    /// Processes of its user (counted per user: only a child running as a user of its own is
    /// bound by it alone; root is not bound), the server's own: its launcher, of the same
    /// user, is not counted.
    pub processes: Option<u64>,
}

/// In words, as an operator reads them: `memory 256 MiB, cpu 60 s, processes 64`, or `none`.
impl std::fmt::Display for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |bytes: u64| match bytes % (1 << 20) {
            0 => format!("{} MiB", bytes >> 20),
            _ => format!("{bytes} bytes"),
        };
        let set: Vec<String> = [
            self.memory.map(|bytes| format!("memory {}", mib(bytes))),
            self.cpu_seconds.map(|seconds| format!("cpu {seconds} s")),
            self.open_files.map(|files| format!("open files {files}")),
            self.file_size
                .map(|bytes| format!("file size {}", mib(bytes))),
            self.processes
                .map(|processes| format!("processes {processes}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        match set.is_empty() {
            true => f.write_str("none"),
            false => f.write_str(&set.join(", ")),
        }
    }
}

impl Limits {
    /// Sets each limit on this process.
    pub(super) fn apply(&self) -> Result<(), SandboxError> {
        for (limit, resource, value) in [
            ("memory", Resource::RLIMIT_AS, self.memory),
            ("cpu_seconds", Resource::RLIMIT_CPU, self.cpu_seconds),
            ("open_files", Resource::RLIMIT_NOFILE, self.open_files),
            ("file_size", Resource::RLIMIT_FSIZE, self.file_size),
            (
                "processes",
                Resource::RLIMIT_NPROC,
                self.processes.map(|n| n.saturating_add(1)),
            ),
        ] {
            if let Some(value) = value {
                // CPU time: SIGXCPU at the limit (which ends a child that does not handle it,
                // and says why), SIGKILL a second later (when soft and hard are one, the
                // kernel sends SIGKILL at once, which says nothing).
                let hard = match resource {
                    Resource::RLIMIT_CPU => value.saturating_add(1),
                    _ => value,
                };
                setrlimit(resource, value, hard)
                    .map_err(|error| SandboxError::Limit { limit, error })?;
            }
        }
        Ok(())
    }
}
