//! What becomes of one session's message on its way to the shared child: a request is
//! readdressed to a child-wide id (and progress token) and recorded, an `initialize` or a
//! subscription the child already has is answered here, a second `notifications/initialized` is
//! dropped, a cancellation is readdressed to the request it names.

use bytes::Bytes;
use serde_json::value::{to_raw_value, RawValue};
use serde_json::{json, Value};
use tracing::debug;

use super::{Mux, Pending, SharedHandle};
use crate::wire::jsonrpc::{id_key, Kind, Message};
use crate::wire::methods;

/// What to do with one message of a session.
pub(super) enum Plan {
    /// Send these bytes to the child.
    Forward(Bytes),
    /// Answer the session here.
    Answer(Message),
    Drop,
}

impl SharedHandle {
    pub(super) fn plan(&self, mux: &mut Mux, message: &mut Message, wire: Bytes) -> Plan {
        match (message.kind(), message.method().unwrap_or_default()) {
            (Kind::Request, methods::INITIALIZE) if mux.initialize_result.is_some() => {
                Plan::Answer(answer(message, mux.initialize_result.clone()))
            }
            (Kind::Request, methods::RESOURCES_SUBSCRIBE) => self.subscribe(mux, message),
            (Kind::Request, methods::RESOURCES_UNSUBSCRIBE) => self.unsubscribe(mux, message),
            (Kind::Request, _) => self.forward(mux, message),
            (Kind::Notification, methods::INITIALIZED) => {
                if std::mem::replace(&mut mux.initialized, true) {
                    Plan::Drop
                } else {
                    Plan::Forward(wire)
                }
            }
            (Kind::Notification, methods::CANCELLED) => self.cancel(mux, message),
            _ => Plan::Forward(wire),
        }
    }

    /// The first session to subscribe to a URI subscribes the child; later ones are answered
    /// here.
    fn subscribe(&self, mux: &mut Mux, message: &mut Message) -> Plan {
        let Some(uri) = uri(message) else {
            return self.forward(mux, message);
        };
        let subscribers = mux.subscribers.entry(uri).or_default();
        let first = subscribers.is_empty();
        subscribers.insert(self.session);
        if first {
            self.forward(mux, message)
        } else {
            Plan::Answer(answer(message, to_raw_value(&json!({})).ok()))
        }
    }

    /// The last session to unsubscribe from a URI unsubscribes the child; the others are
    /// answered here.
    fn unsubscribe(&self, mux: &mut Mux, message: &mut Message) -> Plan {
        let Some(uri) = uri(message) else {
            return self.forward(mux, message);
        };
        let last = match mux.subscribers.get_mut(&uri) {
            Some(subscribers) => subscribers.remove(&self.session) && subscribers.is_empty(),
            None => false,
        };
        if last {
            mux.subscribers.remove(&uri);
            self.forward(mux, message)
        } else {
            Plan::Answer(answer(message, to_raw_value(&json!({})).ok()))
        }
    }

    /// A cancellation of one of the session's requests in flight, under its child-wide id;
    /// dropped when it names none.
    fn cancel(&self, mux: &mut Mux, message: &mut Message) -> Plan {
        let Some(mut params) = message.params_as::<Value>() else {
            return Plan::Drop;
        };
        let wanted = params["requestId"].clone();
        let found = mux
            .pending
            .iter()
            .find(|(_, p)| p.session == self.session && p.id == wanted)
            .map(|(g, _)| *g);
        let Some(global) = found else {
            return Plan::Drop;
        };
        mux.finish(global);
        params["requestId"] = Value::from(global);
        match to_raw_value(&params) {
            Ok(raw) => {
                message.set_params(raw);
                Plan::Forward(message.to_bytes())
            }
            Err(_) => Plan::Drop,
        }
    }

    /// Readdresses a request to a child-wide id (and progress token) and records it.
    fn forward(&self, mux: &mut Mux, message: &mut Message) -> Plan {
        mux.next_id += 1;
        let global = mux.next_id;
        let mut token = None;
        if let Some(mut params) = message.params_as::<Value>() {
            let original = params["_meta"]["progressToken"].clone();
            if !original.is_null() {
                let shared = format!("s{}-{}", self.session, id_key(&original));
                params["_meta"]["progressToken"] = Value::from(shared.clone());
                if let Ok(raw) = to_raw_value(&params) {
                    message.set_params(raw);
                }
                let key = id_key(&Value::from(shared));
                mux.tokens.insert(key.clone(), (self.session, original));
                token = Some(key);
            }
        }
        mux.pending.insert(
            global,
            Pending {
                session: self.session,
                id: message.id().cloned().unwrap_or(Value::Null),
                method: message.method().unwrap_or_default().to_owned(),
                token,
            },
        );
        message.set_id(Value::from(global));
        debug!(
            session = self.session,
            global, "forwarded to the shared child"
        );
        Plan::Forward(message.to_bytes())
    }
}

/// The URI a subscription names.
fn uri(message: &Message) -> Option<String> {
    message
        .params_as::<Value>()
        .and_then(|p| p["uri"].as_str().map(str::to_owned))
}

/// A response to `request` with `result`, answered by the proxy.
fn answer(request: &Message, result: Option<Box<RawValue>>) -> Message {
    let id = request.id().cloned().unwrap_or(Value::Null);
    let result: Value = result
        .and_then(|r| serde_json::from_str(r.get()).ok())
        .unwrap_or_else(|| json!({}));
    Message::response(&id, result)
}
