//! What a member sends, attributed to it from where its upstream hands it over, and held to
//! what it may speak of: an answer only to a request sent to it (the session's, by its upstream
//! id, or the virtual server's own); progress only on a token of its own requests; a
//! `resources/updated` only for a URI the session subscribed to at that member. Anything else
//! is dropped, counted (`mcp_proxy_virtual_member_violations_total{server,member,kind}`) and
//! logged with the member's name. Its requests (sampling, elicitation, roots), log messages and
//! cancellations ride only a stream of its own request in flight, or the standalone stream;
//! its requests go under ids tagged with it (`<index>~<id>`), name it in `_meta`, and an
//! elicitation's message begins with its name.

use serde_json::Value;
use tracing::{debug, warn};

use super::ids::{tag, OWN};
use super::members::Members;
use super::merge;
use crate::upstream::{UpstreamError, UpstreamEvent};
use crate::wire::jsonrpc::{self, id_key, Kind, Message, METHOD_NOT_FOUND};
use crate::wire::methods;

/// Where a member's request names the member, in its `_meta`.
pub const MEMBER_META_KEY: &str = "mcp-session-proxy/member";

/// The requests a member may make of the client.
const MEMBER_REQUESTS: [&str; 4] = [
    methods::SAMPLING_CREATE_MESSAGE,
    methods::ELICITATION_CREATE,
    methods::ROOTS_LIST,
    methods::PING,
];

/// What a member sent that was not its own to send: the `kind` of the violations counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Violation {
    /// An answer to a request it was not sent (another member's, or none).
    Answer,
    /// Progress on another member's request.
    Progress,
    /// A `resources/updated` of a URI the session did not subscribe to at that member.
    Update,
    /// A notification a member may not send: one of the client's, of tasks (which are not
    /// routed to members), of another's elicitation, or of no known method.
    Notification,
    /// A request a member may not make of the client: any but sampling, elicitation, roots and
    /// ping, or one of those as a task, or with an id (or an elicitation's) over
    /// [`MAX_ID_BYTES`], or an elicitation under another member's id.
    Request,
    /// An item of a list a client could not read (a tool without an input schema object).
    List,
}

/// The longest id (in its JSON form) of a member's request, and of an elicitation it makes,
/// that a session remembers: each is kept until answered or completed.
pub const MAX_ID_BYTES: usize = 256;

impl Violation {
    pub fn label(self) -> &'static str {
        match self {
            Violation::Answer => "answer",
            Violation::Progress => "progress",
            Violation::Update => "update",
            Violation::Notification => "notification",
            Violation::Request => "request",
            Violation::List => "list",
        }
    }
}

impl Members {
    pub(super) fn on_member(&self, index: usize, event: UpstreamEvent) {
        match event {
            UpstreamEvent::Message(message) | UpstreamEvent::Within { message, .. } => {
                self.heard(index, *message)
            }
            UpstreamEvent::Oversized { id, max } => {
                // Its id was read from what the member wrote.
                let Some(id) = id else { return };
                let cause = UpstreamError::Oversized(max);
                if self.answered(index, &id, Err(cause), true) {
                    self.deliver(UpstreamEvent::Oversized { id: Some(id), max });
                }
            }
            UpstreamEvent::Failed { id, cause } => {
                // Its upstream's own report, of a request it sent.
                let cause = self.member_error(index, cause);
                if self.answered(index, &id, Err(cause.clone()), false) {
                    self.deliver(UpstreamEvent::Failed { id, cause });
                }
            }
            UpstreamEvent::AnswersLost(cause) => self.fail_member(index, cause, false),
            UpstreamEvent::Exited(cause) => self.fail_member(index, cause, true),
            UpstreamEvent::SessionLost => {
                if let Some(me) = self.me.upgrade() {
                    tokio::spawn(async move { me.reestablish(index).await });
                }
            }
        }
    }

    fn heard(&self, index: usize, message: Message) {
        match message.kind() {
            Kind::Response => {
                let own = message.id().and_then(Value::as_str);
                if let Some(own) = own.filter(|id| id.starts_with(OWN)).map(str::to_owned) {
                    if !self.settle(index, &own, Ok(message)) {
                        self.violated(index, Violation::Answer, &own);
                    }
                } else if self.sent_to(index, message.id(), true) {
                    self.deliver(UpstreamEvent::Message(Box::new(message)));
                }
            }
            Kind::Request => self.asked(index, message),
            Kind::Notification => self.notified(index, message),
        }
    }

