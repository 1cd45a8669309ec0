//! A member's upstream in one session: opened (or gone on with, in the session its server keeps
//! for a session taken over), initialized with the client's params, taken down when it fails
//! and opened again when next needed; and the virtual server's own requests to it (its
//! `initialize`, the lists), each answered only by the member it was sent to.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::debug;

use super::ids::OWN;
use super::members::Members;
use crate::upstream::{Sink, Upstream, UpstreamError, UpstreamEvent};
use crate::wire::era::LEGACY_VERSIONS;
use crate::wire::jsonrpc::Message;
use crate::wire::methods;

impl Members {
    /// A new upstream for member `index` (a child started, an HTTP session to be opened), or
    /// one going on in the session its server keeps (`resumed`, as another replica's record
    /// has it), which needs no `initialize`.
    pub(super) fn open_member(
        &self,
        index: usize,
        resumed: Option<&str>,
    ) -> Result<Upstream, UpstreamError> {
        if self.released.is_cancelled() {
            return Err(UpstreamError::Gone);
        }
        let factory = &self.server.members[index].factory;
        let credential = self.credential.for_member(self.member_name(index));
        let opened = match resumed {
            Some(record) => factory.resume(credential, Some(record)),
            None => factory.build(credential),
        };
        let (upstream, binding) = opened.map_err(|cause| self.member_error(index, cause))?;
        let sink: Arc<dyn Sink> = self.sinks[index].clone();
        binding.bind(Arc::downgrade(&sink));
        let linked = resumed.is_some() && upstream.upstream_session().is_some();
        {
            let mut state = self.lock();
            let slot = &mut state.slots[index];
            slot.upstream = Some(upstream.clone());
            slot.initialized = linked;
            slot.linked = linked;
            slot.catalog = None;
            slot.catalog_generation += 1;
        }
        if self.released.is_cancelled() {
            // Let go of meanwhile: this one goes too.
            self.lock().slots[index].upstream = None;
            upstream.release();
            return Err(UpstreamError::Gone);
        }
        Ok(upstream)
    }

    /// Member `index`'s upstream, opened and initialized (once the client's `initialize` is
    /// known) if it was not.
    pub(super) async fn ready(&self, index: usize) -> Result<Upstream, UpstreamError> {
        // The usual case, without waiting for the gate: open and initialized.
        {
            let state = self.lock();
            let slot = &state.slots[index];
            if let (Some(upstream), true) = (&slot.upstream, slot.initialized) {
                return Ok(upstream.clone());
            }
        }
        let _gate = self.gates[index].lock().await;
        let (upstream, initialized, params) = {
            let state = self.lock();
            let slot = &state.slots[index];
            let params = state.initialize.clone();
            (slot.upstream.clone(), slot.initialized, params)
        };
        let upstream = match upstream {
            Some(upstream) => upstream,
            None => self
                .open_member(index, None)
                .inspect_err(|_| self.pass_over(index))?,
        };
        if let (false, Some(params)) = (initialized, params) {
            if let Err(error) = self.initialize_member(index, &upstream, params).await {
                self.down(index, &upstream);
                self.pass_over(index);
                return Err(error);
            }
        }
        Ok(upstream)
    }

    /// `initialize` (with the client's params), then `notifications/initialized` if the client
    /// said it, then the member's subscriptions again: its result.
    pub(super) async fn initialize_member(
        &self,
        index: usize,
        upstream: &Upstream,
        params: Box<RawValue>,
    ) -> Result<Value, UpstreamError> {
        let result = self
            .ask(index, upstream, methods::INITIALIZE, Some(params))
            .await?;
        if let Err(unusable) = usable_initialize(&result) {
            let cause = UpstreamError::UnusableInitialize(unusable);
            return Err(self.member_error(index, cause));
        }
        let (told, subscriptions) = {
            let mut state = self.lock();
            let slot = &mut state.slots[index];
            slot.initialized = true;
            slot.result = Some(result.clone());
            let subscriptions: Vec<String> = state
                .subscriptions
                .iter()
                .filter(|(_, member)| **member == index)
                .map(|(uri, _)| uri.clone())
                .collect();
            (state.client_initialized, subscriptions)
        };
        if told {
            let initialized = Message::request(None, methods::INITIALIZED, None);
            upstream
                .send(initialized)
                .await
                .map_err(|e| self.member_error(index, e))?;
        }
        for uri in subscriptions {
            let params = serde_json::value::to_raw_value(&json!({ "uri": uri })).ok();
            if let Err(error) = self
                .ask(index, upstream, methods::RESOURCES_SUBSCRIBE, params)
                .await
            {
                debug!(%error, %uri, "a member's subscription could not be made again");
            }
        }
        Ok(result)
    }

