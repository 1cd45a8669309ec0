//! Removes a directory a child had, whatever the child left in it: however deep (a folder is
//! moved up beside the top one before it is emptied, so no step is deeper than two folders and
//! no path longer than one name), whatever modes (a folder closed to its owner is opened to it
//! again), links never followed (every step is made relative to an open folder). Blocking: run
//! off the runtime's threads.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{openat, renameat2, OFlag, RenameFlags, AT_FDCWD};
use nix::sys::stat::{fchmod, fchmodat, fstat, fstatat, FchmodatFlags, Mode, SFlag};
use nix::unistd::{dup, unlinkat, UnlinkatFlags};

/// Names read from a folder at a time.
const BATCH: usize = 4096;

/// Removes `path` and everything beneath it (nothing there is not an error).
pub fn remove_tree(path: &Path) -> nix::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Errno::EINVAL);
    };
    let parent = open_folder(AT_FDCWD, parent.as_os_str())?;
    let root = match open_folder(&parent, name) {
        Err(Errno::ENOENT) => return Ok(()),
        root => root?,
    };
    let mut pending = Vec::new();
    let mut moved = 0u64;
    for (name, folder) in names(&root, usize::MAX)? {
        match folder {
            true => pending.push(name),
            false => unlink(&root, &name)?,
        }
    }
    while let Some(name) = pending.pop() {
        let folder = open_folder(&root, OsStr::from_bytes(name.as_bytes()))?;
        loop {
            let batch = names(&folder, BATCH)?;
            if batch.is_empty() {
                break;
            }
            for (inner, is_folder) in batch {
                match is_folder {
                    true => pending.push(move_up(&folder, &inner, &root, &mut moved)?),
                    false => unlink(&folder, &inner)?,
                }
            }
        }
        drop(folder);
        unlinkat(&root, name.as_c_str(), UnlinkatFlags::RemoveDir)?;
    }
    drop(root);
    unlinkat(&parent, name, UnlinkatFlags::RemoveDir)
}

/// The folder `name` in `at`, opened without following a link, and open to its owner (read,
/// write, search: what emptying it takes).
fn open_folder<Fd: AsFd>(at: Fd, name: &OsStr) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let folder = match openat(&at, name, flags, Mode::empty()) {
        Err(Errno::EACCES) => {
            // Closed to its owner: opened to it again, the very folder looked at (held by an
            // O_PATH descriptor, named through /proc/self/fd, never a link's target).
            let path_flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let pinned = openat(&at, name, path_flags, Mode::empty())?;
            if SFlag::from_bits_truncate(fstat(&pinned)?.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR
            {
                return Err(Errno::ENOTDIR);
            }
            let by_descriptor = format!("/proc/self/fd/{}", pinned.as_raw_fd());
            fchmodat(
                AT_FDCWD,
                by_descriptor.as_str(),
                Mode::S_IRWXU,
                FchmodatFlags::FollowSymlink,
            )?;
            openat(&at, name, flags, Mode::empty())?
        }
        folder => folder?,
    };
    let mode = Mode::from_bits_truncate(fstat(&folder)?.st_mode);
    if !mode.contains(Mode::S_IRWXU) {
        let _ = fchmod(&folder, mode | Mode::S_IRWXU);
    }
    Ok(folder)
}

/// Up to `most` names in `folder` (not `.` nor `..`), each with whether it is a folder.
fn names(folder: &OwnedFd, most: usize) -> nix::Result<Vec<(CString, bool)>> {
    let mut dir = Dir::from_fd(dup(folder)?)?;
    let mut names = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let is_folder = match entry.file_type() {
            Some(kind) => kind == Type::Directory,
            None => {
                let stat = fstatat(folder, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)?;
                SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
            }
        };
        names.push((name.to_owned(), is_folder));
        if names.len() == most {
            break;
        }
    }
    Ok(names)
}

fn unlink(folder: &OwnedFd, name: &CString) -> nix::Result<()> {
    match unlinkat(folder, name.as_c_str(), UnlinkatFlags::NoRemoveDir) {
        Err(Errno::ENOENT) => Ok(()),
        done => done,
    }
}

/// Moves the folder `name` of `folder` up into `root`, under a name of its own there.
fn move_up(
    folder: &OwnedFd,
    name: &CString,
    root: &OwnedFd,
    moved: &mut u64,
) -> nix::Result<CString> {
    loop {
        *moved += 1;
        let new = CString::new(format!(".removed-{moved}")).expect("no NUL");
        let renamed = renameat2(
            folder,
            name.as_c_str(),
            root,
            new.as_c_str(),
            RenameFlags::RENAME_NOREPLACE,
        );
        match renamed {
            Ok(()) => return Ok(new),
            Err(Errno::EEXIST) => continue,
            // Moving a folder writes its `..`: a folder closed to its owner is opened first.
            Err(Errno::EACCES) => drop(open_folder(folder, OsStr::from_bytes(name.as_bytes()))?),
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_tree_deeper_than_a_path_can_name_with_closed_folders_and_links_is_removed() {
        let root = std::env::temp_dir().join(format!("remove-tree-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let outside = root.with_extension("outside");
        std::fs::write(&outside, "kept").unwrap();
        // 3,000 folders deep (a path of 9,000 bytes), made a level at a time from the bottom.
        let tree = root.join("tree");
        std::fs::create_dir(&tree).unwrap();
        std::fs::create_dir(tree.join("d")).unwrap();
        for _ in 0..3_000 {
            std::fs::rename(tree.join("d"), root.join("moving")).unwrap();
            std::fs::create_dir(tree.join("d")).unwrap();
            std::fs::rename(root.join("moving"), tree.join("d/d")).unwrap();
            std::os::unix::fs::symlink(&outside, tree.join("d/link")).unwrap_or(());
            std::fs::write(tree.join("d/file"), "x").unwrap_or(());
        }
        std::fs::set_permissions(tree.join("d"), std::fs::Permissions::from_mode(0o000)).unwrap();
        remove_tree(&root).unwrap();
        assert!(!root.exists());
        assert_eq!(
            std::fs::read_to_string(&outside).unwrap(),
            "kept",
            "a link is not followed"
        );
        let _ = std::fs::remove_file(&outside);
        assert!(remove_tree(&root).is_ok(), "nothing there");
    }
}
