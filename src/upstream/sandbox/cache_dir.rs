//! The package caches of a confined server's command (`npx`'s, `uv`'s and `uvx`'s, pip's, and
//! whatever honours `XDG_CACHE_HOME`): one directory per command line (and per user id, for
//! children of a user range), kept across sessions and restarts, so a server that `npx` or `uvx`
//! fetched once starts from the cache, also with no network. Only the children of that command
//! may write it; another command's cache is out of their reach like any other path.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
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

/// The cache directory of one command line.
#[derive(Debug)]
pub struct CacheDir {
    path: PathBuf,
}

impl CacheDir {
    /// The cache of `command` under `root` (made, mode 0711, if missing; refused if it is not a
    /// directory of the proxy's own), owned by `owner` when children run as another user.
    pub fn of(root: &Path, command: &str, owner: Option<(u32, u32)>) -> std::io::Result<CacheDir> {
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
        let mut name: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        if let Some((uid, _)) = owner {
            name.push_str(&format!("-{uid}"));
        }
        let path = root.join(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => return Err(error),
            _ => {}
        }
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid))?;
        }
        Ok(CacheDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Points `command`'s package managers at the cache (but for a variable `configured`), and
    /// with no network makes them take what they fetched before without asking.
    pub fn apply(
        &self,
        command: &mut Command,
        network: Network,
        configured: impl Fn(&str) -> bool,
    ) {
        let folders = VARIABLES
            .iter()
            .map(|(name, folder)| (*name, self.path.join(folder).into_os_string()));
        let offline = OFFLINE
            .iter()
            .filter(|_| network == Network::None)
            .map(|(name, value)| (*name, value.into()));
        for (name, value) in folders.chain(offline) {
            if !configured(name) {
                command.env(name, value);
            }
        }
    }
}

/// Where caches are kept when `sandbox.cache_dir` is not set.
pub fn default_root() -> PathBuf {
    std::env::temp_dir().join("mcp-session-proxy-cache")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cache_per_command_and_per_user() {
        let root = std::env::temp_dir().join(format!("cache-dir-test-{}", std::process::id()));
        let a = CacheDir::of(&root, "npx -y server-a", None).unwrap();
        let again = CacheDir::of(&root, "npx -y server-a", None).unwrap();
        let b = CacheDir::of(&root, "npx -y server-b", None).unwrap();
        assert_eq!(a.path(), again.path(), "kept across children");
        assert_ne!(a.path(), b.path(), "a command's own");
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let _ = std::fs::remove_dir_all(&root);
    }
}
