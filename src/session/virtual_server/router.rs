//! Which member a request goes to, and under what: a tool or prompt (and a completion of a
//! prompt's argument) by its composed name, to the first member in `servers` whose rules let
//! clients reach that name, under the member's own name; a resource (`resources/read`,
//! `subscribe`, `unsubscribe`, a completion of a template's variable) by its URI, to the first
//! member in `servers` whose catalog lists it or a template matching it, then held to that
//! member's rules (a URI it may not be reached for is a resource not found, never sent, and
//! never tried on a later member: a member cannot serve a URI an earlier one lists, hidden or
//! not). Each request sent is noted in flight at its member, with
//! its progress token, for `attribution`.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tracing::{debug, warn};

use super::catalog::{Catalog, Page, MAX_PAGES};
use super::members::{Members, Sent};
use super::names::Named;
use super::params::Params;
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
            (Kind::Request, Some(methods::TOOLS_CALL)) => Named::Tools,
            (Kind::Request, Some(methods::PROMPTS_GET)) => Named::Prompts,
            _ => return None,
        };
        let params = Params::read(message.params().map(RawValue::get).unwrap_or("{}"))?;
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

    /// Sends a request [`Self::route_at_once`] routed; one its member cannot take is answered
    /// with why.
    pub(super) async fn send_routed(
        &self,
        index: usize,
        upstream: Upstream,
        message: Message,
    ) -> Result<(), UpstreamError> {
        let id = message.id().cloned().unwrap_or(Value::Null);
        if let Err(cause) = upstream.send(message).await {
            if let Some(n) = id.as_u64() {
                self.lock().sent.remove(&n);
            }
            let error = self.member_error(index, cause);
            self.refuse(&id, ErrorAnswer::Upstream(error));
        }
        Ok(())
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
            if let Some(n) = id.as_u64() {
                self.lock().sent.remove(&n);
            }
            let error = self.member_error(index, cause);
            self.refuse(id, ErrorAnswer::Upstream(error));
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
                    None => self.member_of_uri(uri).await,
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
    pub(super) fn member_of_name(&self, kind: Named, composed: &str) -> Option<(usize, String)> {
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

    /// The first member (in `servers`) whose catalog lists `uri` or a template it matches. A
    /// member that cannot be read is passed over (it is down, and said so).
    async fn member_of_uri(&self, uri: &str) -> Option<usize> {
        for index in 0..self.count() {
            if let Some(catalog) = self.catalog(index).await {
                if catalog.serves(uri) {
                    return Some(index);
                }
            }
        }
        None
    }

    /// Member `index`'s catalog: kept, or read now (every page of its resources and templates,
    /// within bounds). `None` when the member cannot be opened.
    async fn catalog(&self, index: usize) -> Option<Arc<Catalog>> {
        let kept = |members: &Members| members.lock().slots[index].catalog.clone();
        if let Some(catalog) = kept(self) {
            return Some(catalog);
        }
        let _gate = self.catalog_gates[index].lock().await;
        if let Some(catalog) = kept(self) {
            return Some(catalog);
        }
        let upstream = match self.ready(index).await {
            Ok(upstream) => upstream,
            Err(error) => {
                self.warn_down(index, &error);
                return None;
            }
        };
        let (generation, offers) = {
            let state = self.lock();
            let slot = &state.slots[index];
            let offers = slot
                .result
                .as_ref()
                .is_none_or(|result| result["capabilities"]["resources"].is_object());
            (slot.catalog_generation, offers)
        };
        let mut catalog = Catalog::default();
        if offers {
            // The whole reading within one request timeout: a member that pages slowly holds
            // up the routing of the members after it no longer than one slow answer would.
            let timeout = self.server.members[index].request_timeout;
            let deadline = tokio::time::Instant::now() + timeout;
            for list in [methods::RESOURCES_LIST, methods::RESOURCES_TEMPLATES_LIST] {
                let reading = self.read_pages(index, &upstream, list, &mut catalog);
                if tokio::time::timeout_at(deadline, reading).await.is_err() {
                    catalog.cut_short();
                    break;
                }
            }
        }
        if catalog.truncated() {
            let (server, member) = (&self.server.name, self.member_name(index));
            warn!(%server, %member, "a member's resources go on past what a session keeps of them: those past it route to it only through its templates");
        }
        let catalog = Arc::new(catalog);
        let mut state = self.lock();
        let slot = &mut state.slots[index];
        if slot.catalog_generation == generation {
            slot.catalog = Some(catalog.clone());
        }
        Some(catalog)
    }

    /// Every page of member `index`'s `list` into `catalog`, within its bounds (what was taken
    /// in stays, should the reading be given up).
    async fn read_pages(
        &self,
        index: usize,
        upstream: &Upstream,
        list: &str,
        catalog: &mut Catalog,
    ) {
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = cursor
                .as_ref()
                .and_then(|c| serde_json::value::to_raw_value(&json!({ "cursor": c })).ok());
            let page = match self.ask(index, upstream, list, params).await {
                Ok(result) => Page::read(result),
                Err(error) => return debug!(%error, list, "a member's list could not be read"),
            };
            cursor = page.next.clone();
            if !catalog.add(page) || cursor.is_none() {
                return;
            }
        }
        catalog.cut_short();
    }
}

/// A tool or prompt no member has (or none lets clients reach).
fn unknown(kind: Named, name: &str) -> ErrorAnswer {
    match kind {
        Named::Tools => ErrorAnswer::UnknownTool(name.to_owned()),
        Named::Prompts => ErrorAnswer::UnknownPrompt(name.to_owned()),
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
        _ => Params::read(text).and_then(|params| params.with_string("name", name)),
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
