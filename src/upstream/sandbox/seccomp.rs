//! The seccomp filters, three, installed in this order:
//!
//! 1. what may be called at all (`syscalls`: an allowlist; anything else fails with `ENOSYS`,
//!    and a call through another architecture's entry, such as `int 0x80`, ends the process);
//! 2. what of that fails with `EPERM` (the child sees an error it can report): calls no MCP
//!    server needs ([`REFUSED`]: io_uring, which would make and connect sockets past every
//!    other rule, among them), calls aimed at another process (limits, priorities, scheduling:
//!    only the caller's own, pid 0), a new namespace, and the sockets the network setting
//!    refuses;
//! 3. `clone3`, whose flags a filter cannot read: `ENOSYS`, so the C library falls back to
//!    `clone`, whose flags it can.

use std::collections::BTreeMap;

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::syscalls::{ALLOWED, ALLOWED_HERE, ALLOWED_UNIFIED};
use super::SandboxError;

/// What no MCP server needs: tracing and reading other processes, mounting, rebooting and
/// loading kernels or modules, BPF, the kernel's keyrings, performance counters, namespaces,
/// the system's clock, name and swap, accounting, io_uring.
const REFUSED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_process_madvise,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_bpf,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_perf_event_open,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_vhangup,
    libc::SYS_syslog,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // System V IPC: its objects outlive their maker, are shared by user id (the next child of
    // an id finds them) and are bounded by no limit of the child's.
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmctl,
    libc::SYS_shmdt,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_semctl,
];

/// The terminal `ioctl`s that put input in a terminal's queue or act on its console
/// (`TIOCSTI`, `TIOCLINUX`): never a server's to make, whatever terminal it holds.
const TERMINAL_INPUT: &[u64] = &[0x5412, 0x541C];

/// Calls whose first argument names the process they act on: allowed only for the caller
/// itself (0).
const ON_ITSELF: &[libc::c_long] = &[
    libc::SYS_prlimit64,
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_setparam,
    libc::SYS_sched_setscheduler,
    libc::SYS_sched_setattr,
];

/// `clone` flags that make a namespace.
const NAMESPACES: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// The execution domains `personality` may set (Docker's): Linux, with the address space
/// unrandomised or 32-bit, and the query.
const PERSONALITIES: &[u64] = &[0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// What sockets a child may make (`socketpair`, a connected pair of its own, always).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sockets {
    /// Any the proxy may, but `AF_VSOCK` (the host's virtual machines).
    Any,
    /// The kernel's routing information (`NETLINK_ROUTE`, for the C library's resolver), TCP
    /// (its ports bounded by Landlock; no `listen`), and UDP only with `udp`: no Unix socket by
    /// path (a pair of its own only).
    Tcp { udp: bool },
    /// None at all: not even a Unix socket by path; a pair of its own (`socketpair`) only as a
    /// stream.
    None,
}

/// The filters, in the order they are installed.
pub(super) fn filters(sockets: Sockets) -> Result<Vec<BpfProgram>, SandboxError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| SandboxError::Seccomp(format!("{}: {e}", std::env::consts::ARCH)))?;
    let refused = refused(sockets)?;
    let callable: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
        .iter()
        .chain(ALLOWED_HERE)
        .chain(ALLOWED_UNIFIED)
        .chain(refused.keys())
        .chain(&[libc::SYS_clone3])
        .map(|&call| (call, Vec::new()))
        .collect();
    let filters = [
        SeccompFilter::new(
            callable,
            SeccompAction::Errno(libc::ENOSYS as u32),
            SeccompAction::Allow,
            arch,
        ),
        SeccompFilter::new(
            refused,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        ),
        SeccompFilter::new(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        ),
    ];
    filters
        .into_iter()
        .map(|filter| {
            let filter = filter.map_err(|e| SandboxError::Seccomp(e.to_string()))?;
            BpfProgram::try_from(filter).map_err(|e| SandboxError::Seccomp(e.to_string()))
        })
        .collect()
}

/// Installs the filters on this process (and what it executes).
pub(super) fn install(sockets: Sockets) -> Result<(), SandboxError> {
    for filter in filters(sockets)? {
        seccompiler::apply_filter(&filter)
            .map_err(|e| SandboxError::SeccompInstall(e.to_string()))?;
    }
    Ok(())
}

