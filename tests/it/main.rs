//! The integration tests, one binary: the real proxy (in process or as its binary) over real
//! sockets, with real peers, grouped by the layer or topic they check. `harness` is what they
//! share.

mod harness;

mod auth;
mod cluster;
mod front;
mod harness_checks;
mod operations;
mod peers;
mod session;
mod upstream;
