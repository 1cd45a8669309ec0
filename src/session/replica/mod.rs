//! Replicas sharing sessions through the store: an owned session's record and log mirrored for
//! the others (`mirror`); finding a session wherever it lives (`lookup`); views of sessions
//! another replica owns (`view`) and keeping them current (`follow`); a session taken over from
//! a replica that died (`takeover`); what the fronts know of the replicas (`cluster`); the
//! sessions serving 2026-07-28 principals, the same on every replica (`correlated`); tokens
//! good for one use, spent once across replicas (`spent`). The
//! hop's wire format is `crate::hop`; its client is `upstream::owner`, its server
//! `front::internal`.

pub mod cluster;
mod correlated;
mod follow;
mod lookup;
mod mirror;
pub(in crate::session) mod spent;
mod takeover;
mod view;