/// The calls refused with `EPERM`: each always (no rule), or when one of its rules holds.
fn refused(sockets: Sockets) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> =
        REFUSED.iter().map(|&call| (call, Vec::new())).collect();
    for &call in ON_ITSELF {
        refused.insert(call, vec![rule(&[(0, ne(0))])?]);
    }
    // setpriority(PRIO_PROCESS, 0, …) and ioprio_set(IOPRIO_WHO_PROCESS, 0, …) only: another
    // process, group or user's is out of reach.
    let not_itself = |which: u64| Ok(vec![rule(&[(0, ne(which))])?, rule(&[(1, ne(0))])?]);
    refused.insert(
        libc::SYS_setpriority,
        not_itself(libc::PRIO_PROCESS as u64)?,
    );
    refused.insert(libc::SYS_ioprio_set, not_itself(1)?);
    let namespaces = NAMESPACES
        .iter()
        .map(|&flag| {
            let flag = flag as u64;
            condition(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )
            .and_then(|c| SeccompRule::new(vec![c]).map_err(failed))
        })
        .collect::<Result<_, _>>()?;
    refused.insert(libc::SYS_clone, namespaces);
    let personalities: Vec<(u8, Cmp)> = PERSONALITIES.iter().map(|&p| (0, ne(p))).collect();
    refused.insert(libc::SYS_personality, vec![rule(&personalities)?]);
    refused.insert(libc::SYS_socket, socket_rules(sockets)?);
    let terminal_input = TERMINAL_INPUT
        .iter()
        .map(|&request| rule(&[(1, (SeccompCmpOp::Eq, request))]))
        .collect::<Result<_, _>>()?;
    refused.insert(libc::SYS_ioctl, terminal_input);
    // A pair of its own is a Unix one (another family's pair only loads kernel code); unless
    // any socket may be made, not a datagram one: `sendto` on it reaches any Unix socket by
    // its path.
    let mut pairs = vec![rule(&[(0, ne(libc::AF_UNIX as u64))])?];
    if sockets != Sockets::Any {
        for kind in (0..16).filter(|kind| ![libc::SOCK_STREAM, libc::SOCK_SEQPACKET].contains(kind))
        {
            pairs.push(rule(&[(1, masked_type(kind))])?);
        }
    }
    refused.insert(libc::SYS_socketpair, pairs);
    if let Sockets::Tcp { .. } = sockets {
        // Bound to the listed ports for what it connects to, it listens on none: `listen` on a
        // socket it did not bind would bind it to a port of the kernel's choosing, on every
        // address, past Landlock's rules.
        refused.insert(libc::SYS_listen, Vec::new());
    }
    for (call, mode) in SET_ID_MODES {
        let set_id = [libc::S_ISUID, libc::S_ISGID]
            .iter()
            .map(|&bit| rule(&[(*mode, masked(bit as u64))]))
            .collect::<Result<_, _>>()?;
        refused.insert(*call, set_id);
    }
    for (call, flags, mode) in CREATING {
        let set_id = [libc::S_ISUID, libc::S_ISGID]
            .iter()
            .flat_map(|&bit| {
                [libc::O_CREAT, O_TMPFILE_BIT].map(|creating| {
                    rule(&[
                        (*flags, masked(creating as u64)),
                        (*mode, masked(bit as u64)),
                    ])
                })
            })
            .collect::<Result<_, _>>()?;
        refused.insert(*call, set_id);
    }
    Ok(refused)
}

/// `O_TMPFILE`'s own bit (the flag also holds `O_DIRECTORY`).
const O_TMPFILE_BIT: libc::c_int = 0o20_000_000;

/// The calls that set a file's mode, and the argument the mode is: a mode with a set-user-id
/// or set-group-id bit is refused. Landlock does not bound whose modes a child changes: a
/// child running as root could otherwise make a program of the system's run as root for any
/// user who runs it.
const SET_ID_MODES: &[(libc::c_long, u8)] = &[
    (libc::SYS_fchmod, 1),
    (libc::SYS_fchmodat, 2),
    (452, 2), // fchmodat2
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_chmod, 1),
    (libc::SYS_mknodat, 2),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_mknod, 1),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_creat, 1),
];

