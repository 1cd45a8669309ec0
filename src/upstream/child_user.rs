//! The user and group a stdio child runs as (`upstream.user`, `upstream.group`: names or
//! numeric ids), resolved at start. The child gets that user id, that group id and no
//! supplementary groups; only a proxy that may switch users and stop what runs as them
//! (CAP_SETUID, CAP_SETGID and CAP_KILL, as root has) runs children so, and one that may not
//! stops at start instead of running them as itself.

use nix::unistd::{Group, Uid, User};
use tokio::process::Command;

/// Capability numbers (linux/capability.h).
const CAP_KILL: u32 = 5;
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;

/// Who a child runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildUser {
    pub uid: u32,
    pub gid: u32,
}

/// Why children cannot run as the configured user and group.
#[derive(Debug, thiserror::Error)]
pub enum ChildUserError {
    #[error("no user is named {0:?}")]
    UnknownUser(String),
    #[error("no group is named {0:?}")]
    UnknownGroup(String),
    #[error(
        "user id {0} has no entry in the user database, so no group of its own: set the group too"
    )]
    NoGroupOfItsOwn(u32),
    #[error("cannot look {0:?} up in the user database: {1}")]
    Lookup(String, nix::Error),
    #[error(
        "the proxy may not run its children as another user: it runs as user id {uid} without \
         CAP_SETUID, CAP_SETGID and CAP_KILL (to stop them) (run it as root or with those \
         capabilities, or leave user and group unset)"
    )]
    NotPermitted { uid: u32 },
    #[error("cannot tell whether the proxy may switch users (/proc/self/status): {0}")]
    Capabilities(String),
}

impl ChildUserError {
    /// The key at fault: `user` or `group`.
    pub fn field(&self, user: &str) -> &'static str {
        match self {
            ChildUserError::UnknownGroup(_) => "group",
            ChildUserError::Lookup(name, _) if name != user => "group",
            _ if user.is_empty() => "group",
            _ => "user",
        }
    }
}

impl ChildUser {
    /// Who children run as with `user` and `group` (empty: unset); `None` when both are unset.
    /// The group defaults to the user's own; the user to the proxy's. Fails where the proxy
    /// may not switch.
    pub fn resolve(user: &str, group: &str) -> Result<Option<ChildUser>, ChildUserError> {
        if user.is_empty() && group.is_empty() {
            return Ok(None);
        }
        let (uid, own_group) = match user {
            "" => (Uid::effective().as_raw(), None),
            name => find_user(name)?,
        };
        let gid = match group {
            "" => own_group.ok_or(ChildUserError::NoGroupOfItsOwn(uid))?,
            name => find_group(name)?,
        };
        may_switch()?;
        Ok(Some(ChildUser { uid, gid }))
    }

    /// Runs `command` as this user and group. Setting the user id also drops the supplementary
    /// groups (std calls `setgroups(0)` before `setuid` when none are given).
    pub fn apply(&self, command: &mut Command) {
        command.uid(self.uid).gid(self.gid);
    }
}

/// A user's id and group, by name or number (a number need not be in the database).
fn find_user(name: &str) -> Result<(u32, Option<u32>), ChildUserError> {
    let lookup = |e| ChildUserError::Lookup(name.to_owned(), e);
    if let Ok(uid) = name.parse::<u32>() {
        let entry = User::from_uid(Uid::from_raw(uid)).map_err(lookup)?;
        return Ok((uid, entry.map(|user| user.gid.as_raw())));
    }
    let user = User::from_name(name)
        .map_err(lookup)?
        .ok_or_else(|| ChildUserError::UnknownUser(name.to_owned()))?;
    Ok((user.uid.as_raw(), Some(user.gid.as_raw())))
}

/// A group's id, by name or number.
fn find_group(name: &str) -> Result<u32, ChildUserError> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    Group::from_name(name)
        .map_err(|e| ChildUserError::Lookup(name.to_owned(), e))?
        .map(|group| group.gid.as_raw())
        .ok_or_else(|| ChildUserError::UnknownGroup(name.to_owned()))
}

/// Whether this process may set a child's user, group and groups, and signal it once it runs
/// as another user: the three capabilities held (root without them, as in a container that
/// dropped them, may not).
fn may_switch() -> Result<(), ChildUserError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| ChildUserError::Capabilities(e.to_string()))?;
    let effective = effective_capabilities(&status)
        .ok_or_else(|| ChildUserError::Capabilities("no CapEff line".into()))?;
    let held = |capability: u32| effective & (1 << capability) != 0;
    match held(CAP_SETUID) && held(CAP_SETGID) && held(CAP_KILL) {
        true => Ok(()),
        false => Err(ChildUserError::NotPermitted {
            uid: Uid::effective().as_raw(),
        }),
    }
}

/// The `CapEff` mask of a `/proc/<pid>/status`.
fn effective_capabilities(status: &str) -> Option<u64> {
    let hex = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_mask_is_read_from_the_status() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t00000000000000e0\n";
        let mask = effective_capabilities(status).unwrap();
        for capability in [CAP_KILL, CAP_SETGID, CAP_SETUID] {
            assert!(mask & (1 << capability) != 0, "{capability}");
        }
        assert_eq!(effective_capabilities("Name:\tx\n"), None);
    }

    #[test]
    fn nothing_set_is_no_switch() {
        assert_eq!(ChildUser::resolve("", "").unwrap(), None);
    }

    #[test]
    fn unknown_names_are_errors_naming_their_key() {
        let error = ChildUser::resolve("no-such-user-4f2a", "").unwrap_err();
        assert!(matches!(error, ChildUserError::UnknownUser(_)));
        assert_eq!(error.field("no-such-user-4f2a"), "user");
        let error = ChildUser::resolve("", "no-such-group-4f2a").unwrap_err();
        assert_eq!(error.field(""), "group");
    }

    #[test]
    fn a_bare_number_without_an_entry_needs_a_group() {
        let unlisted = 4_012_345_678;
        let error = ChildUser::resolve(&unlisted.to_string(), "").unwrap_err();
        assert!(matches!(error, ChildUserError::NoGroupOfItsOwn(id) if id == unlisted));
    }
}
