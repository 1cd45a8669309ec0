//! What the shared child sends, routed to the sessions it belongs to: a response to the session
//! whose request it answers (under that session's id), a server request or a log message to
//! the session whose request caused it, progress to its token's session, a resource update to
//! its subscribers, a 2026-07-28 listen's notification to the session listening, the rest to
//! every session; the child's exit to them all.

use serde_json::value::to_raw_value;
use serde_json::Value;

use super::{Mux, SharedStdio};
use crate::upstream::{EventSink, UpstreamEvent};
use crate::wire::era::SUBSCRIPTION_ID_KEY;
use crate::wire::jsonrpc::{id_key, Kind, Message};
use crate::wire::methods;

impl SharedStdio {
    /// Where each child event goes.
    pub(super) fn route(&self, event: UpstreamEvent) -> Vec<(EventSink, UpstreamEvent)> {
        let mut mux = self.lock();
        let message = match event {
            UpstreamEvent::Message(message) => *message,
            UpstreamEvent::Oversized { id, max } => {
                let pending = id.and_then(|id| id.as_u64()).and_then(|g| mux.finish(g));
                return match pending {
                    Some(p) => mux.to(
                        p.session,
                        UpstreamEvent::Oversized {
                            id: Some(Box::new(p.id)),
                            max,
                        },
                    ),
                    None => Vec::new(),
                };
            }
            // Reported by HTTP upstreams and virtual servers; a child on stdio never does.
            UpstreamEvent::Failed { .. }
            | UpstreamEvent::Within { .. }
            | UpstreamEvent::AnswersLost(_)
            | UpstreamEvent::SessionLost => return Vec::new(),
            UpstreamEvent::Exited(cause) => {
                let everyone: Vec<_> = mux.sessions.values().cloned().collect();
                *mux = Mux {
                    sessions: std::mem::take(&mut mux.sessions),
                    next_session: mux.next_session,
                    ..Mux::default()
                };
                return everyone
                    .into_iter()
                    .map(|s| (s, UpstreamEvent::Exited(cause.clone())))
                    .collect();
            }
        };
        match message.kind() {
            Kind::Notification => mux.route_notification(message),
            _ => mux.route_exchange(message),
        }
    }
}

impl Mux {
    /// The session of the most recent request in flight (SEP-2260's "the request that caused it").
    fn causing_session(&self) -> Option<u64> {
        // A listen lasts as long as its session: it causes nothing.
        self.pending
            .iter()
            .filter(|(_, p)| p.method != methods::SUBSCRIPTIONS_LISTEN)
            .max_by_key(|(id, _)| **id)
            .map(|(_, p)| p.session)
    }

    fn to(&self, session: u64, event: UpstreamEvent) -> Vec<(EventSink, UpstreamEvent)> {
        self.sessions
            .get(&session)
            .map(|s| vec![(s.clone(), event)])
            .unwrap_or_default()
    }

    fn to_all(&self, message: &Message) -> Vec<(EventSink, UpstreamEvent)> {
        self.sessions
            .values()
            .map(|s| (s.clone(), UpstreamEvent::Message(Box::new(message.clone()))))
            .collect()
    }

    /// A server request nobody caused still needs exactly one answer: the oldest session gets it.
    fn to_any(&self, message: Message) -> Vec<(EventSink, UpstreamEvent)> {
        let oldest = self.sessions.keys().min().copied();
        oldest
            .map(|s| self.to(s, UpstreamEvent::Message(Box::new(message))))
            .unwrap_or_default()
    }

    /// A response (back to the session whose request it answers, under that session's id) or
    /// a server request (to the session whose request caused it).
    fn route_exchange(&mut self, mut message: Message) -> Vec<(EventSink, UpstreamEvent)> {
        match message.kind() {
            Kind::Response => {
                let Some(pending) = message
                    .id()
                    .and_then(Value::as_u64)
                    .and_then(|g| self.finish(g))
                else {
                    return Vec::new(); // the answer to one of the mux's own requests
                };
                if pending.method == methods::INITIALIZE && !message.is_error() {
                    self.initialize_result = message.result().map(|r| r.to_owned());
                }
                message.set_id(pending.id);
                self.to(pending.session, UpstreamEvent::Message(Box::new(message)))
            }
            Kind::Request => match self.causing_session() {
                Some(session) => self.to(session, UpstreamEvent::Message(Box::new(message))),
                None => self.to_any(message),
            },
            Kind::Notification => Vec::new(),
        }
    }

    /// The child-facing id of the listen in flight a notification names, if it names one.
    fn listen_of(&self, message: &Message) -> Option<u64> {
        let params = message.params()?;
        if !params.get().contains(SUBSCRIPTION_ID_KEY) {
            return None;
        }
        let params: Value = serde_json::from_str(params.get()).ok()?;
        let listen = params["_meta"][SUBSCRIPTION_ID_KEY].as_u64()?;
        self.pending.contains_key(&listen).then_some(listen)
    }

    /// A notification: progress to its token's session, a resource update to its subscribers,
    /// a log message or cancellation to the session that caused it, the rest to everyone.
    fn route_notification(&mut self, mut message: Message) -> Vec<(EventSink, UpstreamEvent)> {
        if let Some(listen) = self.listen_of(&message) {
            // A 2026-07-28 listen's notification: to the session whose listen it is, under the
            // id that session gave it.
            let pending = &self.pending[&listen];
            let (session, id) = (pending.session, pending.id.clone());
            if let Some(mut params) = message.params_as::<Value>() {
                params["_meta"][SUBSCRIPTION_ID_KEY] = id;
                if let Ok(raw) = to_raw_value(&params) {
                    message.set_params(raw);
                }
            }
            return self.to(session, UpstreamEvent::Message(Box::new(message)));
        }
        match message.method().unwrap_or_default() {
            methods::PROGRESS => {
                let token = message
                    .params_as::<Value>()
                    .map(|p| id_key(&p["progressToken"]));
                let Some((session, original)) = token.and_then(|t| self.tokens.get(&t).cloned())
                else {
                    return Vec::new();
                };
                if let Some(mut params) = message.params_as::<Value>() {
                    params["progressToken"] = original;
                    if let Ok(raw) = to_raw_value(&params) {
                        message.set_params(raw);
                    }
                }
                self.to(session, UpstreamEvent::Message(Box::new(message)))
            }
            methods::RESOURCES_UPDATED => {
                let uri = message
                    .params_as::<Value>()
                    .and_then(|p| p["uri"].as_str().map(str::to_owned));
                let subscribed: Vec<u64> = uri
                    .and_then(|uri| self.subscribers.get(&uri))
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default();
                subscribed
                    .into_iter()
                    .flat_map(|s| self.to(s, UpstreamEvent::Message(Box::new(message.clone()))))
                    .collect()
            }
            methods::MESSAGE | methods::CANCELLED => match self.causing_session() {
                Some(session) => self.to(session, UpstreamEvent::Message(Box::new(message))),
                None => self.to_all(&message),
            },
            _ => self.to_all(&message),
        }
    }
}