    /// Member `index`'s upstream failed `id`: `true` when it is the session's request sent to
    /// that member, which the session is to hear of now; one of the virtual server's own goes
    /// to who waits for it. `counted`: the id came from what the member wrote, and any other
    /// is its violation.
    fn answered(
        &self,
        index: usize,
        id: &Value,
        failure: Result<Message, UpstreamError>,
        counted: bool,
    ) -> bool {
        match id.as_str().filter(|id| id.starts_with(OWN)) {
            Some(own) => {
                if !self.settle(index, own, failure) && counted {
                    self.violated(index, Violation::Answer, own);
                }
                false
            }
            None => self.sent_to(index, Some(id), counted),
        }
    }

    /// Whether `id` is the session's request sent to member `index` and still in flight there,
    /// taken out of flight if so. An answer to another member's, or to none, is a violation
    /// (`counted`); one to a request of its own the client cancelled is dropped quietly.
    fn sent_to(&self, index: usize, id: Option<&Value>, counted: bool) -> bool {
        let n = id.and_then(Value::as_u64);
        let (ours, cancelled) = {
            let mut state = self.lock();
            match n.map(|n| (n, state.sent.remove(&n))) {
                Some((n, Some(sent))) if sent.member == index => {
                    state.questions.retain(|question| question.rides != n);
                    (true, false)
                }
                Some((n, Some(sent))) => {
                    // Another member's: still in flight there.
                    state.sent.insert(n, sent);
                    (false, false)
                }
                Some((n, None)) => (false, state.forget_cancelled(index, n)),
                None => (false, false),
            }
        };
        if !ours && !cancelled && counted {
            let what = id.map(id_key).unwrap_or_default();
            self.violated(index, Violation::Answer, &what);
        }
        ours
    }

