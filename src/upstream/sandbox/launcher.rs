//! `sandbox-exec -- PROGRAM ARGS…`: the launcher, the parent of one server for as long as it
//! runs, started by the proxy in the child's place (same user, same descriptors). It becomes a
//! reaper (`PR_SET_CHILD_SUBREAPER`: whatever the server starts and leaves, double-forked or
//! in a session of its own, is reparented to it), starts the server through `sandbox-confine`,
//! passes on the signals the proxy sends it, and when the server ends, ends everything
//! reparented to it, then ends as the server did. Told to end, it gives the server the grace
//! it was told before it ends it all; told to end now (`SIGUSR1`), it ends it all at once.
//! Outside the server's sandbox, the server cannot signal it; not dumpable, it cannot be read.

use std::ffi::OsString;

use nix::sys::signal::{kill, raise, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::descendants::end_all_children;
use super::{confine, SandboxError, CONFINE};

/// What the launcher waits on: its children's ends, the proxy's signals, the grace's end, and
/// [`END_NOW`].
const WAITED: [Signal; 6] = [
    Signal::SIGCHLD,
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGALRM,
    END_NOW,
];

/// The signal that tells the launcher to end the server and everything of it at once (a
/// server that stopped reading its stdin, a proxy out of patience).
pub const END_NOW: Signal = Signal::SIGUSR1;

/// How the server ended.
#[derive(Debug, Clone, Copy)]
enum Ended {
    Exited(i32),
    Killed(Signal),
}

/// Starts the server (`args`, the program first) and watches it; returns only when it could
/// not be started.
pub(super) fn supervise(args: Vec<OsString>) -> SandboxError {
    match start_and_watch(args) {
        Ok(never) => match never {},
        Err(error) => error,
    }
}

fn start_and_watch(args: Vec<OsString>) -> Result<std::convert::Infallible, SandboxError> {
    let launch = confine::told()?;
    if args.is_empty() {
        return Err(SandboxError::NoCommand);
    }
    let _ = nix::sys::prctl::set_dumpable(false);
    nix::sys::prctl::set_child_subreaper(true).map_err(SandboxError::Reaper)?;
    let mut waited = SigSet::empty();
    for signal in WAITED {
        waited.add(signal);
    }
    // Blocked before the server starts, so none is missed; the server starts with none
    // blocked (the standard library clears the mask of what it spawns).
    waited.thread_block().map_err(SandboxError::Reaper)?;
    let server = std::process::Command::new("/proc/self/exe")
        .arg(CONFINE)
        .arg("--")
        .args(&args)
        .spawn()
        .map_err(SandboxError::Spawn)?;
    let server = Pid::from_raw(server.id() as i32);
    let grace = launch.grace.as_secs().max(1).min(u32::MAX as u64) as u32;
    let mut told_to_end = false;
    loop {
        let signal = waited.wait().map_err(SandboxError::Wait)?;
        match signal {
            Signal::SIGCHLD => {
                if let Some(ended) = reap(server) {
                    end_all_children();
                    end_as(ended);
                }
            }
            Signal::SIGALRM | END_NOW => {
                // The grace is over, or there is none: the server, and everything of it, ends.
                end_all_children();
                end_as(Ended::Killed(Signal::SIGKILL));
            }
            told => {
                let _ = kill(server, told);
                if !told_to_end {
                    told_to_end = true;
                    nix::unistd::alarm::set(grace);
                }
            }
        }
    }
}

/// Reaps every child that ended; how the server did, if it is among them.
fn reap(server: Pid) -> Option<Ended> {
    let mut ended = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == server => ended = Some(Ended::Exited(code)),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == server => {
                ended = Some(Ended::Killed(signal))
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return ended,
            Ok(_) => {}
        }
    }
}

/// Ends this process as the server ended: with its exit code, or by its signal (no core dump:
/// this process is not dumpable), so the proxy reads the server's end.
fn end_as(ended: Ended) -> ! {
    match ended {
        Ended::Exited(code) => std::process::exit(code),
        Ended::Killed(signal) => {
            let mut only = SigSet::empty();
            only.add(signal);
            let _ = only.thread_unblock();
            let _ = raise(signal);
            std::process::exit(128 + signal as i32)
        }
    }
}
