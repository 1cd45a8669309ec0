//! A confined child's private directory (its `HOME` and `TMPDIR`): made for it before it
//! starts, beside the other children's in a directory of the proxy's own (mode 0700), the only
//! place it may write besides the configured ones; removed with everything in it when the
//! child is done. The directory of the proxy's own is refused if another user made it first.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A child's directory, removed when dropped.
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    /// Makes a new directory for a child (owned by `owner`, a user and group id, when the child
    /// runs as another user).
    pub fn create(owner: Option<(u32, u32)>) -> std::io::Result<PrivateDir> {
        let base = std::env::temp_dir().join(format!("mcp-session-proxy-{}", std::process::id()));
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
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
