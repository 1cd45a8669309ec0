//! Virtual servers: several servers behind one endpoint, with sessions. A virtual server is a
//! group of members and a router: a session of it holds one upstream per member (each built
//! by the member's own factory, so a member is reached as its own server is) and is one server
//! to its session. A request goes to one member (`router`: a tool or prompt by its name, a
//! resource by the first member that lists it or a template of it, a completion by its
//! reference), or to all (`fan_out`: `initialize`, the lists, `logging/setLevel`) and their
//! answers are merged (`merge`). Whether a client may reach a thing on a member is decided in
//! one place (`rules`), for every route.
//!
//! Each member is a party of its own, possibly hostile: what it sends is attributed to it where
//! its upstream hands it over (`attribution`), and it can answer, report progress on, cancel
//! or ask only within its own requests. The session's part of the state (`members`: each
//! member's upstream, its own requests in flight, the subscriptions it holds) is this module's;
//! in-flight requests, replay and resume are the session's, as for any server.

mod attribution;
mod catalog;
mod catalog_reading;
mod fan_out;
mod from_client;
mod ids;
mod lifecycle;
mod members;
mod merge;
mod names;
mod params;
mod router;
mod rules;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

pub use names::MemberNames;

use crate::session::log::Window;
use crate::telemetry::metrics::ServerMetrics;
use crate::upstream::factory::UpstreamFactory;
use crate::upstream::UpstreamSpec;

/// One member of a virtual server: its rules, the factory of its upstreams, and how long it
/// has to answer what the virtual server asks it itself (`initialize`, the lists: its own
/// `upstream.request_timeout`).
pub struct Member {
    pub names: MemberNames,
    pub factory: Arc<UpstreamFactory>,
    pub request_timeout: Duration,
}

/// A virtual server as configured: its name, its members in order (the first wins a name or a
/// URI two offer), and how their names are composed.
pub struct VirtualServer {
    name: String,
    separator: String,
    members: Vec<Member>,
    /// The most of a merged answer one member's part may take, in bytes: half the session's
    /// replay window, shared by the members, so that a merged answer always fits the window.
    share: usize,
    /// The virtual server's figures (its members' are labelled with their names).
    metrics: Arc<ServerMetrics>,
}

impl VirtualServer {
    /// A virtual server of `members`, its sessions keeping `window`.
    pub fn new(
        name: &str,
        separator: &str,
        members: Vec<Member>,
        window: Window,
        metrics: Arc<ServerMetrics>,
    ) -> VirtualServer {
        VirtualServer {
            name: name.to_owned(),
            separator: separator.to_owned(),
            share: window.max_bytes / (2 * members.len().max(1)),
            members,
            metrics,
        }
    }

    /// The virtual server as a session's upstream is configured.
    pub fn spec(self) -> UpstreamSpec {
        UpstreamSpec::Virtual(Arc::new(Arc::new(self)))
    }

    pub(super) fn member_name(&self, index: usize) -> &str {
        &self.members[index].names.name
    }
}
