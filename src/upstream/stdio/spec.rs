//! What a stdio server is, from configuration: its command line, found on `PATH`, and the
//! command every child of it is started with: through the launcher, with its environment, its
//! user, its capabilities (none, unless configured) and its confinement.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::upstream::child_env::ChildEnv;
use crate::upstream::child_user::{ChildUser, RunAs, UserLease};
use crate::upstream::sandbox::{CacheDir, CacheView, Launch, PrivateDir, SandboxSpec};

/// How to start and stop a stdio server. Comes from configuration only.
#[derive(Debug, Clone)]
pub struct StdioSpec {
    pub program: String,
    pub args: Vec<String>,
    /// Longest line accepted from the server's stdout.
    pub max_line_bytes: usize,
    /// Longest a write to its stdin may take: a child that stops reading is stopped.
    pub request_timeout: Duration,
    /// Wait after closing stdin, and again after SIGTERM.
    pub shutdown_grace: Duration,
    /// Children kept started ahead of sessions (per-session isolation).
    pub warm: usize,
    /// The revision the server speaks.
    pub protocol: crate::wire::era::Era,
    /// What the child's environment holds.
    pub env: ChildEnv,
    /// Who the child runs as (else as the proxy's user).
    pub user: Option<RunAs>,
    /// How the child is confined (else it is not).
    pub sandbox: Option<SandboxSpec>,
    /// The capabilities a child keeps (of the proxy's, when it runs as the proxy's user).
    pub capabilities: Vec<String>,
    /// Counts the lines of its children's stderr dropped past the log's budget.
    pub stderr_dropped: prometheus_client::metrics::counter::Counter,
}

impl StdioSpec {
    /// The child's command: the launcher, which starts the server and stays its parent and
    /// reaper; stdin and stdout piped, its own process group, killed when dropped, run as the
    /// configured user (or one of its own from the range), with no capability but the
    /// configured ones, confined by the sandbox when there is one; and what it holds while it
    /// runs (its private directory, its user id: keep them for as long as the child runs).
    /// Every child of a stdio server is started from it: a session's, the shared one, the warm
    /// ones, the `auto` probe's.
    pub fn command(&self) -> std::io::Result<(Command, ChildHolds)> {
        self.command_as(Role::Session)
    }

    /// [`command`](Self::command) for a child of `role`: a session's child works on a view of
    /// its command's package cache, the child that warms the cache on the cache itself.
    pub fn command_as(&self, role: Role) -> std::io::Result<(Command, ChildHolds)> {
        let (user, lease) = match &self.user {
            Some(run_as) => {
                let (user, lease) = run_as.take().map_err(std::io::Error::other)?;
                (Some(user), lease)
            }
            None => (None, None),
        };
        let owner = user.map(|u| (u.uid, u.gid));
        let mut holds = ChildHolds {
            private_dir: None,
            owner,
            user: lease.map(|lease| (user.expect("a lease is of a user"), lease)),
        };
        // Found here, so that a command that cannot be run fails to start, as it would
        // without the launcher.
        let program = self.locate().map_err(std::io::Error::other)?;
        let mut command = Launch::command(&program, &self.args);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        self.env.apply(&mut command);
        if let Some(user) = &user {
            user.apply(&mut command);
        }
        let mut launch = Launch {
            sandbox: None,
            capabilities: self.capabilities.clone(),
            grace: self.shutdown_grace,
            cache_view: None,
        };
        if let Some(sandbox) = &self.sandbox {
            let dir = PrivateDir::create(owner)?;
            let cache = CacheDir::of(&sandbox.cache, &self.display())?;
            // Its own directories are in the spec already, found once at start.
            let mut spec = sandbox.clone();
            spec.paths.write.push(dir.path().to_path_buf());
            let cache_at = match role {
                Role::CacheWarmer => {
                    spec.paths.write.push(cache.path().to_path_buf());
                    cache.path().to_path_buf()
                }
                Role::Session => {
                    spec.paths.read.push(cache.path().to_path_buf());
                    let view = dir.path().join("cache");
                    launch.cache_view = Some(CacheView {
                        sealed: cache.path().to_path_buf(),
                        view: view.clone(),
                    });
                    view
                }
            };
            command.env("HOME", dir.path()).env("TMPDIR", dir.path());
            CacheDir::apply(&cache_at, dir.path(), &mut command, spec.network, |name| {
                self.env.sets(name)
            });
            if spec.resolves_over_tcp() && !self.env.sets("RES_OPTIONS") {
                // No UDP: the C library's resolver asks over TCP.
                command.env("RES_OPTIONS", "use-vc");
            }
            holds.private_dir = Some(dir);
            launch.sandbox = Some(spec);
        }
        launch.tell(&mut command)?;
        Ok((command, holds))
    }

