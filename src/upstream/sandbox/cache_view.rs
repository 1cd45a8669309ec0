//! A session's child's view of its command's sealed package cache: made by the child itself,
//! confined, before the server runs, in its private directory. Folders are made anew, files
//! are links to the sealed cache's (an empty file, a package manager's lock, is made anew),
//! links are copied as they are; an installed Node package (a folder in a `node_modules`) is
//! linked whole. The package managers find what was fetched and may write
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
    /// Makes the view: the number of entries in it. What cannot be made (a folder of the cache
    /// a child closed, say) is left out and the rest made: the error is the first such.
    pub fn build(&self) -> Result<usize, ViewError> {
        let mut entries = 0;
        let mut first_error = None;
        let mut folders = vec![PathBuf::new()];
        while let Some(relative) = folders.pop() {
            let made = self.build_folder(&relative, &mut entries, &mut folders, &mut first_error);
            if let Err(error) = made {
                first_error.get_or_insert(error);
            }
            if entries > MAX_ENTRIES {
                return Err(ViewError::TooLarge);
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(entries),
        }
    }

    /// Makes the folder `relative` of the view and its entries, the folders in it left to
    /// `folders`; an entry that cannot be made is left out, the first error kept.
    fn build_folder(
        &self,
        relative: &Path,
        entries: &mut usize,
        folders: &mut Vec<PathBuf>,
        first_error: &mut Option<ViewError>,
    ) -> Result<(), ViewError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ViewError::Io { path, source }
        };
        let (from, to) = (self.sealed.join(relative), self.view.join(relative));
        std::fs::create_dir_all(&to).map_err(io(&to))?;
        for entry in std::fs::read_dir(&from).map_err(io(&from))? {
            let entry = entry.map_err(io(&from))?;
            *entries += 1;
            if *entries > MAX_ENTRIES {
                return Ok(());
            }
            let (source, target) = (entry.path(), to.join(entry.file_name()));
            let made = std::fs::symlink_metadata(&source).and_then(|metadata| {
                if metadata.is_dir() && !installed_package(relative, &entry.file_name()) {
                    folders.push(relative.join(entry.file_name()));
                    Ok(())
                } else if metadata.is_dir() {
                    std::os::unix::fs::symlink(&source, &target)
                } else if metadata.is_symlink() {
                    std::fs::read_link(&source)
                        .and_then(|link| std::os::unix::fs::symlink(link, &target))
                } else if metadata.is_file() && metadata.len() == 0 {
                    std::fs::File::create(&target).map(drop)
                } else if metadata.is_file() {
                    std::os::unix::fs::symlink(&source, &target)
                } else {
                    Ok(()) // a socket, a pipe, a device: nothing a package manager keeps
                }
            });
            if let Err(error) = made {
                first_error.get_or_insert(io(&target)(error));
            }
        }
        Ok(())
    }
}

/// Whether the folder `name` in `folder` is an installed Node package (in a `node_modules`, or
/// a scope of one): linked whole, as npm replaces an installed package, never changes one in
/// place, and Node follows links to packages as it does `npm link`'s; the folder it is in is
/// the view's own (a package added, replaced or removed there stays in the view). Thousands of
/// files fewer to link per child. (A `site-packages` is not linked so: uv reads only folders
/// there, not links to them.)
fn installed_package(folder: &Path, name: &std::ffi::OsStr) -> bool {
    let scope = |name: &std::ffi::OsStr| name.as_encoded_bytes().starts_with(b"@");
    let mut names = folder.iter().rev();
    match (names.next(), names.next()) {
        (Some(last), _) if last == "node_modules" => !scope(name),
        (Some(last), Some(parent)) => parent == "node_modules" && scope(last),
        _ => false,
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
        let modules = sealed.join("npm/_npx/abc/node_modules");
        std::fs::create_dir_all(modules.join("pkg")).unwrap();
        std::fs::create_dir_all(modules.join("@scope/inner/lib")).unwrap();
        std::fs::write(modules.join("pkg/index.js"), "run()").unwrap();
        std::fs::write(modules.join(".package-lock.json"), "{}").unwrap();
        std::fs::write(sealed.join("npm/.lock"), "").unwrap();
        std::os::unix::fs::symlink("_npx/abc", sealed.join("npm/current")).unwrap();
        let view = CacheView {
            sealed: sealed.clone(),
            view: root.join("view"),
        };
        assert_eq!(view.build().unwrap(), 10);
        let installed = view.view.join("npm/_npx/abc/node_modules");
        for folder in [
            &installed,
            &installed.join("@scope"),
            &view.view.join("npm/_npx"),
        ] {
            let metadata = std::fs::symlink_metadata(folder).unwrap();
            assert!(metadata.is_dir(), "the view's own: {}", folder.display());
        }
        for package in ["pkg", "@scope/inner"] {
            assert_eq!(
                std::fs::read_link(installed.join(package)).unwrap(),
                modules.join(package),
                "a package linked whole"
            );
        }
        assert_eq!(
            std::fs::read_link(installed.join(".package-lock.json")).unwrap(),
            modules.join(".package-lock.json")
        );
        let file = installed.join("pkg/index.js");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "run()");
        let lock = std::fs::symlink_metadata(view.view.join("npm/.lock")).unwrap();
        assert!(lock.is_file(), "a lock of the view's own");
        assert_eq!(
            std::fs::read_link(view.view.join("npm/current")).unwrap(),
            Path::new("_npx/abc"),
            "a link as it is"
        );
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
