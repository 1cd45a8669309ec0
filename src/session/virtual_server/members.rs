//! One session of a virtual server: its members' upstreams, opened when the session is and
//! initialized with the client's `initialize` params, all at once, and what the session sends
//! them. A request is answered here (`ping`), fanned out to every member (`fan_out`) or routed
//! to one (`router`); a notification goes to every member (a cancellation to the one that has
//! the request), and the client's answer to a member's request to that member, under its own
//! id. What the members send comes back through `attribution`. A member that fails fails its
//! own requests with an error naming it; it is opened again when next needed, and the others go
//! on.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::catalog::Catalog;
use super::VirtualServer;
use crate::base::backlog::Backlog;
use crate::session::error_answer::ErrorAnswer;
use crate::session::inflight::MAX_ASKED;
use crate::telemetry::metrics::MemberEvent;
use crate::upstream::credential::Credential;
use crate::upstream::virtual_server::{self, Sending, VirtualSession};
use crate::upstream::{EventSink, Sink, Upstream, UpstreamError, UpstreamEvent};
use crate::wire::jsonrpc::Message;

/// The cancelled requests remembered, for members' late answers.
const CANCELLED_KEPT: usize = 256;

/// The elicitations remembered, for their completions.
const ELICITATIONS_KEPT: usize = 256;

/// An answer to one of the virtual server's own requests.
pub(super) type Answer = oneshot::Sender<Result<Message, UpstreamError>>;

pub struct Members {
    pub(super) server: Arc<VirtualServer>,
    pub(super) me: Weak<Members>,
    /// The session's sink: what the members say, as one server.
    pub(super) events: EventSink,
    pub(super) credential: Credential,
    /// Each member's way in here (its upstream's binding holds it weakly).
    pub(super) sinks: Vec<Arc<MemberSink>>,
    /// One opening or initialization of a member at a time.
    pub(super) gates: Vec<tokio::sync::Mutex<()>>,
    /// One reading of a member's catalog at a time.
    pub(super) catalog_gates: Vec<tokio::sync::Mutex<()>>,
    pub(super) state: Mutex<State>,
    pub(super) next_own: AtomicU64,
    pub(super) released: CancellationToken,
}

/// What the one lock guards.
#[derive(Default)]
pub(super) struct State {
    pub(super) slots: Vec<Slot>,
    /// The client's `initialize` params, with which every member is initialized.
    pub(super) initialize: Option<Box<RawValue>>,
    /// Whether the client said `notifications/initialized` (a member initialized later is told).
    pub(super) client_initialized: bool,
    /// The session's requests sent to a member, by upstream id.
    pub(super) sent: BTreeMap<u64, Sent>,
    /// The virtual server's own requests: their id → the member asked and who waits.
    pub(super) own: HashMap<String, (usize, Answer)>,
    /// The session's requests the client cancelled, the newest last (at most
    /// [`CANCELLED_KEPT`]): a member's late answer to one of its own is dropped quietly.
    pub(super) cancelled: VecDeque<(u64, usize)>,
    /// The URL-mode elicitations members made, by id, the newest last (each member at most its
    /// share of [`ELICITATIONS_KEPT`]): a member completes only its own.
    pub(super) elicitations: VecDeque<(String, usize)>,
    /// Members' questions riding the session's requests, awaiting the client's answer: a
    /// member has at most its share of the questions a session remembers
    /// (`session::inflight::MAX_ASKED` over the members), so that none can use up another's.
    pub(super) questions: Vec<Question>,
    /// The session's subscriptions, by URI: the member that holds each (made again when it
    /// restarts; its `resources/updated` are the only ones of that URI let through).
    pub(super) subscriptions: HashMap<String, usize>,
    /// The violations of each member warned of already (the rest are logged at debug).
    pub(super) warned: HashSet<(usize, &'static str)>,
}

/// One member, in one session.
#[derive(Default)]
pub(super) struct Slot {
    /// `None`: down (it could not be opened, or went away), opened again when next needed.
    pub(super) upstream: Option<Upstream>,
    /// Whether it has answered `initialize`.
    pub(super) initialized: bool,
    /// Going on in the session its server keeps for a session taken over: its
    /// server-to-client stream is opened once the session is bound (at its `initialize`).
    pub(super) linked: bool,
    /// What it answered `initialize`, last time.
    pub(super) result: Option<Value>,
    /// What it serves of resources, once read (until its resources change).
    pub(super) catalog: Option<Arc<Catalog>>,
    /// Counts its resources' changes: a catalog read across one is not kept.
    pub(super) catalog_generation: u64,
    /// Until when what every member is asked passes it over (it left one unanswered).
    pub(super) passed_over_until: Option<tokio::time::Instant>,
}

/// A member's question riding one of the session's requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Question {
    /// Its tagged id, in key form.
    pub(super) id: String,
    pub(super) member: usize,
    /// The request it rides (upstream id).
    pub(super) rides: u64,
}

