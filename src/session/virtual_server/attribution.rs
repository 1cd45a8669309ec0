//! What a member sends, attributed to it from where its upstream hands it over, and held to
//! what it may speak of: an answer only to a request sent to it (the session's, by its upstream
//! id, or the virtual server's own); progress only on a token of its own requests; a
//! `resources/updated` only for a URI the session subscribed to at that member. Anything else
//! is dropped, counted (`mcp_proxy_virtual_member_violations_total{server,member,kind}`) and
//! logged with the member's name. Its requests (sampling, elicitation, roots), log messages and
//! cancellations ride only a stream of its own request in flight, or the standalone stream;
//! its requests go under ids tagged with it (`<index>~<id>`), name it in `_meta`, and an
//! elicitation's message begins with its name.

use serde::Deserialize;
use serde_json::Value;
use tracing::{debug, warn};

use super::ids::{tag, OWN};
use super::members::Members;
use crate::upstream::{UpstreamError, UpstreamEvent};
use crate::wire::jsonrpc::{id_key, Kind, Message};
use crate::wire::methods;

/// Where a member's request names the member, in its `_meta`.
pub const MEMBER_META_KEY: &str = "mcp-session-proxy/member";

/// What a member sent that was not its own to send: the `kind` of the violations counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Violation {
    /// An answer to a request it was not sent (another member's, or none).
    Answer,
    /// Progress on another member's request.
    Progress,
    /// A `resources/updated` of a URI the session did not subscribe to at that member.
    Update,
}

impl Violation {
    pub fn label(self) -> &'static str {
        match self {
            Violation::Answer => "answer",
            Violation::Progress => "progress",
            Violation::Update => "update",
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
            match n {
                Some(n) if state.sent.get(&n).is_some_and(|sent| sent.member == index) => {
                    (state.sent.remove(&n).is_some(), false)
                }
                Some(n) => (false, state.forget_cancelled(index, n)),
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
    fn asked(&self, index: usize, mut message: Message) {
        let tagged = tag(index, message.id().unwrap_or(&Value::Null));
        message.set_id(tagged);
        let member = self.member_name(index);
        let mut params = message
            .params_as::<Value>()
            .filter(Value::is_object)
            .unwrap_or_else(|| Value::Object(Default::default()));
        if message.method() == Some(methods::ELICITATION_CREATE) {
            if let Some(text) = params["message"].as_str() {
                params["message"] = Value::from(format!("{member}: {text}"));
            }
        }
        if !params["_meta"].is_object() {
            params["_meta"] = Value::Object(Default::default());
        }
        params["_meta"][MEMBER_META_KEY] = Value::from(member);
        if let Ok(params) = serde_json::value::to_raw_value(&params) {
            message.set_params(params);
        }
        let request = self.lock().newest_of(index);
        self.deliver(within(message, request));
    }

    fn notified(&self, index: usize, mut message: Message) {
        match message.method().unwrap_or_default() {
            methods::PROGRESS => {
                #[derive(Deserialize)]
                struct Progress {
                    #[serde(rename = "progressToken")]
                    token: Value,
                }
                let Some(token) = message.params_as::<Progress>().map(|p| id_key(&p.token)) else {
                    return debug!("progress without a token from a member; dropped");
                };
                match self.progress_of(index, &token) {
                    Ok(request) => self.deliver(within(message, Some(request))),
                    Err(Some(_)) => self.violated(index, Violation::Progress, &token),
                    Err(None) => debug!(%token, "progress of no request in flight; dropped"),
                }
            }
            methods::RESOURCES_UPDATED => {
                let uri = crate::session::routing::resource_uri(&message).unwrap_or_default();
                let held_here = self.lock().subscriptions.get(&uri) == Some(&index);
                match held_here {
                    true => self.deliver(UpstreamEvent::Message(Box::new(message))),
                    false => self.violated(index, Violation::Update, &uri),
                }
            }
            // A member cancels a request of its own: under the id the client knows it by.
            methods::CANCELLED => {
                if let Some(mut params) = message.params_as::<Value>() {
                    if let Some(request) = params.get("requestId").cloned() {
                        params["requestId"] = tag(index, &request);
                        if let Ok(params) = serde_json::value::to_raw_value(&params) {
                            message.set_params(params);
                        }
                    }
                }
                let request = self.lock().newest_of(index);
                self.deliver(within(message, request));
            }
            // A log message names its member.
            methods::MESSAGE => {
                if let Some(mut params) = message.params_as::<Value>() {
                    let member = self.member_name(index);
                    params["logger"] = Value::from(match params["logger"].as_str() {
                        Some(logger) => format!("{member}/{logger}"),
                        None => member.to_owned(),
                    });
                    if let Ok(params) = serde_json::value::to_raw_value(&params) {
                        message.set_params(params);
                    }
                }
                let request = self.lock().newest_of(index);
                self.deliver(within(message, request));
            }
            changed => {
                if changed == methods::RESOURCES_LIST_CHANGED {
                    self.forget_catalog(index);
                }
                self.deliver(UpstreamEvent::Message(Box::new(message)));
            }
        }
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
    fn violated(&self, index: usize, violation: Violation, what: &str) {
        let (server, member) = (&self.server.name, self.member_name(index));
        self.server
            .metrics
            .member_violation(member, violation.label());
        let first = self.lock().warned.insert((index, violation.label()));
        let kind = violation.label();
        match first {
            true => {
                warn!(%server, %member, kind, %what, "a member of the virtual server sent what is not its own to send: dropped (more from it are logged at debug)")
            }
            false => debug!(%server, %member, kind, %what, "a member's violation: dropped"),
        }
    }
}

/// `message`, riding `request` (the upstream id of one of its member's requests; none: the
/// standalone stream).
fn within(message: Message, request: Option<u64>) -> UpstreamEvent {
    UpstreamEvent::Within {
        message: Box::new(message),
        request,
    }
}
