//! The seccomp filters: the system calls no MCP server needs fail with `EPERM` (the child sees
//! an error it can report, it is not killed), creating namespaces included; with no network,
//! a socket of any family but Unix too. `clone3`, whose flags a filter cannot read, fails with
//! `ENOSYS`, so the C library falls back to `clone`, whose flags it can.

use std::collections::BTreeMap;

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::{Network, SandboxError};

/// What no MCP server needs: tracing and reading other processes, mounting, rebooting and
/// loading kernels or modules, BPF, the kernel's keyrings, performance counters, namespaces,
/// the system's clock, swap and accounting.
const DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
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
    libc::SYS_syslog,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
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

/// The filters, in the order they are installed: what fails with `EPERM`, then `clone3`.
pub(super) fn filters(network: Network) -> Result<Vec<BpfProgram>, SandboxError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| SandboxError::Seccomp(format!("{}: {e}", std::env::consts::ARCH)))?;
    let failed = |e: seccompiler::BackendError| SandboxError::Seccomp(e.to_string());
    let mut denied: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&call| (call, Vec::new())).collect();
    let mut clone = Vec::new();
    for &flag in NAMESPACES {
        let flag = flag as u64;
        let condition = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )
        .map_err(failed)?;
        clone.push(SeccompRule::new(vec![condition]).map_err(failed)?);
    }
    denied.insert(libc::SYS_clone, clone);
    if network == Network::None {
        let not_unix = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )
        .map_err(failed)?;
        denied.insert(
            libc::SYS_socket,
            vec![SeccompRule::new(vec![not_unix]).map_err(failed)?],
        );
    }
    let eperm = SeccompFilter::new(
        denied,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(failed)?;
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(failed)?;
    [eperm, clone3]
        .into_iter()
        .map(|filter| {
            BpfProgram::try_from(filter).map_err(|e| SandboxError::Seccomp(e.to_string()))
        })
        .collect()
}

/// Installs the filters on this process (and what it executes).
pub(super) fn install(network: Network) -> Result<(), SandboxError> {
    for filter in filters(network)? {
        seccompiler::apply_filter(&filter)
            .map_err(|e| SandboxError::SeccompInstall(e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_build_for_this_machine() {
        assert_eq!(filters(Network::Allow).unwrap().len(), 2);
        assert_eq!(filters(Network::None).unwrap().len(), 2);
    }
}