    /// A request of member `index`'s: under its tagged id, naming it, on a stream of its own.
    /// Only what a server may ask a client (sampling, elicitation, roots, ping), and not as a
    /// task (tasks are not routed to members: a client's task store is one for all of them);
    /// anything else is refused to the member and counted.
    fn asked(&self, index: usize, mut message: Message) {
        let own = message.id().cloned().unwrap_or(Value::Null);
        let mut params = object_params(&message);
        let method = message.method().unwrap_or_default().to_owned();
        let elicitation = params["elicitationId"].as_str().map(str::to_owned);
        let too_long = id_key(&own).len() > MAX_ID_BYTES
            || elicitation
                .as_ref()
                .is_some_and(|id| id.len() > MAX_ID_BYTES);
        if !MEMBER_REQUESTS.contains(&method.as_str()) || params.get("task").is_some() || too_long {
            self.violated(index, Violation::Request, &method);
            return self.refuse_member(index, own, &method);
        }
        message.set_id(tag(index, &own));
        let member = self.member_name(index);
        if message.method() == Some(methods::ELICITATION_CREATE) {
            let text = match &params["message"] {
                Value::String(text) => text.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            params["message"] = Value::from(merge::in_its_name(member, &text));
            if let Some(elicitation) = &elicitation {
                let count = self.count();
                if !self.lock().elicited(elicitation, index, count) {
                    self.violated(index, Violation::Request, elicitation);
                    return self.refuse_member(index, own, &method);
                }
            }
        }
        let request = {
            let mut state = self.lock();
            let count = self.count();
            let id = message.id().map(id_key).unwrap_or_default();
            // Past its share of the questions a session remembers, it asks on the standalone
            // stream: its question holds no request's wait, and uses up no other's share.
            state
                .newest_of(index)
                .filter(|rides| state.ask_question(id, index, *rides, count))
        };
        self.deliver(stamped(message, params, member, request));
    }

    /// A notification of member `index`'s: one a server may send, of its own requests, naming
    /// it; any other is dropped and counted.
    fn notified(&self, index: usize, message: Message) {
        let method = message.method().unwrap_or_default().to_owned();
        let mut params = object_params(&message);
        let request = match method.as_str() {
            methods::PROGRESS => {
                let token = id_key(&params["progressToken"]);
                match self.progress_of(index, &token) {
                    Ok(request) => Some(request),
                    Err(Some(_)) => return self.violated(index, Violation::Progress, &token),
                    Err(None) => return debug!(%token, "progress of no request in flight; dropped"),
                }
            }
            methods::RESOURCES_UPDATED => {
                let uri = params["uri"].as_str().unwrap_or_default();
                if self.lock().subscriptions.get(uri) != Some(&index) {
                    return self.violated(index, Violation::Update, uri);
                }
                None
            }
            methods::ELICITATION_COMPLETE => {
                let elicitation = params["elicitationId"].as_str().unwrap_or_default();
                if !self.lock().completed(elicitation, index) {
                    return self.violated(index, Violation::Notification, &method);
                }
                None
            }
            // A member cancels a request of its own: under the id the client knows it by. The
            // question stays in its share for as long as the session remembers it (until the
            // client answers, or the request it rides ends).
            methods::CANCELLED => {
                params["requestId"] = tag(index, &params["requestId"]);
                self.lock().newest_of(index)
            }
            // A log message names its member in its logger too.
            methods::MESSAGE => {
                let member = self.member_name(index);
                params["logger"] = Value::from(match params["logger"].as_str() {
                    Some(logger) => format!("{member}/{logger}"),
                    None => member.to_owned(),
                });
                self.lock().newest_of(index)
            }
            methods::TOOLS_LIST_CHANGED | methods::PROMPTS_LIST_CHANGED => None,
            methods::RESOURCES_LIST_CHANGED => {
                self.forget_catalog(index);
                None
            }
            // Tasks are not routed to members, and a client's notifications are not a server's.
            _ => return self.violated(index, Violation::Notification, &method),
        };
        self.deliver(stamped(message, params, self.member_name(index), request));
    }

    /// Answers member `index`'s request `id` of `method` with a refusal: not something a
    /// virtual server's member may ask.
    fn refuse_member(&self, index: usize, id: Value, method: &str) {
        let upstream = self.lock().slots[index].upstream.clone();
        let Some(upstream) = upstream else {
            return;
        };
        let text = format!("Method not found: {method} (a virtual server's member may ask the client for sampling, elicitation and roots, not as tasks)");
        let refusal = jsonrpc::error_response(&id, METHOD_NOT_FOUND, &text, None);
        let Ok(refusal) = Message::parse(refusal) else {
            return;
        };
        self.hand_over(upstream, refusal, |error| {
            debug!(%error, "a refusal did not reach its member");
        });
    }

    /// The request of member `index`'s that progress token `token` belongs to; `Err(Some(m))`
    /// when it is member `m`'s, `Err(None)` when no request in flight has it.
    fn progress_of(&self, index: usize, token: &str) -> Result<u64, Option<usize>> {
        let state = self.lock();
        let mut other = None;
        for (id, sent) in &state.sent {
            if sent.progress.as_deref() == Some(token) {
                match sent.member == index {
                    true => return Ok(*id),
                    false => other = Some(sent.member),
                }
            }
        }
        Err(other)
    }

    /// Member `index`'s resources changed: what it serves is read again when next needed.
    pub(super) fn forget_catalog(&self, index: usize) {
        let mut state = self.lock();
        let slot = &mut state.slots[index];
        slot.catalog = None;
        slot.catalog_generation += 1;
    }

    /// Counts and logs what member `index` sent that was not its own (`what`: the id, token or
    /// URI it named): the first of each kind per session as a warning, the rest at debug.
    pub(super) fn violated(&self, index: usize, violation: Violation, what: &str) {
        let (server, member) = (&self.server.name, self.member_name(index));
        self.server
            .metrics
            .member_violation(member, violation.label());
        let first = self.first_warning(index, violation.label());
        let kind = violation.label();
        match first {
            true => {
                warn!(%server, %member, kind, %what, "a member of the virtual server sent what is not its own to send: dropped (more from it are logged at debug)")
            }
            false => debug!(%server, %member, kind, %what, "a member's violation: dropped"),
        }
    }
}

/// `message` with `params`, naming `member` in their `_meta` (whatever the member wrote there),
/// riding `request` (the upstream id of one of its member's requests; none: the standalone
/// stream).
fn stamped(
    mut message: Message,
    mut params: Value,
    member: &str,
    request: Option<u64>,
) -> UpstreamEvent {
    if !params["_meta"].is_object() {
        params["_meta"] = Value::Object(Default::default());
    }
    params["_meta"][MEMBER_META_KEY] = Value::from(member);
    if let Ok(params) = serde_json::value::to_raw_value(&params) {
        message.set_params(params);
    }
    UpstreamEvent::Within {
        message: Box::new(message),
        request,
    }
}

/// A message's params as an object (`{}` when absent or not an object).
fn object_params(message: &Message) -> Value {
    message
        .params_as::<Value>()
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Default::default()))
}