    /// Takes member `index` down (its upstream released): it is opened again when next needed.
    pub(super) fn down(&self, index: usize, upstream: &Upstream) {
        upstream.release();
        let mut state = self.lock();
        let slot = &mut state.slots[index];
        slot.upstream = None;
        slot.initialized = false;
    }

    /// A request of the virtual server's own to member `index`: its result, or why not (the
    /// member's error, or no answer within the request timeout).
    pub(super) async fn ask(
        &self,
        index: usize,
        upstream: &Upstream,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<Value, UpstreamError> {
        let id = format!("{OWN}{}", self.next_own.fetch_add(1, Ordering::Relaxed));
        let (answer, answered) = oneshot::channel();
        self.lock().own.insert(id.clone(), (index, answer));
        let request = Message::request(Some(Value::from(id.as_str())), method, params);
        if let Err(cause) = upstream.send(request).await {
            self.lock().own.remove(&id);
            return Err(self.member_error(index, cause));
        }
        let timeout = self.server.members[index].request_timeout;
        let answer = match tokio::time::timeout(timeout, answered).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(UpstreamError::Gone),
            Err(_) => {
                self.lock().own.remove(&id);
                // A member that does not answer holds up one merged answer, not each.
                self.pass_over(index);
                Err(UpstreamError::Unanswered {
                    method: method.to_owned(),
                    timeout,
                })
            }
        };
        let answer = answer.map_err(|cause| self.member_error(index, cause))?;
        if let Some(error) = answer.error() {
            let refused = UpstreamError::RefusedOwn {
                method: method.to_owned(),
                error: excerpt(error.get()),
            };
            return Err(self.member_error(index, refused));
        }
        let raw = answer.result().map(RawValue::get).unwrap_or("null");
        self.within_share(index, method, raw.len())?;
        let result: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
        // Written again, it may take more room than it came in (`1e15` is `1000000000000000.0`).
        self.within_share(index, method, result.to_string().len())?;
        Ok(result)
    }

    /// Whether `bytes` of member `index`'s answer to `method` fit its share of a merged answer;
    /// the error that leaves it out if not.
    pub(super) fn within_share(
        &self,
        index: usize,
        method: &str,
        bytes: usize,
    ) -> Result<(), UpstreamError> {
        if bytes <= self.server.share {
            return Ok(());
        }
        let over = UpstreamError::OverShare {
            method: method.to_owned(),
            bytes,
            share: self.server.share,
        };
        Err(self.member_error(index, over))
    }

    /// Member `index` left one of the virtual server's requests unanswered, or could not be
    /// opened or initialized: what every member is asked passes it over for as long as its
    /// request timeout (a request routed to it still tries it).
    pub(super) fn pass_over(&self, index: usize) {
        let until = Instant::now() + self.server.members[index].request_timeout;
        self.lock().slots[index].passed_over_until = Some(until);
    }

    /// Whether member `index` is passed over by what every member is asked, having left one
    /// of the virtual server's requests unanswered lately, or failed to start.
    pub(super) fn passed_over(&self, index: usize) -> bool {
        let state = self.lock();
        state.slots[index]
            .passed_over_until
            .is_some_and(|until| Instant::now() < until)
    }

    /// Gives member `index`'s answer to one of the virtual server's own requests to whoever
    /// waits for it; `false` when that request was not sent to that member (or is over).
    pub(super) fn settle(
        &self,
        index: usize,
        id: &str,
        answer: Result<Message, UpstreamError>,
    ) -> bool {
        let waiting = {
            let mut state = self.lock();
            match state.own.get(id) {
                Some((member, _)) if *member == index => state.own.remove(id),
                _ => None,
            }
        };
        match waiting {
            Some((_, waiting)) => {
                let _ = waiting.send(answer);
                true
            }
            None => false,
        }
    }

