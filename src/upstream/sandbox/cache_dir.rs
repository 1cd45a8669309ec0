//! The package caches of a confined server's command (`npx`'s, `uv`'s and `uvx`'s, pip's, and
//! whatever honours `XDG_CACHE_HOME`): one directory per command line, kept across sessions and
//! restarts, so a server that `npx` or `uvx` fetched once starts from the cache, also with no
//! network. It is written only while it is warmed, by a child of the proxy's own that no
//! session reaches (`crate::upstream::stdio::warm_up`); to the children of sessions it is
//! sealed: each works on a view of its own (`super::cache_view`), thrown away with it, so no
//! session can leave in the cache what another's child runs. Another command's cache is out of
//! a child's reach like any other path.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, FileStat, Mode, SFlag};

use sha2::{Digest, Sha256};
use tokio::process::Command;

use super::Network;

/// Each package manager's variable, and its folder in the cache.
const VARIABLES: &[(&str, &str)] = &[
    ("npm_config_cache", "npm"),
    ("UV_CACHE_DIR", "uv"),
    ("UV_TOOL_DIR", "uv-tools"),
    ("UV_PYTHON_INSTALL_DIR", "uv-python"),
    ("PIP_CACHE_DIR", "pip"),
    ("XDG_CACHE_HOME", "xdg"),
];

/// With no network: what fetched once is taken from the cache without asking the registry.
const OFFLINE: &[(&str, &str)] = &[("npm_config_prefer_offline", "true"), ("UV_OFFLINE", "1")];

/// Settings every child's package managers get: npm's log and update check out of the cache.
const QUIET: &[(&str, &str)] = &[("npm_config_update_notifier", "false")];

/// The cache directory of one command line.
#[derive(Debug, Clone)]
pub struct CacheDir {
    path: PathBuf,
}

impl CacheDir {
    /// The cache of `command` under `root` (made, mode 0711, if missing; refused if it is not a
    /// directory of the proxy's own): the proxy's user's alone (mode 0700) until it is sealed
    /// for children running as other users.
    pub fn of(root: &Path, command: &str) -> std::io::Result<CacheDir> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(root)?;
        super::private_dir::own_directory(root)?;
        let metadata = std::fs::symlink_metadata(root)?;
        if metadata.permissions().mode() & 0o777 != 0o711 {
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))?;
        }
        let digest = Sha256::digest(command.as_bytes());
        let name: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let path = root.join(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => return Err(error),
            _ => {}
        }
        if !std::fs::symlink_metadata(&path)?.is_dir() {
            return Err(std::io::Error::other(format!(
                "{} is not a directory",
                path.display()
            )));
        }
        Ok(CacheDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Points `command`'s package managers at the cache's folders under `at` (the cache itself,
    /// to warm it; a child's view of it, else), but for a variable `configured`; sends npm's
    /// logs to `logs`; and with no network makes them take what they fetched before without
    /// asking.
    pub fn apply(
        at: &Path,
        logs: &Path,
        command: &mut Command,
        network: Network,
        configured: impl Fn(&str) -> bool,
    ) {
        let folders = VARIABLES
            .iter()
            .map(|(name, folder)| (*name, at.join(folder).into_os_string()));
        let offline = OFFLINE
            .iter()
            .filter(|_| network == Network::None)
            .map(|(name, value)| (*name, value.into()));
        let quiet = QUIET.iter().map(|(name, value)| (*name, value.into()));
        let logs = std::iter::once(("npm_config_logs_dir", logs.join("npm-logs").into()));
        for (name, value) in folders.chain(offline).chain(quiet).chain(logs) {
            if !configured(name) {
                command.env(name, value);
            }
        }
    }

    /// Lends the cache to the user `owner` that warms it: its folders, and the files only it
    /// names (a file linked from elsewhere keeps its owner), become that user's. Blocking.
    pub fn lend(&self, owner: (u32, u32)) -> nix::Result<()> {
        let proxy = nix::unistd::Uid::effective().as_raw();
        walk(&self.path, &mut |entry, stat| {
            let folder = kind(stat) == SFlag::S_IFDIR;
            if stat.st_uid == proxy && (folder || stat.st_nlink == 1) {
                chown(entry, owner)?;
            }
            Ok(())
        })
    }

    /// Seals the cache once it is warmed (every process of the warming child ended): what the
    /// user `owner` that warmed it made becomes the proxy's (when it ran as another user); and
    /// what is the proxy's is written by no one else, without set-id bits, readable by every
    /// user where children run as others (the cache's own folder stays the proxy's user's
    /// alone otherwise). What a child changed of the modes is so set right again. Blocking.
    pub fn seal(&self, owner: Option<(u32, u32)>) -> nix::Result<()> {
        let proxy = (
            nix::unistd::Uid::effective().as_raw(),
            nix::unistd::Gid::effective().as_raw(),
        );
        let top = match owner {
            Some(_) => 0o755,
            None => 0o700,
        };
        let mut first = true;
        walk(&self.path, &mut |entry, stat| {
            let mut uid = stat.st_uid;
            if owner.is_some_and(|(warmer, _)| warmer == uid) {
                chown(entry, proxy)?;
                uid = proxy.0;
            }
            let shape = kind(stat);
            let single = shape == SFlag::S_IFDIR || (shape == SFlag::S_IFREG && stat.st_nlink == 1);
            if uid == proxy.0 && single {
                let mode = match std::mem::take(&mut first) {
                    true => top,
                    false => readable(stat.st_mode, shape),
                };
                chmod(entry, mode)?;
            }
            Ok(())
        })
    }
}

/// `mode` readable (and a folder or a program executable) by every user, written by its owner
/// only, without set-id or sticky bits.
fn readable(mode: u32, shape: SFlag) -> u32 {
    let mode = mode & 0o755;
    match shape == SFlag::S_IFDIR || mode & 0o100 != 0 {
        true => mode | 0o755,
        false => mode | 0o644,
    }
}

fn kind(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT
}

/// Gives the entry (held by an `O_PATH` descriptor: the very file that was looked at) to `to`.
fn chown(entry: &OwnedFd, to: (u32, u32)) -> nix::Result<()> {
    nix::unistd::fchownat(
        entry,
        "",
        Some(to.0.into()),
        Some(to.1.into()),
        AtFlags::AT_EMPTY_PATH,
    )
}

/// Sets the mode of the entry held by an `O_PATH` descriptor (through `/proc/self/fd`, which
/// names that file, not a path to it).
fn chmod(entry: &OwnedFd, mode: u32) -> nix::Result<()> {
    let by_descriptor = format!("/proc/self/fd/{}", entry.as_raw_fd());
    nix::sys::stat::fchmodat(
        nix::fcntl::AT_FDCWD,
        by_descriptor.as_str(),
        Mode::from_bits_truncate(mode),
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    )
}

/// Calls `visit` on `root` and on everything beneath it, folders before what is in them: each
/// entry held by an `O_PATH` descriptor, opened relative to its open folder, never through a
/// link, with what it is (so a process changing the tree meanwhile makes the walk act on
/// nothing outside it, nor on a file it did not look at).
fn walk(
    root: &Path,
    visit: &mut impl FnMut(&OwnedFd, &FileStat) -> nix::Result<()>,
) -> nix::Result<()> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let top = openat(nix::fcntl::AT_FDCWD, root, flags, Mode::empty())?;
    let pinned = openat(&top, ".", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())?;
    visit(&pinned, &fstat(&pinned)?)?;
    let mut folders = vec![top];
    while let Some(folder) = folders.pop() {
        let mut listing = Dir::from_fd(nix::unistd::dup(&folder)?)?;
        for entry in listing.iter() {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let path_flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let pinned = openat(&folder, name, path_flags, Mode::empty())?;
            let stat = fstat(&pinned)?;
            visit(&pinned, &stat)?;
            if kind(&stat) == SFlag::S_IFDIR {
                folders.push(openat(&folder, name, flags, Mode::empty())?);
            }
        }
    }
    Ok(())
}

