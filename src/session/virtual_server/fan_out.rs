//! Requests every member is asked, their answers merged into one (`merge`): `initialize` (every
//! member opened and initialized at once with the client's params), the lists (`tools/list`,
//! `prompts/list`, `resources/list`, `resources/templates/list`: each member's page through its
//! own rules, under composed names, paged through one cursor) and `logging/setLevel`.

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tracing::{debug, warn};

use super::attribution::Violation;
use super::members::Members;
use super::merge::{self, MemberPage};
use super::names::NameList;
use crate::session::error_answer::ErrorAnswer;
use crate::session::exposure::ResourceList;
use crate::telemetry::metrics::MemberEvent;
use crate::upstream::{Upstream, UpstreamError};
use crate::wire::methods;

/// A list every member is asked for.
#[derive(Debug, Clone, Copy)]
enum List {
    Tools,
    Prompts,
    Resources,
    Templates,
}

impl List {
    fn of(method: &str) -> List {
        match method {
            methods::TOOLS_LIST => List::Tools,
            methods::PROMPTS_LIST => List::Prompts,
            methods::RESOURCES_LIST => List::Resources,
            _ => List::Templates,
        }
    }

    fn method(self) -> &'static str {
        match self {
            List::Tools => methods::TOOLS_LIST,
            List::Prompts => methods::PROMPTS_LIST,
            List::Resources => methods::RESOURCES_LIST,
            List::Templates => methods::RESOURCES_TEMPLATES_LIST,
        }
    }

    /// Its key in a result, and the member of each item that names it.
    fn key_and_identity(self) -> (&'static str, &'static str) {
        match self {
            List::Tools => ("tools", "name"),
            List::Prompts => ("prompts", "name"),
            List::Resources => ("resources", "uri"),
            List::Templates => ("resourceTemplates", "uriTemplate"),
        }
    }
}

impl Members {
    /// The answer to a request every member is asked.
    pub(super) async fn answer_for_all(
        &self,
        method: &str,
        id: &Value,
        params: Option<Box<RawValue>>,
    ) {
        let answer = match method {
            methods::INITIALIZE => self.initialize_all(params).await,
            methods::LOGGING_SET_LEVEL => self.set_level(params).await,
            _ => self.merged_list(List::of(method), params).await,
        };
        match answer {
            Ok(result) => self.answer(id, result),
            Err(refusal) => self.refuse(id, refusal),
        }
    }

    /// Every member initialized with the client's params, at once: the union of their answers.
    async fn initialize_all(&self, params: Option<Box<RawValue>>) -> Result<Value, ErrorAnswer> {
        let linked: Vec<Upstream> = {
            let mut state = self.lock();
            state.initialize = params.or_else(|| serde_json::value::to_raw_value(&json!({})).ok());
            // Members going on in their servers' sessions are initialized there already.
            state
                .slots
                .iter_mut()
                .filter_map(|slot| {
                    let linked = std::mem::take(&mut slot.linked);
                    slot.initialized &= linked;
                    linked.then(|| slot.upstream.clone()).flatten()
                })
                .collect()
        };
        // Their streams open now that the session hears them.
        linked.iter().for_each(Upstream::listen);
        let answers = futures_util::future::join_all(
            (0..self.count()).map(|index| async move { self.ready(index).await.map(|_| ()) }),
        )
        .await;
        let mut failures = Vec::new();
        for (index, answer) in answers.into_iter().enumerate() {
            if let Err(error) = answer {
                self.warn_down(index, &error);
                failures.push(error.to_string());
            }
        }
        if failures.len() == self.count() {
            return Err(ErrorAnswer::NoMember {
                server: self.server.name.clone(),
                causes: failures.join("; "),
            });
        }
        let initialized = self.initialize_results();
        let named: Vec<(&str, &Value)> = initialized
            .iter()
            .map(|(index, result)| (self.member_name(*index), result))
            .collect();
        Ok(merge::initialize(&self.server.name, &named))
    }

