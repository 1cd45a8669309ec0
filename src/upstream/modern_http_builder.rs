//! The 2026-07-28 HTTP upstream a session gets once its server speaks that revision: built for
//! new sessions, and for a legacy session whose `initialize` the server refused naming it (the
//! legacy upstream hands the session over).

use std::sync::Arc;

use super::era_switch::EraSwitch;
use super::http_client::{HttpClient, HttpSpec};
use super::modern::http::ModernHttp;
use super::modern::Bridge;
use super::{EventSink, Upstream};
use crate::upstream::credential::Credential;
use crate::wire::mirrored::ToolMarks;

/// Builds the upstream of a session with a 2026-07-28 HTTP server (behind a bridge): for new
/// sessions once the server speaks it, and for a legacy session's upstream whose `initialize`
/// the server refused naming 2026-07-28 (`HttpUpstream` hands over to it).
pub struct ModernHttpBuilder {
    pub spec: HttpSpec,
    pub client: HttpClient,
    /// The client's credential (sent only when the server's spec forwards it).
    pub credential: Credential,
    pub tool_marks: Arc<ToolMarks>,
    pub era: Arc<EraSwitch>,
}

impl ModernHttpBuilder {
    /// The revision switch of the server this builds for.
    pub fn era(&self) -> &EraSwitch {
        &self.era
    }

    pub fn build(&self, events: EventSink) -> Upstream {
        let bridge = Bridge::new(events, self.tool_marks.clone());
        let server = ModernHttp::start(
            &self.spec,
            self.client.clone(),
            bridge.clone(),
            self.credential.clone(),
            self.tool_marks.clone(),
            Some(self.era.clone()),
        );
        Upstream::Modern(bridge.attach(Upstream::ModernHttp(server)))
    }
}
