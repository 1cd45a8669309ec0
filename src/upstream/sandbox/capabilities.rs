//! A child's capabilities: none, whoever it runs as (root included), but those
//! `upstream.capabilities` names. Kept ones stay through `execve` (inheritable and ambient);
//! the bounding set is cut to them where this process may, and `no_new_privs` (set after)
//! keeps a root child from regaining the rest at `execve` either way. A child of another user
//! has none to keep (switching users drops them).

use caps::{CapSet, Capability, CapsHashSet};

use super::SandboxError;

/// A capability by name: `CAP_NET_BIND_SERVICE` or `net_bind_service`.
pub fn parse(name: &str) -> Result<Capability, SandboxError> {
    caps::to_canonical(name)
        .parse()
        .map_err(|_| SandboxError::NotACapability(name.to_owned()))
}

/// Whether this process may cut its children's bounding set (it holds CAP_SETPCAP).
pub fn may_cut_bounding_set() -> bool {
    caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false)
}

/// Drops every capability of this process but those `names` names (and this process holds).
pub(super) fn keep_only(names: &[String]) -> Result<(), SandboxError> {
    let failed = |e: caps::errors::CapsError| SandboxError::Capabilities(e.to_string());
    let named: CapsHashSet = names.iter().map(|n| parse(n)).collect::<Result<_, _>>()?;
    let permitted = caps::read(None, CapSet::Permitted).map_err(failed)?;
    let keep: CapsHashSet = named.intersection(&permitted).copied().collect();
    // The bounding set first, while CAP_SETPCAP is still effective.
    if permitted.contains(&Capability::CAP_SETPCAP) {
        for capability in caps::all().difference(&keep) {
            if caps::has_cap(None, CapSet::Bounding, *capability).map_err(failed)? {
                caps::drop(None, CapSet::Bounding, *capability).map_err(failed)?;
            }
        }
    }
    // Effective before permitted (it may not exceed it), inheritable and ambient last.
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
        caps::set(None, set, &keep).map_err(failed)?;
    }
    caps::clear(None, CapSet::Ambient).map_err(failed)?;
    for capability in &keep {
        caps::raise(None, CapSet::Ambient, *capability).map_err(failed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_named_either_way() {
        assert_eq!(
            parse("net_bind_service").unwrap(),
            Capability::CAP_NET_BIND_SERVICE
        );
        assert_eq!(parse("CAP_NET_RAW").unwrap(), Capability::CAP_NET_RAW);
        assert!(parse("cap_fly").is_err());
    }
}