    /// Splits a command line the way a POSIX shell would, without running a shell.
    pub fn parse(command_line: &str) -> Result<StdioSpec, CommandError> {
        let words = shell_words::split(command_line).map_err(|error| CommandError::Split {
            line: command_line.to_owned(),
            error,
        })?;
        let (program, args) = words.split_first().ok_or(CommandError::Empty)?;
        Ok(StdioSpec {
            program: program.clone(),
            args: args.to_vec(),
            max_line_bytes: 4 << 20,
            request_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(2),
            warm: 0,
            protocol: Default::default(),
            env: ChildEnv::default(),
            user: None,
            sandbox: None,
            capabilities: Vec::new(),
            stderr_dropped: Default::default(),
        })
    }

    pub fn display(&self) -> String {
        shell_words::join(std::iter::once(&self.program).chain(&self.args))
    }

    /// The program's file, as `spawn` will find it: a path as given, else the first match on
    /// `PATH`; an error when there is none or it cannot be executed (checked at start-up, so a
    /// typo stops the proxy instead of failing every session).
    pub fn locate(&self) -> Result<PathBuf, CommandError> {
        let candidates: Vec<PathBuf> = match self.program.contains('/') {
            true => vec![PathBuf::from(&self.program)],
            false => std::env::var_os("PATH")
                .map(|path| {
                    std::env::split_paths(&path)
                        .map(|dir| dir.join(&self.program))
                        .collect()
                })
                .unwrap_or_default(),
        };
        let mut not_executable = None;
        for candidate in candidates {
            let Ok(metadata) = std::fs::metadata(&candidate) else {
                continue;
            };
            if metadata.is_file() && metadata.permissions().mode() & 0o111 != 0 {
                return Ok(candidate);
            }
            not_executable.get_or_insert(candidate);
        }
        Err(match not_executable {
            Some(path) => CommandError::NotExecutable(path),
            None => CommandError::NotFound(self.program.clone()),
        })
    }
}

/// The directories a confined child reads its own files from: its program's, and those of the
/// files its arguments name (a script an interpreter runs); around each, the `node_modules` it
/// is in (a Node server's packages), and the virtual environment it is in with the Python
/// installation that environment was made from; a Python interpreter's own installation.
pub fn own_directories(program: &std::path::Path, args: &[String]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(resolved) = std::fs::canonicalize(program) {
        dirs.extend(python_installation(&resolved));
    }
    let files = std::iter::once(program.to_path_buf())
        .chain(args.iter().map(PathBuf::from))
        .filter(|path| path.is_file());
    for file in files {
        let as_named = std::path::absolute(&file).ok();
        let resolved = std::fs::canonicalize(&file).ok();
        for path in [as_named, resolved].into_iter().flatten() {
            dirs.extend(path.parent().map(PathBuf::from));
            for above in path.ancestors().skip(1) {
                if above.file_name().is_some_and(|name| name == "node_modules") {
                    dirs.push(above.to_path_buf());
                }
                if let Ok(config) = std::fs::read_to_string(above.join("pyvenv.cfg")) {
                    dirs.push(above.to_path_buf());
                    dirs.extend(python_home(&config));
                }
            }
        }
    }
    dirs.sort();
    dirs.dedup();
    dirs
}

/// The installation a virtual environment was made from (its `pyvenv.cfg`'s `home`, the
/// directory of its interpreter: the prefix above it).
fn python_home(config: &str) -> Option<PathBuf> {
    let home = config.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "home").then(|| PathBuf::from(value.trim()))
    })?;
    let home = std::fs::canonicalize(&home).unwrap_or(home);
    home.parent().map(PathBuf::from)
}

