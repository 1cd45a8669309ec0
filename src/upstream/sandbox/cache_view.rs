//! A session's child's view of its command's sealed package cache: made by the child itself,
//! confined, before the server runs, in its private directory. Folders are made anew, files
//! are links to the sealed cache's (an empty file, a package manager's lock, is made anew),
//! links are copied as they are. The package managers find what was fetched and may write
//! what they like (their locks, an index entry, a package fetched again): a write into the
//! view stays in it, thrown away with the child; a write through a link to the sealed cache is
//! refused (Landlock grants it reading only). Folders are the view's own, so a package
//! manager that replaces a file (a new one, renamed over the link) does so in the view.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The most entries a view is made of: past it, the rest of the cache is left out (the package
/// managers fetch again what they miss, or fail without network) and the child is told so.
pub const MAX_ENTRIES: usize = 200_000;

/// Where a child's view of a sealed cache is made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheView {
    pub sealed: PathBuf,
    pub view: PathBuf,
}

/// Why a view was left short.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("cannot make the view of the package cache at {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the package cache holds more than {MAX_ENTRIES} entries: the view holds the first ones only")]
    TooLarge,
}

impl CacheView {
    /// Makes the view: the number of entries in it.
    pub fn build(&self) -> Result<usize, ViewError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ViewError::Io { path, source }
        };
        let mut entries = 0;
        let mut folders = vec![PathBuf::new()];
        while let Some(relative) = folders.pop() {
            let (from, to) = (self.sealed.join(&relative), self.view.join(&relative));
            std::fs::create_dir_all(&to).map_err(io(&to))?;
            for entry in std::fs::read_dir(&from).map_err(io(&from))? {
                let entry = entry.map_err(io(&from))?;
                entries += 1;
                if entries > MAX_ENTRIES {
                    return Err(ViewError::TooLarge);
                }
                let (source, target) = (entry.path(), to.join(entry.file_name()));
                let metadata = std::fs::symlink_metadata(&source).map_err(io(&source))?;
                let made = if metadata.is_dir() {
                    folders.push(relative.join(entry.file_name()));
                    continue;
                } else if metadata.is_symlink() {
                    std::fs::read_link(&source)
                        .and_then(|link| std::os::unix::fs::symlink(link, &target))
                } else if metadata.is_file() && metadata.len() == 0 {
                    std::fs::File::create(&target).map(drop)
                } else if metadata.is_file() {
                    std::os::unix::fs::symlink(&source, &target)
                } else {
                    continue; // a socket, a pipe, a device: nothing a package manager keeps
                };
                made.map_err(io(&target))?;
            }
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_holds_the_caches_files_as_links_its_own_folders_and_fresh_locks() {
        let root = std::env::temp_dir().join(format!("cache-view-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let sealed = root.join("sealed");
        std::fs::create_dir_all(sealed.join("npm/_npx/abc/node_modules/pkg")).unwrap();
        std::fs::write(
            sealed.join("npm/_npx/abc/node_modules/pkg/index.js"),
            "run()",
        )
        .unwrap();
        std::fs::write(sealed.join("npm/.lock"), "").unwrap();
        std::os::unix::fs::symlink("_npx/abc", sealed.join("npm/current")).unwrap();
        let view = CacheView {
            sealed: sealed.clone(),
            view: root.join("view"),
        };
        assert_eq!(view.build().unwrap(), 8);
        let file = view.view.join("npm/_npx/abc/node_modules/pkg/index.js");
        assert_eq!(
            std::fs::read_link(&file).unwrap(),
            sealed.join("npm/_npx/abc/node_modules/pkg/index.js")
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "run()");
        let lock = std::fs::symlink_metadata(view.view.join("npm/.lock")).unwrap();
        assert!(lock.is_file(), "a lock of the view's own");
        assert_eq!(
            std::fs::read_link(view.view.join("npm/current")).unwrap(),
            Path::new("_npx/abc"),
            "a link as it is"
        );
        assert!(std::fs::symlink_metadata(view.view.join("npm/_npx"))
            .unwrap()
            .is_dir());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_view_of_a_missing_cache_says_so() {
        let view = CacheView {
            sealed: PathBuf::from("/nonexistent/sealed"),
            view: std::env::temp_dir().join(format!("cache-view-missing-{}", std::process::id())),
        };
        assert!(matches!(view.build(), Err(ViewError::Io { .. })));
        let _ = std::fs::remove_dir_all(&view.view);
    }
}
