//! The package caches of a confined server's command (`npx`'s, `uv`'s and `uvx`'s, pip's, and
//! whatever honours `XDG_CACHE_HOME`): one directory per command line, kept across sessions and
//! restarts, so a server that `npx` or `uvx` fetched once starts from the cache, also with no
//! network. It is written only while it is warmed, by a child of the proxy's own that no
//! session reaches (`crate::upstream::stdio::warm_up`); to the children of sessions it is
//! sealed: each works on a view of its own (`super::cache_view`), thrown away with it, so no
//! session can leave in the cache what another's child runs. Another command's cache is out of
//! a child's reach like any other path.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

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

    /// Gives the cache's folder (only: what is in it is the user's already) to `owner`, the
    /// configured user every child runs as, which keeps it. Blocking.
    pub fn give_to(&self, owner: (u32, u32)) -> std::io::Result<()> {
        std::os::unix::fs::lchown(&self.path, Some(owner.0), Some(owner.1))
    }

    /// Lends the cache to the user `owner` of the range that warms it, with no process running
    /// as that user (so nothing changes the cache while it is walked): its folders, and the
    /// files only it names (a file linked from elsewhere keeps its owner), become that user's.
    /// Blocking.
    pub fn lend(&self, owner: (u32, u32)) -> std::io::Result<()> {
        let proxy = nix::unistd::Uid::effective().as_raw();
        hand_over(&self.path, proxy, owner, |metadata| {
            metadata.is_dir() || metadata.nlink() == 1
        })
    }

    /// Takes the cache back from the user `owner` of the range that warmed it (every process of
    /// it ended):
    /// what that user made becomes the proxy's, readable by every user, writable by none but
    /// the proxy, with no set-id bit. Blocking.
    pub fn seal(&self, owner: (u32, u32)) -> std::io::Result<()> {
        let proxy = (
            nix::unistd::Uid::effective().as_raw(),
            nix::unistd::Gid::effective().as_raw(),
        );
        hand_over(&self.path, owner.0, proxy, |_| true)?;
        open_to_read(&self.path, proxy.0)
    }
}

/// Gives every entry beneath `root` (itself included) owned by `from` and passing `take` to
/// `to`, links left as links (never followed).
fn hand_over(
    root: &Path,
    from: u32,
    to: (u32, u32),
    take: impl Fn(&std::fs::Metadata) -> bool,
) -> std::io::Result<()> {
    walk(root, &mut |path, metadata| {
        if metadata.uid() == from && take(metadata) {
            std::os::unix::fs::lchown(path, Some(to.0), Some(to.1))?;
        }
        Ok(())
    })
}

/// Makes what `owner` has beneath `root` readable (and its folders and programs executable) by
/// every user and writable by none but `owner`, without set-id or sticky bits.
fn open_to_read(root: &Path, owner: u32) -> std::io::Result<()> {
    walk(root, &mut |path, metadata| {
        if metadata.uid() != owner || metadata.is_symlink() {
            return Ok(());
        }
        let mode = metadata.mode() & 0o755;
        let readable = match metadata.is_dir() || mode & 0o100 != 0 {
            true => mode | 0o555,
            false => mode | 0o444,
        };
        if readable != metadata.mode() & 0o7777 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(readable))?;
        }
        Ok(())
    })
}

/// Calls `visit` on `root` and everything beneath it, folders before their entries, never
/// following a link.
fn walk(
    root: &Path,
    visit: &mut impl FnMut(&Path, &std::fs::Metadata) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut folders = vec![root.to_path_buf()];
    visit(root, &std::fs::symlink_metadata(root)?)?;
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let path = entry?.path();
            let metadata = std::fs::symlink_metadata(&path)?;
            visit(&path, &metadata)?;
            if metadata.is_dir() {
                folders.push(path);
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
        cache.seal(warmer).unwrap();
        assert_eq!(owner(&made), 0);
        let mode = std::fs::metadata(&made).unwrap().mode() & 0o7777;
        assert_eq!(
            mode, 0o755,
            "readable, no set-id bit, written by the proxy only"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
