//! Which member a request goes to, and under what: a tool or prompt (and a completion of a
//! prompt's argument) by its composed name, to the first member in `servers` whose rules let
//! clients reach that name, under the member's own name; a resource (`resources/read`,
//! `subscribe`, `unsubscribe`, a completion of a template's variable) by its URI, to the first
//! member in `servers` whose catalog lists it or a template matching it, then held to that
//! member's rules (a URI it may not be reached for is a resource not found, never sent, and
//! never tried on a later member: a member cannot serve a URI an earlier one lists, hidden or
//! not). Each request sent is noted in flight at its member, with
//! its progress token, for `attribution`.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::members::{Members, Sent};
use super::names::NameList;
use super::params::ParamMembers;
use super::rules::{self, Reached, Thing};
use crate::session::error_answer::ErrorAnswer;
use crate::session::routing;
use crate::upstream::{Upstream, UpstreamError};
use crate::wire::jsonrpc::{id_key, Kind, Message};
use crate::wire::methods;
use crate::wire::named::{self, Named as Target};

impl Members {
    /// A `tools/call` or `prompts/get` routed without waiting, when every member is open and
    /// initialized: the member and its upstream, the name in `message` made the member's own
    /// and the request noted in flight there. `None` (and `message` unchanged): the long way.
    pub(super) fn route_at_once(&self, message: &mut Message) -> Option<(usize, Upstream)> {
        let kind = match (message.kind(), message.method()) {
            (Kind::Request, Some(methods::TOOLS_CALL)) => NameList::Tools,
            (Kind::Request, Some(methods::PROMPTS_GET)) => NameList::Prompts,
            _ => return None,
        };
        let params = ParamMembers::read(message.params().map(RawValue::get).unwrap_or("{}"))?;
        let composed = params.string("name")?;
        let (index, name) = self.member_of_name(kind, &composed)?;
        let progress = params.raw("_meta").and_then(progress_token_in);
        let renamed = params.with_string("name", &name)?;
        let upstream = {
            let mut state = self.lock();
            if !state.slots.iter().all(|slot| slot.initialized) {
                return None;
            }
            let upstream = state.slots[index].upstream.clone()?;
            if let Some(n) = message.id().and_then(Value::as_u64) {
                let sent = Sent {
                    member: index,
                    progress,
                };
                state.sent.insert(n, sent);
            }
            upstream
        };
        message.set_params(renamed);
        Some((index, upstream))
    }

    /// Hands a request [`Self::route_at_once`] routed to its member (without waiting for a
    /// member that does not take it); one it cannot take is answered with why.
    pub(super) fn send_routed(&self, index: usize, upstream: Upstream, message: Message) {
        let id = message.id().cloned().unwrap_or(Value::Null);
        let me = self.me.clone();
        self.hand_over(upstream, message, move |cause| {
            if let Some(me) = me.upgrade() {
                me.refuse_sent(index, &id, cause);
            }
        });
    }

    /// Answers the session's request `id` sent to member `index` with why it could not be sent.
    fn refuse_sent(&self, index: usize, id: &Value, cause: UpstreamError) {
        if let Some(n) = id.as_u64() {
            self.lock().sent.remove(&n);
        }
        let error = self.member_error(index, cause);
        self.refuse(id, ErrorAnswer::Upstream(error));
    }

    /// A request routed to the member it names, the long way (a member to open or initialize
    /// first, a URI to find the member of).
    pub(super) async fn route(&self, mut message: Message, id: &Value) {
        let target = match named::named(&message) {
            Ok(Some(target)) => target,
            Ok(None) => {
                let method = message.method().unwrap_or_default().to_owned();
                return self.refuse(id, ErrorAnswer::NotRouted(method));
            }
            Err(unreadable) => return self.refuse(id, unreadable.into()),
        };
        let (index, reached) = match self.target(&message, &target).await {
            Ok(routed) => routed,
            Err(refusal) => return self.refuse(id, refusal),
        };
        if let Reached::Name(name) = &reached {
            rename(&mut message, &target, name);
        }
        let upstream = match self.ready(index).await {
            Ok(upstream) => upstream,
            Err(error) => {
                self.warn_down(index, &error);
                return self.refuse(id, ErrorAnswer::Upstream(error));
            }
        };
        let progress = routing::progress_token(&message);
        {
            let mut state = self.lock();
            if let Some(n) = id.as_u64() {
                let sent = Sent {
                    member: index,
                    progress,
                };
                state.sent.insert(n, sent);
            }
            match (message.method(), &target) {
                (Some(methods::RESOURCES_SUBSCRIBE), Target::Resource(uri)) => {
                    state.subscriptions.insert(uri.clone(), index);
                }
                (Some(methods::RESOURCES_UNSUBSCRIBE), Target::Resource(uri)) => {
                    state.subscriptions.remove(uri);
                }
                _ => {}
            }
        }
        if let Err(cause) = upstream.send(message).await {
            self.refuse_sent(index, id, cause);
        }
    }