/// The calls that create a file with a mode when their flags say so: the flags' argument and
/// the mode's.
const CREATING: &[(libc::c_long, u8, u8)] = &[
    (libc::SYS_openat, 2, 3),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_open, 1, 2),
];

/// When `socket(family, type, protocol)` is refused: empty, always.
fn socket_rules(sockets: Sockets) -> Result<Vec<SeccompRule>, SandboxError> {
    let udp = match sockets {
        Sockets::Any => return Ok(vec![rule(&[(0, eq(libc::AF_VSOCK))])?]),
        Sockets::None => return Ok(Vec::new()),
        Sockets::Tcp { udp } => udp,
    };
    let families = [libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK];
    let other_family: Vec<(u8, Cmp)> = families.iter().map(|&f| (0, ne(f as u64))).collect();
    let mut rules = vec![
        rule(&other_family)?,
        rule(&[
            (0, eq(libc::AF_NETLINK)),
            (2, ne(libc::NETLINK_ROUTE as u64)),
        ])?,
    ];
    let kinds: &[(libc::c_int, libc::c_int)] = match udp {
        true => &[
            (libc::SOCK_STREAM, libc::IPPROTO_TCP),
            (libc::SOCK_DGRAM, libc::IPPROTO_UDP),
        ],
        false => &[(libc::SOCK_STREAM, libc::IPPROTO_TCP)],
    };
    for family in [libc::AF_INET, libc::AF_INET6] {
        // The type's low bits (its flags, SOCK_NONBLOCK and SOCK_CLOEXEC, above them).
        for kind in (0..16).filter(|kind| kinds.iter().all(|(allowed, _)| allowed != kind)) {
            rules.push(rule(&[(0, eq(family)), (1, masked_type(kind))])?);
        }
        for &(kind, protocol) in kinds {
            rules.push(rule(&[
                (0, eq(family)),
                (1, masked_type(kind)),
                (2, ne(0)),
                (2, ne(protocol as u64)),
            ])?);
        }
    }
    Ok(rules)
}

/// A comparison of a 32-bit argument (a family, a type, a pid, an id).
type Cmp = (SeccompCmpOp, u64);

fn eq(value: libc::c_int) -> Cmp {
    (SeccompCmpOp::Eq, value as u64)
}

fn ne(value: u64) -> Cmp {
    (SeccompCmpOp::Ne, value)
}

/// Whether the argument has every bit of `bits`.
fn masked(bits: u64) -> Cmp {
    (SeccompCmpOp::MaskedEq(bits), bits)
}

fn masked_type(kind: libc::c_int) -> Cmp {
    (SeccompCmpOp::MaskedEq(0xf), kind as u64)
}

/// A rule holding when every comparison does.
fn rule(comparisons: &[(u8, Cmp)]) -> Result<SeccompRule, SandboxError> {
    let conditions = comparisons
        .iter()
        .map(|(arg, (op, value))| condition(*arg, SeccompCmpArgLen::Dword, op.clone(), *value))
        .collect::<Result<_, _>>()?;
    SeccompRule::new(conditions).map_err(failed)
}

fn condition(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(arg, len, op, value).map_err(failed)
}

fn failed(error: seccompiler::BackendError) -> SandboxError {
    SandboxError::Seccomp(error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_build_for_this_machine() {
        for sockets in [
            Sockets::Any,
            Sockets::Tcp { udp: false },
            Sockets::Tcp { udp: true },
            Sockets::None,
        ] {
            assert_eq!(filters(sockets).unwrap().len(), 3, "{sockets:?}");
        }
    }

    #[test]
    fn nothing_refused_is_also_allowed_unconditionally_by_name() {
        // A call both listed as allowed and refused would be refused anyway (the second
        // filter), but a list that says both is a list that was misread.
        for call in REFUSED.iter().chain(ON_ITSELF) {
            assert!(
                !ALLOWED.contains(call) && !ALLOWED_HERE.contains(call),
                "{call}"
            );
        }
    }
}
