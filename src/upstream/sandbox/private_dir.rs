//! A confined child's private directory (its `HOME` and `TMPDIR`): made for it before it
//! starts, beside the other children's in a directory of the proxy's own (mode 0700), the only
//! place it may write besides the configured ones; removed with everything in it when the
//! child is done. The directory of the proxy's own is refused if another user made it first,
//! removed when the proxy stops, and, left by a proxy that did not stop (killed), removed by
//! the next to start.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A child's directory, removed when dropped.
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
}

/// The name of a proxy's directory of private directories, before its process id.
const BASE_PREFIX: &str = "mcp-session-proxy-";

/// The directory of this proxy's children's directories.
pub fn base() -> PathBuf {
    base_of(std::process::id())
}

/// The directory of the children's directories of the proxy `pid`.
fn base_of(pid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("{BASE_PREFIX}{pid}"))
}

/// Removes this proxy's directory of children's directories, with whatever is left in it: at
/// exit, its children ended.
pub fn remove_own() {
    remove_all(&base_of(std::process::id()));
}

/// Removes `path` and everything beneath it, whatever depth and modes a child left.
fn remove_all(path: &Path) {
    if let Err(error) = super::remove_tree::remove_tree(path) {
        tracing::warn!(path = %path.display(), %error, "cannot remove a child's directory");
    }
}

/// Removes the directories of children's directories of proxies of this user that ended
/// without removing theirs (killed): at start.
pub fn remove_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(BASE_PREFIX))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let running = std::path::Path::new(&format!("/proc/{pid}")).exists();
        if pid != me && !running && own_directory(&entry.path()).is_ok() {
            remove_all(&entry.path());
        }
    }
}

impl PrivateDir {
    /// Makes a new directory for a child (owned by `owner`, a user and group id, when the child
    /// runs as another user).
    pub fn create(owner: Option<(u32, u32)>) -> std::io::Result<PrivateDir> {
        let base = base_of(std::process::id());
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&base)?;
        own_directory(&base)?;
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o711))?;
        let mut name = [0u8; 12];
        getrandom::fill(&mut name).map_err(|e| std::io::Error::other(e.to_string()))?;
        let name: String = name.iter().map(|b| format!("{b:02x}")).collect();
        let path = base.join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        let dir = PrivateDir { path };
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir.path, Some(uid), Some(gid))?;
        }
        Ok(dir)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the directory now, with everything in it. Blocking: a child can leave thousands
    /// of entries (a view of a package cache is made of them).
    pub fn remove(mut self) {
        remove_all(&std::mem::take(&mut self.path));
    }
}

/// Fails unless `path` is a directory (not a link to one) of the proxy's own user: in a shared
/// temporary directory, another local user could have made it first.
pub(super) fn own_directory(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::symlink_metadata(path)?;
    if metadata.is_dir() && metadata.uid() == nix::unistd::Uid::effective().as_raw() {
        return Ok(());
    }
    Err(std::io::Error::other(format!(
        "{} is not a directory of the proxy's user",
        path.display()
    )))
}

impl Drop for PrivateDir {
    /// Removes the directory (on a blocking thread when a runtime runs: never on its own).
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        if path.as_os_str().is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || remove_all(&path))),
            Err(_) => remove_all(&path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_a_child_closed_is_removed_all_the_same() {
        let dir = PrivateDir::create(None).unwrap();
        let closed = dir.path().join("locked/inner");
        std::fs::create_dir_all(&closed).unwrap();
        std::fs::write(closed.join("left-behind"), "x").unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o0)).unwrap();
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    fn a_directory_another_user_made_or_a_link_is_refused() {
        let base = std::env::temp_dir().join(format!("own-directory-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("mine")).unwrap();
        assert!(own_directory(&base.join("mine")).is_ok());
        std::os::unix::fs::symlink(base.join("mine"), base.join("link")).unwrap();
        assert!(own_directory(&base.join("link")).is_err(), "a link");
        if nix::unistd::Uid::effective().is_root() {
            std::fs::create_dir(base.join("theirs")).unwrap();
            std::os::unix::fs::chown(base.join("theirs"), Some(65534), None).unwrap();
            assert!(
                own_directory(&base.join("theirs")).is_err(),
                "another user's"
            );
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