    /// Fails what member `index` had in flight, with `cause` naming it; `gone`: it is down
    /// until next needed.
    pub(super) fn fail_member(&self, index: usize, cause: UpstreamError, gone: bool) {
        let cause = self.member_error(index, cause);
        let (requests, own) = {
            let mut state = self.lock();
            let requests: Vec<u64> = state
                .sent
                .iter()
                .filter(|(_, sent)| sent.member == index)
                .map(|(n, _)| *n)
                .collect();
            requests.iter().for_each(|n| {
                state.sent.remove(n);
            });
            state.questions.retain(|question| question.member != index);
            let own: Vec<String> = state
                .own
                .iter()
                .filter(|(_, (member, _))| *member == index)
                .map(|(id, _)| id.clone())
                .collect();
            let own: Vec<_> = own
                .iter()
                .filter_map(|id| state.own.remove(id).map(|(_, answer)| answer))
                .collect();
            if gone {
                let slot = &mut state.slots[index];
                slot.upstream = None;
                slot.initialized = false;
            }
            (requests, own)
        };
        if gone {
            self.warn_down(index, &cause);
        }
        for answer in own {
            let _ = answer.send(Err(cause.clone()));
        }
        for n in requests {
            self.deliver(UpstreamEvent::Failed {
                id: Box::new(Value::from(n)),
                cause: cause.clone(),
            });
        }
    }

    /// Member `index`'s server forgot its session: initialized again with the client's params
    /// (its upstream holds other traffic until told how that went).
    pub(super) async fn reestablish(&self, index: usize) {
        let _gate = self.gates[index].lock().await;
        let (upstream, params) = {
            let mut state = self.lock();
            state.slots[index].initialized = false;
            (
                state.slots[index].upstream.clone(),
                state.initialize.clone(),
            )
        };
        let Some(upstream) = upstream else {
            return;
        };
        let outcome = match params {
            Some(params) => self
                .initialize_member(index, &upstream, params)
                .await
                .map(|_| ()),
            None => Err(UpstreamError::NoInitializeParams),
        };
        if let Err(error) = &outcome {
            self.warn_down(index, error);
        }
        upstream.reestablished(outcome);
    }
}

/// The longest part of a member's error kept to say why (in logs and answers).
const EXCERPT: usize = 512;

/// `text`, to its first [`EXCERPT`] bytes (then `…`).
fn excerpt(text: &str) -> String {
    match text.len() <= EXCERPT {
        true => text.to_owned(),
        false => {
            let end = (0..=EXCERPT)
                .rev()
                .find(|at| text.is_char_boundary(*at))
                .unwrap_or(0);
            format!("{}…", &text[..end])
        }
    }
}

/// Why a member's `initialize` result cannot be merged: a revision the proxy does not speak,
/// or capabilities that are not an object (within them, what a client could not read is left
/// out when they are merged).
fn usable_initialize(result: &Value) -> Result<(), &'static str> {
    let version = result["protocolVersion"].as_str().unwrap_or_default();
    if !LEGACY_VERSIONS.contains(&version) {
        return Err("a protocolVersion the proxy does not speak");
    }
    match result["capabilities"].is_object() {
        true => Ok(()),
        false => Err("capabilities that are not an object"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_members_error_is_kept_to_an_excerpt() {
        assert_eq!(excerpt("short"), "short");
        let long = "é".repeat(600);
        let kept = excerpt(&long);
        assert!(
            kept.len() <= EXCERPT + '…'.len_utf8() && kept.ends_with('…'),
            "{kept}"
        );
    }

    #[test]
    fn an_initialize_result_is_used_with_a_known_revision_and_capabilities() {
        let result = |version: &str, capabilities: Value| json!({ "protocolVersion": version, "capabilities": capabilities });
        assert!(usable_initialize(&result("2025-06-18", json!({ "tools": {} }))).is_ok());
        assert!(usable_initialize(&result("2024-11-05", json!({}))).is_ok());
        assert!(usable_initialize(&result("0000-bogus", json!({}))).is_err());
        assert!(usable_initialize(&result("2025-11-25", json!({ "experimental": 5 }))).is_ok());
        assert!(usable_initialize(&result("2025-11-25", json!([]))).is_err());
        assert!(usable_initialize(&result("2025-11-25", json!("x"))).is_err());
        assert!(usable_initialize(&json!({ "capabilities": {} })).is_err());
    }
}
