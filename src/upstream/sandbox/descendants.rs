//! Finding and ending the processes a server left: the launcher's children (the server, and
//! what was reparented to it, the launcher being their reaper), found in `/proc`; and every
//! process of a user (`kill(-1)`), run as a child's user from a range before its id is given
//! again.

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// The children of `parent`, a single-threaded process: from its `children` file where the
/// kernel has one (one small read), else from every `/proc/<pid>/stat`.
fn children_of(parent: Pid) -> Vec<Pid> {
    let listed = format!("/proc/{parent}/task/{parent}/children");
    if let Ok(children) = std::fs::read_to_string(listed) {
        return children
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .map(Pid::from_raw)
            .collect();
    }
    children_by_stat(parent)
}

/// The processes whose parent is `parent`, from every `/proc/<pid>/stat`.
fn children_by_stat(parent: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| parent_of(pid) == Some(parent.as_raw()))
        .map(Pid::from_raw)
        .collect()
}

/// The parent of `pid`: the field after the state, after the command's closing parenthesis
/// (the command may hold spaces and parentheses of its own).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_command = &stat[stat.rfind(')')? + 1..];
    after_command.split_whitespace().nth(1)?.parse().ok()
}

/// Kills every child of this process, and what is reparented to it as they die, until it has
/// none; each is reaped.
pub(super) fn end_all_children() {
    let me = nix::unistd::getpid();
    loop {
        for child in children_of(me) {
            let _ = kill(child, Signal::SIGKILL);
        }
        // A process's orphans are reparented before it can be reaped: once one is, what it
        // left is found on the next look. Every child that ended is reaped before it.
        match waitpid(None, None) {
            Err(Errno::ECHILD) => return,
            Err(Errno::EINTR) | Ok(_) => {}
            Err(_) => return,
        }
        while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
    }
}

/// `sandbox-reap`: signals every process this user may (its own user's, this one but) to end.
pub(super) fn end_every_process_of_this_user() -> std::process::ExitCode {
    // Never as root, nor as the proxy's own user: only ever a child's.
    if nix::unistd::getuid().is_root() || nix::unistd::geteuid().is_root() {
        eprintln!("mcp-session-proxy sandbox-reap: refused as root");
        return std::process::ExitCode::FAILURE;
    }
    match kill(Pid::from_raw(-1), Signal::SIGKILL) {
        // ESRCH: there was none.
        Ok(()) | Err(Errno::ESRCH) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mcp-session-proxy sandbox-reap: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_is_read_past_a_command_with_parentheses() {
        let me = nix::unistd::getpid();
        let parent = nix::unistd::getppid();
        assert_eq!(parent_of(me.as_raw()), Some(parent.as_raw()));
        assert!(children_by_stat(parent).contains(&me));
    }
}
