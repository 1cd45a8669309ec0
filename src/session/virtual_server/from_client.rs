//! What the session sends its members. A request is answered here (`ping`), fanned out to every
//! member (`fan_out`) or routed to one (`router`); of the client's notifications,
//! `initialized` and `roots/list_changed` go to every member, a cancellation to the member that
//! has the request (or asked the question), and no other (a client's progress or task status
//! names nothing a member may be told of another's); the client's answer to a member's
//! question goes to that member, under its own id. Nothing the session sends waits for a
//! member that does not take it: a member's message is handed over at once where its upstream
//! has room, else from a task of its own.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};

use serde_json::{json, Value};
use tracing::debug;

use super::ids;
use super::members::Members;
use crate::session::error_answer::ErrorAnswer;
use crate::upstream::{Upstream, UpstreamError};
use crate::wire::jsonrpc::{id_key, Kind, Message};
use crate::wire::methods;

impl Members {
    /// One message of the session's, the long way.
    pub(super) async fn take(&self, message: Message) -> Result<(), UpstreamError> {
        if self.released.is_cancelled() {
            return Err(UpstreamError::Gone);
        }
        match message.kind() {
            Kind::Request => self.request(message),
            Kind::Notification => self.notify(message),
            Kind::Response => self.answer_member(message),
        }
        Ok(())
    }

    fn request(&self, message: Message) {
        let method = message.method().unwrap_or_default().to_owned();
        let id = message.id().cloned().unwrap_or(Value::Null);
        let Some(me) = self.me.upgrade() else {
            return;
        };
        match method.as_str() {
            methods::PING => self.answer(&id, json!({})),
            // Every member is asked: answered from a task of its own, so the session's next
            // message is not held behind the slowest member.
            methods::INITIALIZE
            | methods::TOOLS_LIST
            | methods::PROMPTS_LIST
            | methods::RESOURCES_LIST
            | methods::RESOURCES_TEMPLATES_LIST
            | methods::LOGGING_SET_LEVEL => {
                let params = message.params().map(|p| p.to_owned());
                tokio::spawn(async move { me.answer_for_all(&method, &id, params).await });
            }
            // Routed from a task of its own: a member to open, or a URI whose member is found
            // by reading the members' resources, holds up no other message.
            methods::TOOLS_CALL
            | methods::PROMPTS_GET
            | methods::RESOURCES_READ
            | methods::RESOURCES_SUBSCRIBE
            | methods::RESOURCES_UNSUBSCRIBE
            | methods::COMPLETION_COMPLETE => {
                tokio::spawn(async move { me.route(message, &id).await });
            }
            _ => self.refuse(&id, ErrorAnswer::NotRouted(method)),
        }
    }

    /// A notification of the client's, to the members it concerns.
    fn notify(&self, mut message: Message) {
        let method = message.method().unwrap_or_default();
        let targets: Vec<(usize, Upstream)> = {
            let mut state = self.lock();
            let only = match method {
                methods::INITIALIZED | methods::ROOTS_LIST_CHANGED => {
                    state.client_initialized |= method == methods::INITIALIZED;
                    None
                }
                methods::CANCELLED => {
                    let mut params = message.params_as::<Value>().unwrap_or_default();
                    let request = &params["requestId"];
                    if let Some(n) = request.as_u64() {
                        // The request is over for the session: its member is told, and it is
                        // forgotten here whether or not the member answers.
                        match state.cancel(n) {
                            Some(sent) => Some(sent.member),
                            None => return,
                        }
                    } else if let Some((index, own)) = ids::untag(request) {
                        // A member's question the client gives up: to that member, its id.
                        state.forget_question(&id_key(request));
                        params["requestId"] = own;
                        if let Ok(params) = serde_json::value::to_raw_value(&params) {
                            message.set_params(params);
                        }
                        Some(index)
                    } else {
                        return;
                    }
                }
                _ => return debug!(method, "a client's notification no member is told of"),
            };
            state
                .slots
                .iter()
                .enumerate()
                .filter(|(index, slot)| only.is_none_or(|only| only == *index) && slot.initialized)
                .filter_map(|(index, slot)| Some((index, slot.upstream.clone()?)))
                .collect()
        };
        for (index, upstream) in targets {
            let member = self.member_name(index).to_owned();
            self.hand_over(upstream, message.clone(), move |error| {
                debug!(%member, %error, "a notification did not reach a member");
            });
        }
    }

    /// The client's answer to a member's question: to that member, under its own id.
    fn answer_member(&self, mut message: Message) {
        let tagged = message.id().cloned().unwrap_or(Value::Null);
        let Some((index, id)) = ids::untag(&tagged) else {
            debug!("an answer to no member's question; dropped");
            return;
        };
        let upstream = {
            let mut state = self.lock();
            state.forget_question(&id_key(&tagged));
            state
                .slots
                .get(index)
                .and_then(|slot| slot.upstream.clone())
        };
        let Some(upstream) = upstream else {
            return;
        };
        message.set_id(id);
        let member = self.member_name(index).to_owned();
        self.hand_over(upstream, message, move |error| {
            debug!(%member, %error, "an answer did not reach its member");
        });
    }

    /// Sends `message` to a member's `upstream` without holding up the session: at once where
    /// the upstream takes it at once (room in its queue), else from a task of its own;
    /// `failed` hears why it could not be sent.
    pub(super) fn hand_over(
        &self,
        upstream: Upstream,
        message: Message,
        failed: impl FnOnce(UpstreamError) + Send + 'static,
    ) {
        let mut sending = Box::pin(async move { upstream.send(message).await });
        let mut at_once = Context::from_waker(futures_util::task::noop_waker_ref());
        match pin!(&mut sending).poll(&mut at_once) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(error)) => failed(error),
            Poll::Pending => {
                tokio::spawn(async move {
                    if let Err(error) = sending.await {
                        failed(error);
                    }
                });
            }
        }
    }
}
