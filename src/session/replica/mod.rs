//! What one session holds of the store that replicas share: where it records itself
//! (`Replicated`: its mirror, or whether it is a view), what the store holds of the server's
//! side of it, for a new owner to go on in it (`server_side`), and what the fronts know of the
//! replicas (`cluster`). The state written to and read from the store is `state::record`; the
//! registry's side (finding, following, taking over, handing over) is
//! `session::registry::replica`. The hop's wire format is `crate::hop`; its client is
//! `upstream::owner`, its server `front::internal`.

use crate::store::{Mirror, Op};

pub mod cluster;
pub(in crate::session) mod server_side;

/// The session's state as one of several replicas sees it.
#[derive(Debug, Default)]
pub(super) struct Replicated {
    /// Where the session records itself for other replicas (a shared store only).
    pub(super) mirror: Option<Box<Mirror>>,
    /// Another replica owns the session; this log is a copy of the shared one.
    pub(super) view: bool,
    /// A view: the newest position its owner reported (this copy may not have it yet).
    pub(super) owner_head: u64,
    /// A view: how far the shared log has been read (what came with hops may be further).
    pub(super) followed_through: u64,
}

impl Replicated {
    /// Records an op in the shared store, if there is one (the op is built only then).
    pub(super) fn record(&self, op: impl FnOnce() -> Op) {
        if let Some(mirror) = &self.mirror {
            mirror.send(op());
        }
    }

    /// Whether the session is written to a shared store.
    pub(super) fn shared(&self) -> bool {
        self.mirror.is_some()
    }
}
