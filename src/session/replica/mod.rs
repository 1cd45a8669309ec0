//! Replicas sharing sessions through the store: the session's record and log mirrored for the
//! others (`mirror`), views of sessions another replica owns (`view`), a session taken over from
//! a replica that died (`takeover`), and what the fronts know of the replicas (`cluster`).

pub mod cluster;
mod mirror;
mod takeover;
mod view;
