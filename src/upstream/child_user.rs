//! The user and group a stdio child runs as (`upstream.user`, `upstream.group`: names or
//! numeric ids), or a user of its own for each child from a range of ids
//! (`upstream.user_range`), resolved at start. The child gets that user id, that group id and
//! no supplementary groups; only a proxy that may switch users and stop what runs as them
//! (CAP_SETUID, CAP_SETGID and CAP_KILL, as root has) runs children so, and one that may not
//! stops at start instead of running them as itself.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

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
         capabilities, or set none of user, group and user_range: children then run as the \
         proxy's user)"
    )]
    NotPermitted { uid: u32 },
    #[error("cannot tell whether the proxy may switch users (/proc/self/status): {0}")]
    Capabilities(String),
    #[error("{0:?} is not a range of user ids FIRST-LAST, from 1, FIRST at most LAST")]
    NotARange(String),
    #[error("the range holds user id {0}, the proxy's own: a child would run as the proxy")]
    RangeHoldsProxy(u32),
    #[error("user and user_range: one or the other")]
    UserAndRange,
}

impl ChildUserError {
    /// The key at fault: `user`, `group` or `user_range`, with `user` and `range` as set.
    pub fn field(&self, user: &str, range: &str) -> &'static str {
        match self {
            ChildUserError::NotARange(_)
            | ChildUserError::RangeHoldsProxy(_)
            | ChildUserError::UserAndRange => "user_range",
            ChildUserError::NotPermitted { .. } | ChildUserError::Capabilities(_)
                if !range.is_empty() =>
            {
                "user_range"
            }
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

/// Who a server's children run as: one user for all, or each a user of its own.
#[derive(Debug, Clone)]
pub enum RunAs {
    User(ChildUser),
    Range(Arc<UserRange>),
}

impl RunAs {
    /// Who children run as with `user`, `group` and `range` (empty: unset); `None` when all
    /// are unset. Fails where the proxy may not switch.
    pub fn resolve(user: &str, group: &str, range: &str) -> Result<Option<RunAs>, ChildUserError> {
        if range.is_empty() {
            return Ok(ChildUser::resolve(user, group)?.map(RunAs::User));
        }
        if !user.is_empty() {
            return Err(ChildUserError::UserAndRange);
        }
        let (first, last) = parse_range(range)?;
        let own = Uid::effective().as_raw();
        if (first..=last).contains(&own) {
            return Err(ChildUserError::RangeHoldsProxy(own));
        }
        let gid = match group {
            "" => None,
            name => Some(find_group(name)?),
        };
        may_switch()?;
        Ok(Some(RunAs::Range(Arc::new(UserRange::new(
            first, last, gid,
        )))))
    }

    /// The user the next child runs as; from a range, held for it until the lease is dropped.
    pub fn take(&self) -> Result<(ChildUser, Option<UserLease>), RangeInUse> {
        match self {
            RunAs::User(user) => Ok((*user, None)),
            RunAs::Range(range) => range.take(),
        }
    }
}

/// `FIRST-LAST`, user ids from 1.
fn parse_range(text: &str) -> Result<(u32, u32), ChildUserError> {
    let not_a_range = || ChildUserError::NotARange(text.to_owned());
    let (first, last) = text.split_once('-').ok_or_else(not_a_range)?;
    let id = |s: &str| s.trim().parse::<u32>().map_err(|_| not_a_range());
    let (first, last) = (id(first)?, id(last)?);
    if first == 0 || first > last || last == u32::MAX {
        return Err(not_a_range());
    }
    Ok((first, last))
}

/// User ids handed to children one each (`upstream.user_range`), taken in turn, so an id just
/// let go is the last to be given again.
#[derive(Debug)]
pub struct UserRange {
    first: u32,
    last: u32,
    /// The children's group: `upstream.group`, else each its user id as group id.
    gid: Option<u32>,
    /// Where the next search begins.
    next: Mutex<u32>,
}

/// The ids of every range held by a running child, whichever server's range gave it: no two
/// children of this proxy share one, though two servers' ranges overlap (or one server's spec
/// is built twice, as a server of its own and as a virtual server's member).
static RUNNING: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

fn running() -> std::sync::MutexGuard<'static, BTreeSet<u32>> {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every id of the range is held by a running child.
#[derive(Debug, thiserror::Error)]
#[error("every user id of upstream.user_range {first}-{last} runs a child")]
pub struct RangeInUse {
    first: u32,
    last: u32,
}

impl UserRange {
    fn new(first: u32, last: u32, gid: Option<u32>) -> UserRange {
        UserRange {
            first,
            last,
            gid,
            next: Mutex::new(first),
        }
    }

    fn take(&self) -> Result<(ChildUser, Option<UserLease>), RangeInUse> {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let mut running = running();
        let start = (*next).clamp(self.first, self.last);
        let free = (start..=self.last)
            .chain(self.first..start)
            .find(|id| !running.contains(id));
        let Some(uid) = free else {
            return Err(RangeInUse {
                first: self.first,
                last: self.last,
            });
        };
        running.insert(uid);
        *next = uid.saturating_add(1);
        let user = ChildUser {
            uid,
            gid: self.gid.unwrap_or(uid),
        };
        Ok((user, Some(UserLease { uid })))
    }
}

/// A user id of a range held by one child; given back when dropped (the child ended).
#[derive(Debug)]
pub struct UserLease {
    uid: u32,
}

impl Drop for UserLease {
    fn drop(&mut self) {
        running().remove(&self.uid);
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
        assert_eq!(error.field("no-such-user-4f2a", ""), "user");
        let error = ChildUser::resolve("", "no-such-group-4f2a").unwrap_err();
        assert_eq!(error.field("", ""), "group");
        // A proxy that may not switch users is told so under the key it set.
        let not_permitted = ChildUserError::NotPermitted { uid: 1000 };
        assert_eq!(not_permitted.field("", "100000-100999"), "user_range");
        assert_eq!(not_permitted.field("", ""), "group");
        assert_eq!(not_permitted.field("mcp", ""), "user");
    }

    #[test]
    fn a_range_gives_each_child_an_id_of_its_own_and_takes_it_back() {
        let range = UserRange::new(70_000, 70_002, None);
        let (a, lease_a) = range.take().unwrap();
        let (b, _lease_b) = range.take().unwrap();
        let (c, _lease_c) = range.take().unwrap();
        assert_eq!([a.uid, b.uid, c.uid], [70_000, 70_001, 70_002]);
        assert_eq!(a.gid, a.uid, "its own id as its group");
        assert!(range.take().is_err(), "every id runs a child");
        drop(lease_a);
        let (again, _) = range.take().unwrap();
        assert_eq!(again.uid, 70_000, "the id let go");
    }

    #[test]
    fn two_ranges_over_the_same_ids_never_give_one_to_two_children() {
        // As two servers with overlapping ranges, or one server's spec built twice.
        let a = UserRange::new(71_000, 71_001, None);
        let b = UserRange::new(71_000, 71_002, None);
        let (first, _held) = a.take().unwrap();
        let (second, _held_too) = b.take().unwrap();
        let (third, _held_three) = b.take().unwrap();
        let mut ids = [first.uid, second.uid, third.uid];
        ids.sort();
        assert_eq!(ids, [71_000, 71_001, 71_002]);
        assert!(a.take().is_err(), "both of a's ids run children of b's too");
    }

    #[test]
    fn a_range_is_checked() {
        for bad in ["", "5", "0-3", "9-3", "a-b", "1-4294967295"] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_range("100000-100999").unwrap(), (100_000, 100_999));
        let both = RunAs::resolve("nobody", "", "100000-100999").unwrap_err();
        assert_eq!(both.field("nobody", "100000-100999"), "user_range");
    }

    #[test]
    fn a_bare_number_without_an_entry_needs_a_group() {
        let unlisted = 4_012_345_678;
        let error = ChildUser::resolve(&unlisted.to_string(), "").unwrap_err();
        assert!(matches!(error, ChildUserError::NoGroupOfItsOwn(id) if id == unlisted));
    }
}
