//! The registry among replicas sharing sessions through the store: finding a session wherever
//! it lives (`lookup`) and keeping the views of those another replica owns current (`follow`);
//! a session taken over from a replica that died (`takeover`); an owner that was deposed
//! meanwhile (`fencing`); sessions handed to the others when this replica leaves
//! (`handover`); the sessions serving 2026-07-28 principals, the same on every replica
//! (`correlated`); tokens good for one use, spent once across replicas (`spent`). What one
//! session holds of the store is `session::replica`.

mod correlated;
pub(in crate::session) mod fencing;
mod follow;
mod handover;
mod lookup;
pub(in crate::session) mod spent;
mod takeover;