/// A session's request sent to a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sent {
    pub(super) member: usize,
    /// Its `_meta.progressToken`, in key form.
    pub(super) progress: Option<String>,
}

impl State {
    /// Takes request `n` out of flight, the client having cancelled it.
    pub(super) fn cancel(&mut self, n: u64) -> Option<Sent> {
        let sent = self.sent.remove(&n)?;
        self.questions.retain(|question| question.rides != n);
        if self.cancelled.len() == CANCELLED_KEPT {
            self.cancelled.pop_front();
        }
        self.cancelled.push_back((n, sent.member));
        Some(sent)
    }

    /// Whether request `n` was member `index`'s and cancelled (forgotten now: a second answer
    /// to it is not quiet).
    pub(super) fn forget_cancelled(&mut self, index: usize, n: u64) -> bool {
        let at = self.cancelled.iter().position(|entry| *entry == (n, index));
        at.and_then(|at| self.cancelled.remove(at)).is_some()
    }

    /// Whether member `index`, with `members` in all, may ask one more question riding a
    /// request; if so, its question `id` riding request `rides` is remembered.
    pub(super) fn ask_question(
        &mut self,
        id: String,
        index: usize,
        rides: u64,
        members: usize,
    ) -> bool {
        let share = (MAX_ASKED / members.max(1)).max(1);
        let asked = self.questions.iter().filter(|q| q.member == index).count();
        if asked >= share {
            return false;
        }
        let member = index;
        self.questions.push(Question { id, member, rides });
        true
    }

    /// The client answered (or gave up) the question of tagged id `id` (key form).
    pub(super) fn forget_question(&mut self, id: &str) {
        self.questions.retain(|question| question.id != id);
    }

    /// Member `index`, of `members`, made the URL-mode elicitation `id`: remembered, past its
    /// share of [`ELICITATIONS_KEPT`] in place of its own oldest. Refused (false) when another
    /// member's elicitation has that id: the client could not tell which completes.
    pub(super) fn elicited(&mut self, id: &str, index: usize, members: usize) -> bool {
        if self
            .elicitations
            .iter()
            .any(|(e, m)| e == id && *m != index)
        {
            return false;
        }
        let share = (ELICITATIONS_KEPT / members.max(1)).max(1);
        let own = self
            .elicitations
            .iter()
            .filter(|(_, m)| *m == index)
            .count();
        if own >= share {
            let oldest = self.elicitations.iter().position(|(_, m)| *m == index);
            oldest.and_then(|at| self.elicitations.remove(at));
        }
        self.elicitations.push_back((id.to_owned(), index));
        true
    }

    /// Whether the elicitation `id` member `index` says is complete was its own (forgotten now).
    pub(super) fn completed(&mut self, id: &str, index: usize) -> bool {
        let at = self
            .elicitations
            .iter()
            .position(|(e, m)| e == id && *m == index);
        at.and_then(|at| self.elicitations.remove(at)).is_some()
    }

    /// The newest of the session's requests in flight at member `index` (by upstream id).
    pub(super) fn newest_of(&self, index: usize) -> Option<u64> {
        self.sent
            .iter()
            .filter(|(_, sent)| sent.member == index)
            .map(|(id, _)| *id)
            .max()
    }
}

impl Members {
    pub fn open(
        server: Arc<VirtualServer>,
        credential: Credential,
        events: EventSink,
        resumed: Option<&str>,
    ) -> Arc<Members> {
        let count = server.members.len();
        let members = Arc::new_cyclic(|me: &Weak<Members>| Members {
            sinks: (0..count)
                .map(|index| Arc::new(MemberSink::new(index, me.clone())))
                .collect(),
            gates: (0..count).map(|_| tokio::sync::Mutex::new(())).collect(),
            catalog_gates: (0..count).map(|_| tokio::sync::Mutex::new(())).collect(),
            server,
            me: me.clone(),
            events,
            credential,
            state: Mutex::new(State {
                slots: (0..count).map(|_| Slot::default()).collect(),
                ..State::default()
            }),
            next_own: AtomicU64::new(1),
            released: CancellationToken::new(),
        });
        let resumed: BTreeMap<String, String> = resumed
            .and_then(|record| serde_json::from_str::<Record>(record).ok())
            .map(|record| record.members)
            .unwrap_or_default();
        for index in 0..count {
            let member = members.member_name(index);
            let record = resumed.get(member).map(String::as_str);
            if let Err(error) = members.open_member(index, record) {
                members.warn_down(index, &error);
            }
        }
        members
    }

