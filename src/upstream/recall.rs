//! What an HTTP upstream must remember to re-establish a session the server lost: the client's
//! `initialize` params and the resources it subscribed to.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::Value;

use crate::jsonrpc::{Kind, Message};

#[derive(Debug, Default, Clone)]
pub struct Recall {
    pub initialize_params: Option<Value>,
    pub subscriptions: BTreeSet<String>,
}

impl Recall {
    /// Notes what a client message changes.
    pub fn note(&mut self, message: &Message) {
        if message.kind() != Kind::Request {
            return;
        }
        #[derive(Deserialize)]
        struct Uri {
            uri: String,
        }
        match message.method() {
            Some("initialize") => {
                self.initialize_params = message
                    .params()
                    .and_then(|p| serde_json::from_str(p.get()).ok());
            }
            Some("resources/subscribe") => {
                if let Some(Uri { uri }) = message.params_as() {
                    self.subscriptions.insert(uri);
                }
            }
            Some("resources/unsubscribe") => {
                if let Some(Uri { uri }) = message.params_as::<Uri>() {
                    self.subscriptions.remove(&uri);
                }
            }
            _ => {}
        }
    }

    /// The protocol version the client asked for in `initialize`.
    pub fn protocol_version(&self) -> Option<&str> {
        self.initialize_params.as_ref()?["protocolVersion"].as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message(text: &str) -> Message {
        Message::parse(Bytes::from(text.to_owned())).unwrap()
    }

    #[test]
    fn remembers_initialize_and_the_live_subscriptions() {
        let mut recall = Recall::default();
        recall.note(&message(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#));
        recall.note(&message(
            r#"{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"a://1"}}"#,
        ));
        recall.note(&message(
            r#"{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"a://2"}}"#,
        ));
        recall.note(&message(
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/unsubscribe","params":{"uri":"a://1"}}"#,
        ));
        assert_eq!(recall.protocol_version(), Some("2025-06-18"));
        assert_eq!(recall.subscriptions.iter().collect::<Vec<_>>(), ["a://2"]);
    }
}