    /// The member `target` goes to, and what it is sent for it.
    async fn target(
        &self,
        message: &Message,
        target: &Target,
    ) -> Result<(usize, Reached), ErrorAnswer> {
        match Thing::from(target) {
            Thing::Name(kind, composed) => self
                .member_of_name(kind, composed)
                .map(|(index, name)| (index, Reached::Name(name)))
                .ok_or_else(|| unknown(kind, composed)),
            thing @ Thing::Uri(uri) => {
                // An unsubscription goes where its subscription is.
                let held = match message.method() {
                    Some(methods::RESOURCES_UNSUBSCRIBE) => {
                        self.lock().subscriptions.get(uri).copied()
                    }
                    _ => None,
                };
                let index = match held {
                    Some(index) => Some(index),
                    None => self
                        .member_of_uri(uri)
                        .await
                        .map_err(ErrorAnswer::Upstream)?,
                };
                let not_found = || ErrorAnswer::UnknownResource(uri.to_owned());
                let index = index.ok_or_else(not_found)?;
                let names = &self.server.members[index].names;
                let reached = rules::reach(names, &self.server.separator, thing);
                Ok((index, reached.ok_or_else(not_found)?))
            }
        }
    }

    /// The first member (in `servers`) whose tool or prompt clients call `composed` and may
    /// reach, and the member's own name of it.
    pub(super) fn member_of_name(&self, kind: NameList, composed: &str) -> Option<(usize, String)> {
        let separator = &self.server.separator;
        self.server
            .members
            .iter()
            .enumerate()
            .find_map(|(index, member)| {
                match rules::reach(&member.names, separator, Thing::Name(kind, composed))? {
                    Reached::Name(name) => Some((index, name)),
                    Reached::Uri => None,
                }
            })
    }
}

/// A tool or prompt no member has (or none lets clients reach).
fn unknown(kind: NameList, name: &str) -> ErrorAnswer {
    match kind {
        NameList::Tools => ErrorAnswer::UnknownTool(name.to_owned()),
        NameList::Prompts => ErrorAnswer::UnknownPrompt(name.to_owned()),
    }
}

/// The progress token in a request's `_meta`, in key form.
fn progress_token_in(meta: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Meta {
        #[serde(rename = "progressToken")]
        progress_token: Option<Value>,
    }
    let meta: Meta = serde_json::from_str(meta.get()).ok()?;
    meta.progress_token.as_ref().map(id_key)
}

/// `message` with the member's own `name` where `target` named it (a completion's
/// `ref.name`, otherwise the params' `name`), every other member of its params as it came.
fn rename(message: &mut Message, target: &Target, name: &str) {
    let text = message.params().map(RawValue::get).unwrap_or("{}");
    let renamed = match target {
        Target::PromptReference(_) => {
            let mut params: Value = serde_json::from_str(text).unwrap_or_default();
            params["ref"]["name"] = Value::from(name);
            serde_json::value::to_raw_value(&params).ok()
        }
        _ => ParamMembers::read(text).and_then(|params| params.with_string("name", name)),
    };
    if let Some(renamed) = renamed {
        message.set_params(renamed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_token_is_read_from_meta_alone() {
        let meta = |text: &str| {
            serde_json::value::to_raw_value(&serde_json::from_str::<Value>(text).unwrap()).unwrap()
        };
        assert_eq!(
            progress_token_in(&meta(r#"{"progressToken":7}"#)).as_deref(),
            Some("7")
        );
        assert_eq!(
            progress_token_in(&meta(r#"{"x":{"y":1},"progressToken":"p"}"#)).as_deref(),
            Some("\"p\"")
        );
        assert_eq!(progress_token_in(&meta(r#"{}"#)), None);
        assert_eq!(progress_token_in(&meta(r#""x""#)), None);
    }
}
