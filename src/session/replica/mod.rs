//! Replicas sharing sessions through the store: an owned session's record and log mirrored for
//! the others (`mirror`); finding a session wherever it lives (`lookup`); views of sessions
//! another replica owns (`view`) and keeping them current (`follow`); a session taken over from
//! a replica that died (`takeover`); an owner that was deposed meanwhile (`fencing`); sessions
//! handed to the others when this replica leaves (`handover`); what the fronts know of the
//! replicas (`cluster`); the sessions serving 2026-07-28 principals, the same on every replica
//! (`correlated`); tokens good for one use, spent once across replicas (`spent`); what the
//! store holds of the server's side of a session, for a new owner to go on in it
//! (`server_side`). The hop's wire format is `crate::hop`; its client is `upstream::owner`,
//! its server `front::internal`.

use crate::store::{Mirror, Op};

pub mod cluster;
mod correlated;
pub(in crate::session) mod fencing;
mod follow;
mod handover;
mod lookup;
mod mirror;
pub(in crate::session) mod server_side;
pub(in crate::session) mod spent;
mod takeover;
mod view;

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