    /// The sessions the members' servers keep, as the shared store holds them.
    fn record(&self) -> Option<String> {
        let state = self.lock();
        let members: BTreeMap<String, String> = state
            .slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| {
                let record = slot.upstream.as_ref()?.upstream_session_record()?;
                Some((self.member_name(index).to_owned(), record))
            })
            .collect();
        (!members.is_empty())
            .then(|| serde_json::to_string(&Record { members }).unwrap_or_default())
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn member_name(&self, index: usize) -> &str {
        self.server.member_name(index)
    }

    pub(super) fn count(&self) -> usize {
        self.server.members.len()
    }

    /// `cause`, naming member `index` (unless it names one already).
    pub(super) fn member_error(&self, index: usize, cause: UpstreamError) -> UpstreamError {
        match cause {
            named @ UpstreamError::Member { .. } => named,
            cause => UpstreamError::Member {
                member: self.member_name(index).to_owned(),
                cause: Box::new(cause),
            },
        }
    }

    /// Counts and logs member `index` down (the first time in the session as a warning, the
    /// rest at debug level).
    pub(super) fn warn_down(&self, index: usize, error: &UpstreamError) {
        let (server, member) = (&self.server.name, self.member_name(index));
        self.server.metrics.member(member, MemberEvent::Down);
        match self.first_warning(index, "down") {
            true => {
                warn!(%server, %member, %error, "a member of the virtual server is down for this session; it is tried again when next needed (more of it at debug level)")
            }
            false => debug!(%server, %member, %error, "a member of the virtual server is down"),
        }
    }

    /// Whether member `index` has not been warned of `kind` yet in this session (it is now).
    pub(super) fn first_warning(&self, index: usize, kind: &'static str) -> bool {
        self.lock().warned.insert((index, kind))
    }

    pub(super) fn deliver(&self, event: UpstreamEvent) {
        self.events.deliver(event);
    }

    pub(super) fn answer(&self, id: &Value, result: Value) {
        let answer = Message::response(id, result);
        self.deliver(UpstreamEvent::Message(Box::new(answer)));
    }

    pub(super) fn refuse(&self, id: &Value, refusal: ErrorAnswer) {
        match Message::parse(refusal.to_response(id)) {
            Ok(message) => self.deliver(UpstreamEvent::Message(Box::new(message))),
            Err(error) => debug!(%error, "an error answer that does not parse"),
        }
    }

    fn release_with(&self, let_go: impl Fn(&Upstream)) {
        self.released.cancel();
        let upstreams: Vec<Upstream> = {
            let mut state = self.lock();
            state.own.clear();
            state
                .slots
                .iter_mut()
                .filter_map(|slot| slot.upstream.take())
                .collect()
        };
        upstreams.iter().for_each(let_go);
    }
}

impl VirtualSession for Members {
    fn send(&self, mut message: Message) -> Sending<'_> {
        // The usual call, every member up: routed here, its future no larger than the send.
        if let Some((index, upstream)) = self.route_at_once(&mut message) {
            self.send_routed(index, upstream, message);
            return Box::pin(std::future::ready(Ok(())));
        }
        Box::pin(self.take(message))
    }

    fn release(&self) {
        self.release_with(Upstream::release);
    }

    fn detach(&self) {
        self.release_with(Upstream::detach);
    }

    fn record(&self) -> Option<String> {
        Members::record(self)
    }
}

/// What opens a virtual server's sessions: their members.
impl virtual_server::VirtualServer for Arc<VirtualServer> {
    fn open(
        &self,
        credential: Credential,
        events: EventSink,
        resumed: Option<&str>,
    ) -> Arc<dyn VirtualSession> {
        Members::open(self.clone(), credential, events, resumed)
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

/// A member's way into its session's members.
pub struct MemberSink {
    index: usize,
    members: Weak<Members>,
}

impl MemberSink {
    fn new(index: usize, members: Weak<Members>) -> MemberSink {
        MemberSink { index, members }
    }
}

impl Sink for MemberSink {
    fn deliver(&self, event: UpstreamEvent) {
        if let Some(members) = self.members.upgrade() {
            members.on_member(self.index, event);
        }
    }

    fn backlog(&self) -> Option<Arc<Backlog>> {
        self.members.upgrade()?.events.backlog()
    }
}

/// What the shared store holds of a virtual server's session: the session each member's
/// server keeps, by member.
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    members: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_request_of_a_member_is_its_own() {
        let mut state = State::default();
        for (id, member) in [(1, 0), (2, 1), (3, 0), (4, 1)] {
            let sent = Sent {
                member,
                progress: None,
            };
            state.sent.insert(id, sent);
        }
        assert_eq!(state.newest_of(0), Some(3));
        assert_eq!(state.newest_of(1), Some(4));
        assert_eq!(state.newest_of(2), None);
    }
}
