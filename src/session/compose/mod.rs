//! Virtual servers: several servers composed into one, with sessions. A session of a virtual
//! server has one upstream session per member (each built by the member's own factory, so a
//! member is reached as its own server is), and sees them as one server: `initialize` answered
//! for all, lists merged under composed names, each request routed to the member it names, and
//! what any member says reaching the one session (its replay window, resume and takeover as
//! for any server). This module is the upstream that session holds (`upstream::composed`).

mod composition;
mod merge;
mod names;
mod params;

use std::sync::Arc;
use std::time::Duration;

pub use names::MemberNames;

use crate::telemetry::metrics::ServerMetrics;
use crate::upstream::composed::{Compose, Composed};
use crate::upstream::credential::Credential;
use crate::upstream::factory::UpstreamFactory;
use crate::upstream::EventSink;

/// One member of a virtual server: its rules and the factory of its upstreams.
pub struct Member {
    pub names: MemberNames,
    pub factory: Arc<UpstreamFactory>,
}

/// A virtual server: its name, its members in order (the first wins a name two offer), and
/// how their names are composed.
pub struct Composer {
    name: String,
    separator: String,
    members: Vec<Member>,
    /// How long a member has to answer what the virtual server asks it itself (`initialize`,
    /// the lists).
    request_timeout: Duration,
    /// The virtual server's figures (its members' are labelled with their names).
    metrics: Arc<ServerMetrics>,
}

impl Composer {
    pub fn new(
        name: &str,
        separator: &str,
        members: Vec<Member>,
        request_timeout: Duration,
        metrics: Arc<ServerMetrics>,
    ) -> Composer {
        Composer {
            name: name.to_owned(),
            separator: separator.to_owned(),
            members,
            request_timeout,
            metrics,
        }
    }
}

impl Composer {
    /// The virtual server as a session's upstream is configured.
    pub fn spec(self) -> crate::upstream::UpstreamSpec {
        let compose: Arc<dyn Compose> = Arc::new(Arc::new(self));
        crate::upstream::UpstreamSpec::Composed(crate::upstream::composed::ComposedSpec::new(
            compose,
        ))
    }
}

impl Compose for Arc<Composer> {
    fn start(
        &self,
        credential: Credential,
        events: EventSink,
        resumed: Option<&str>,
    ) -> Arc<dyn Composed> {
        composition::Composition::start(self.clone(), credential, events, resumed)
    }

    fn display(&self) -> String {
        let members: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{} ({})", m.names.name, m.factory.display()))
            .collect();
        format!("{}: {}", self.name, members.join(", "))
    }
}