/// Where a Python interpreter's standard library and shared library are, when `program` is one
/// installed outside the system's directories (`<prefix>/bin/python3` beside a standard library
/// in `<prefix>/lib/python3.*`: pyenv's, one in `/opt`): `<prefix>/lib`, and not the prefix
/// itself, which may be a home directory.
fn python_installation(program: &std::path::Path) -> Option<PathBuf> {
    let name = program.file_name()?.to_str()?;
    let lib = program.parent()?.parent()?.join("lib");
    let standard_library = |entry: std::fs::DirEntry| {
        entry.file_name().to_string_lossy().starts_with("python")
            && entry.path().join("os.py").is_file()
    };
    let installed = std::fs::read_dir(&lib)
        .ok()?
        .flatten()
        .any(standard_library);
    (name.starts_with("python") && installed).then_some(lib)
}

/// What a child holds for as long as it runs: its private directory (removed when dropped), its
/// user id from the range (given back by `release`, once nothing of the child runs).
#[derive(Debug, Default)]
pub struct ChildHolds {
    pub private_dir: Option<PrivateDir>,
    /// The user and group ids the child runs as, when not the proxy's.
    owner: Option<(u32, u32)>,
    user: Option<(ChildUser, UserLease)>,
}

/// Whom a child is started for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A session (or the shared child, a warm one, the `auto` probe): its command's package
    /// cache is sealed to it, it works on a view of its own.
    Session,
    /// The proxy, to warm its command's package cache: the only child that writes it.
    CacheWarmer,
}

impl ChildHolds {
    /// The user and group ids the child runs as, when not the proxy's.
    pub fn owner(&self) -> Option<(u32, u32)> {
        self.owner
    }

    /// The user and group ids the child runs as when they are its alone (taken from the range
    /// for it).
    pub fn range_user(&self) -> Option<(u32, u32)> {
        self.user.as_ref().map(|(user, _)| (user.uid, user.gid))
    }

    /// Lets go of what the child held, once it ended: a user id from the range is given back
    /// only after every process running as it has ended (what the child may have left behind
    /// its launcher), so none is there when the id is given to another child.
    /// Whether nothing of the child runs any more (as far as its user from a range tells).
    pub async fn release(self, timeout: Duration) -> bool {
        let mut ended = true;
        if let Some((user, lease)) = self.user {
            ended =
                crate::upstream::sandbox::end_every_process_of(user.uid, user.gid, timeout).await;
            match ended {
                true => drop(lease),
                // What the child left may still run as it: the id stays taken.
                false => std::mem::forget(lease),
            }
        }
        // A view of a package cache is thousands of entries: removed off the runtime's threads.
        if let Some(dir) = self.private_dir {
            let _ = tokio::task::spawn_blocking(move || dir.remove()).await;
        }
        ended
    }
}

/// Why a configured stdio command cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("cannot split the command line `{line}`: {error}")]
    Split {
        line: String,
        error: shell_words::ParseError,
    },
    #[error("the stdio command line is empty")]
    Empty,
    #[error("the command `{0}` was not found (neither a path to a file nor a program on PATH)")]
    NotFound(String),
    #[error("{} is not an executable file", .0.display())]
    NotExecutable(PathBuf),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_interpreter_reads_its_own_libraries_and_another_program_does_not() {
        let prefix = std::env::temp_dir().join(format!("mcp-python-prefix-{}", std::process::id()));
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        std::fs::create_dir_all(prefix.join("lib/python3.11")).unwrap();
        std::fs::write(prefix.join("lib/python3.11/os.py"), "").unwrap();
        for name in ["python3", "node"] {
            std::fs::write(prefix.join("bin").join(name), "").unwrap();
        }
        let prefix = std::fs::canonicalize(&prefix).unwrap();
        let python = own_directories(&prefix.join("bin/python3"), &[]);
        assert!(python.contains(&prefix.join("lib")), "{python:?}");
        assert!(
            !python.contains(&prefix),
            "not the whole prefix: {python:?}"
        );
        let node = own_directories(&prefix.join("bin/node"), &[]);
        assert!(!node.contains(&prefix.join("lib")), "{node:?}");
        std::fs::remove_dir_all(&prefix).unwrap();
    }
}