    /// What each initialized member answered `initialize`, in order (asked again of none: kept
    /// from its initialization).
    fn initialize_results(&self) -> Vec<(usize, Value)> {
        let state = self.lock();
        state
            .slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.initialized)
            .filter_map(|(index, slot)| Some((index, slot.result.clone()?)))
            .collect()
    }

    async fn set_level(&self, params: Option<Box<RawValue>>) -> Result<Value, ErrorAnswer> {
        let params = &params;
        let asked = (0..self.count()).filter(|index| !self.passed_over(*index));
        futures_util::future::join_all(asked.map(|index| async move {
            let upstream = self.ready(index).await?;
            self.ask(index, &upstream, methods::LOGGING_SET_LEVEL, params.clone())
                .await
        }))
        .await;
        Ok(json!({}))
    }

    /// A list of every member, merged: composed names, the first member's item where two give
    /// the same name or URI, and a cursor that goes on with the members that have more.
    async fn merged_list(
        &self,
        list: List,
        params: Option<Box<RawValue>>,
    ) -> Result<Value, ErrorAnswer> {
        let asked = self.members_asked(params.as_deref())?;
        let pages = futures_util::future::join_all(
            asked
                .iter()
                .map(|(index, cursor)| self.page_of(list, *index, cursor.as_deref())),
        )
        .await;
        let pages: Vec<MemberPage> = asked
            .iter()
            .zip(pages)
            .filter_map(|((index, _), page)| match page {
                Ok(page) => Some(page),
                Err(error) => {
                    self.warn_down(*index, &error);
                    None
                }
            })
            .collect();
        let (key, identity) = list.key_and_identity();
        let merged = merge::lists(key, identity, pages);
        for (index, name) in &merged.malformed {
            self.violated(*index, Violation::List, name);
        }
        for (index, name) in &merged.collisions {
            let (server, member) = (&self.server.name, self.member_name(*index));
            self.server
                .metrics
                .member(member, MemberEvent::NameCollision);
            if self.first_warning(*index, "collision") {
                warn!(%server, %member, %name, "a member of the virtual server offers what a member before it offers: the first in `servers` is seen (more of it at debug level)");
            } else {
                debug!(%server, %member, %name, "a member offers what a member before it offers");
            }
        }
        let mut result = json!({ key: merged.items });
        if let Some(cursor) = merge::cursor(&merged.more) {
            result["nextCursor"] = Value::from(cursor);
        }
        Ok(result)
    }

    /// The members a list asks, each with its cursor: every member from its first page, or
    /// those the virtual server's `cursor` goes on with.
    fn members_asked(
        &self,
        params: Option<&RawValue>,
    ) -> Result<Vec<(usize, Option<String>)>, ErrorAnswer> {
        let cursor = params
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| p["cursor"].as_str().map(str::to_owned));
        let Some(cursor) = cursor else {
            return Ok((0..self.count()).map(|index| (index, None)).collect());
        };
        match merge::read_cursor(&cursor) {
            Some(more) if more.iter().all(|(index, _)| *index < self.count()) => {
                Ok(more.into_iter().map(|(i, c)| (i, Some(c))).collect())
            }
            _ => Err(ErrorAnswer::UnknownCursor(cursor)),
        }
    }

    /// Whether member `index` said at `initialize` that it has `list` (one not initialized is
    /// asked).
    fn offers(&self, index: usize, list: List) -> bool {
        let capability = match list {
            List::Tools => "tools",
            List::Prompts => "prompts",
            List::Resources | List::Templates => "resources",
        };
        let state = self.lock();
        state.slots[index]
            .result
            .as_ref()
            .is_none_or(|result| result["capabilities"][capability].is_object())
    }

    /// Member `index`'s page of `list` from `cursor`, as the virtual server's clients see it.
    async fn page_of(
        &self,
        list: List,
        index: usize,
        cursor: Option<&str>,
    ) -> Result<MemberPage, UpstreamError> {
        let upstream = self.ready(index).await?;
        let empty = MemberPage {
            index,
            items: Vec::new(),
            hidden: Vec::new(),
            next: None,
        };
        if !self.offers(index, list) {
            return Ok(empty);
        }
        if self.passed_over(index) {
            let member = self.member_name(index);
            debug!(%member, "a member that left a request unanswered lately is passed over");
            return Ok(empty);
        }
        let params =
            cursor.and_then(|c| serde_json::value::to_raw_value(&json!({ "cursor": c })).ok());
        let result = match self.ask(index, &upstream, list.method(), params).await {
            Ok(result) => result,
            // It answered: it has no such list, which is no failure of its.
            Err(UpstreamError::Member { cause, .. })
                if matches!(*cause, UpstreamError::RefusedOwn { .. }) =>
            {
                return Ok(empty)
            }
            Err(error) => return Err(error),
        };
        let next = result["nextCursor"].as_str().map(str::to_owned);
        let Ok(raw) = serde_json::value::to_raw_value(&result) else {
            return Ok(empty);
        };
        let names = &self.server.members[index].names;
        let separator = &self.server.separator;
        let items = match list {
            List::Tools => names.list(NameList::Tools, separator, &raw),
            List::Prompts => names.list(NameList::Prompts, separator, &raw),
            List::Resources => names.resources(ResourceList::Resources, &raw),
            List::Templates => names.resources(ResourceList::Templates, &raw),
        }
        .unwrap_or_default();
        // As the merged answer holds them (composed names and all).
        let bytes = items.iter().map(|item| item.to_string().len() + 1).sum();
        self.within_share(index, list.method(), bytes)?;
        // URIs are the same for every member: one a member hides is still its own.
        let hidden = match list {
            List::Resources | List::Templates => hidden(&result, list, &items),
            List::Tools | List::Prompts => Vec::new(),
        };
        Ok(MemberPage {
            index,
            items,
            hidden,
            next,
        })
    }
}

/// What `result` (a member's page of `list`) names that is not among `shown`.
fn hidden(result: &Value, list: List, shown: &[Value]) -> Vec<String> {
    let (key, identity) = list.key_and_identity();
    let shown: std::collections::HashSet<&str> = shown
        .iter()
        .filter_map(|item| item[identity].as_str())
        .collect();
    let named = result[key]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    named
        .iter()
        .filter_map(|item| item[identity].as_str())
        .filter(|name| !shown.contains(name))
        .map(str::to_owned)
        .collect()
}