/// Where caches are kept when `sandbox.cache_dir` is not set.
pub fn default_root() -> PathBuf {
    std::env::temp_dir().join("mcp-session-proxy-cache")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn one_cache_per_command() {
        let root = std::env::temp_dir().join(format!("cache-dir-test-{}", std::process::id()));
        let a = CacheDir::of(&root, "npx -y server-a").unwrap();
        let again = CacheDir::of(&root, "npx -y server-a").unwrap();
        let b = CacheDir::of(&root, "npx -y server-b").unwrap();
        assert_eq!(a.path(), again.path(), "kept across children");
        assert_ne!(a.path(), b.path(), "a command's own");
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Lent to the user that warms it and sealed after: what it made is the proxy's, readable,
    /// written by no one else, no set-id bit left; a file linked in from elsewhere is never
    /// given away.
    #[test]
    fn a_cache_lent_and_sealed_is_the_proxys_and_read_only_to_others() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipped: giving files to another user needs root");
            return;
        }
        let root = std::env::temp_dir().join(format!("cache-seal-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let cache = CacheDir::of(&root, "uvx server").unwrap();
        let outside = root.join("outside");
        std::fs::write(&outside, "the proxy's").unwrap();
        std::fs::hard_link(&outside, cache.path().join("linked")).unwrap();
        let warmer = (100_042, 100_042);
        cache.lend(warmer).unwrap();
        let owner = |path: &Path| std::fs::symlink_metadata(path).unwrap().uid();
        assert_eq!(owner(cache.path()), warmer.0);
        assert_eq!(owner(&outside), 0, "a linked file is not lent");
        let made = cache.path().join("uv/tool.py");
        std::fs::create_dir(cache.path().join("uv")).unwrap();
        std::fs::write(&made, "print()").unwrap();
        std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o4766)).unwrap();
        for path in [cache.path().join("uv"), made.clone()] {
            std::os::unix::fs::lchown(&path, Some(warmer.0), Some(warmer.1)).unwrap();
        }
        cache.seal(Some(warmer)).unwrap();
        assert_eq!(owner(&made), 0);
        let mode = std::fs::metadata(&made).unwrap().mode() & 0o7777;
        assert_eq!(
            mode, 0o755,
            "readable, no set-id bit, written by the proxy only"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
