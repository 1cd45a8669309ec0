//! Taking over a session whose owner died: its record and log adopted, a new upstream brought
//! to where the old one was, and the client told what may have been lost (the gap rule).

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::jsonrpc::{self, Message};
use crate::session::log::{Logged, StreamKey};
use crate::session::{Session, SessionError};
use crate::store::{Op, Record};

impl Session {
    /// Takes over a session another replica owned, from what the shared store holds: its
    /// record and its log. The caller then re-initializes the new upstream (`reinitialize`)
    /// and closes the gap (`close_gap`).
    pub(crate) fn adopt(&self, record: &Record, logged: Vec<Logged>) {
        let mut state = self.lock();
        state.numbered = record.numbered;
        state.protocol_version = record.version.clone();
        state.next_stream = record.next_stream.max(1);
        state.init = record.init.clone();
        if let Some(subs) = record.subs.as_deref() {
            state.subscriptions = serde_json::from_str(subs).unwrap_or_default();
        }
        state.log.assume_evicted_through(record.evicted);
        let now = Instant::now();
        for entry in logged {
            state.log.insert_logged(
                entry.seq,
                entry.stream,
                entry.payload,
                entry.terminal,
                entry.coalesce,
                now,
            );
        }
        state.log.start_new_epoch();
        let mut record = record.clone();
        record.owner = String::new(); // the store writes this replica's name
        state.mirror(|| Op::Create(Box::new(record)));
    }

    /// Brings a new upstream to where the session's old one was: `initialize` with the
    /// client's params (its answer is not the client's), `notifications/initialized`, and a
    /// `resources/subscribe` per subscription.
    pub(crate) async fn reinitialize(&self, init: Option<&str>) -> Result<(), SessionError> {
        let Some(init) = init else {
            return Ok(()); // never initialized: the client will
        };
        let params = RawValue::from_string(init.to_owned()).ok();
        self.internal_request("initialize", params).await?;
        self.upstream
            .send(Message::request(None, "notifications/initialized", None))
            .await?;
        let subscriptions: Vec<String> = self.lock().subscriptions.iter().cloned().collect();
        for uri in subscriptions {
            let params = serde_json::value::to_raw_value(&json!({ "uri": uri })).ok();
            self.internal_request("resources/subscribe", params).await?;
        }
        Ok(())
    }

    /// What a client of a taken-over session is told (the gap rule): each request the old
    /// owner had in flight gets an error (it may or may not have been carried out), and every
    /// subscription and changeable list an invalidation, since whatever the old server said
    /// after the last logged message is unknown.
    pub(crate) fn close_gap(&self, inflight: std::collections::HashMap<u64, String>) {
        let mut state = self.lock();
        for (stream, client_id) in inflight {
            let client_id: Value = serde_json::from_str(&client_id).unwrap_or(Value::Null);
            let error = jsonrpc::error_response(
                &client_id,
                jsonrpc::INTERNAL_ERROR,
                "the replica that owned this session went away while this request was in \
                 flight; it may or may not have been carried out",
                None,
            );
            let stream = state.stream_of(stream);
            self.append(&mut state, stream, error, true, None);
        }
        for message in state.invalidations() {
            self.append(&mut state, StreamKey::Standalone, message, false, None);
        }
    }
}
