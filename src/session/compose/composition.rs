//! One session of a virtual server: an upstream per member, opened when the session is and
//! initialized with the client's `initialize` params, all at once. What the session sends is
//! answered here (`initialize`, `ping`, the lists, `logging/setLevel`: from every member's
//! answers), routed to one member (a tool or prompt by its composed name, a resource by the
//! member that listed it or a template of it, a completion by its `ref`), or sent to every
//! member (notifications). What members say goes to the session as one server's: their requests
//! under ids tagged with the member (`<index>~<id>`), so the client's answer finds its way back,
//! and their log messages naming them. A member that fails fails its own requests with an error
//! naming it; it is opened again when next needed, and the others go on.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::merge;
use super::names::{template_matches, Named};
use super::params::Params;
use super::Composer;
use crate::base::backlog::Backlog;
use crate::session::exposure::ResourceList;
use crate::telemetry::metrics::MemberEvent;
use crate::upstream::composed::{Composed, Sending};
use crate::upstream::credential::Credential;
use crate::upstream::{EventSink, Sink, Upstream, UpstreamError, UpstreamEvent};
use crate::wire::jsonrpc::{
    self, id_key, Kind, Message, INTERNAL_ERROR, INVALID_PARAMS, LEGACY_RESOURCE_NOT_FOUND,
    METHOD_NOT_FOUND,
};
use crate::wire::methods;

/// Before the ids of the virtual server's own requests to its members (not the bridge's own
/// prefix, `mcp-session-proxy/`: a 2026-07-28 member's bridge passes these on).
const OWN: &str = "virtual-server/";
/// Between a member's index and its request's id, as the session's client sees that id.
const TAG: char = '~';
/// The URIs, and the templates, a session remembers the member of (beyond them a URI's member
/// is found by listing again): members' lists cannot grow a session without bound.
const MAX_URIS: usize = 10_000;
const MAX_TEMPLATES: usize = 1_000;

/// An answer to one of the virtual server's own requests.
type Answer = oneshot::Sender<Result<Message, UpstreamError>>;

pub struct Composition {
    composer: Arc<Composer>,
    me: Weak<Composition>,
    /// The session's sink: what the members say, as one server.
    events: EventSink,
    credential: Credential,
    /// Each member's way in here (its upstream's binding holds it weakly).
    sinks: Vec<Arc<MemberSink>>,
    /// One opening or initialization of a member at a time.
    gates: Vec<tokio::sync::Mutex<()>>,
    state: Mutex<State>,
    next_own: AtomicU64,
    released: CancellationToken,
}

#[derive(Default)]
struct State {
    /// Each member's upstream; `None`: down (it could not be opened, or went away), opened
    /// again when next needed.
    upstreams: Vec<Option<Upstream>>,
    /// Whether each member's upstream has answered `initialize`.
    initialized: Vec<bool>,
    /// Members going on in the session their server keeps for a session taken over: their
    /// server-to-client stream is opened once the session is bound (at its `initialize`).
    linked: Vec<bool>,
    /// What each member answered `initialize`, last time.
    results: Vec<Option<Value>>,
    /// The client's `initialize` params, with which every member is initialized.
    initialize: Option<Box<RawValue>>,
    /// Whether the client said `notifications/initialized` (a member initialized later is told).
    client_initialized: bool,
    /// The session's requests in flight at a member: its upstream id → the member.
    inflight: BTreeMap<u64, usize>,
    /// The virtual server's own requests: their id → the member and who waits for the answer.
    pending: HashMap<String, (usize, Answer)>,
    /// Which member listed each URI, and each template, in the lists clients were given.
    uris: HashMap<String, usize>,
    templates: Vec<(String, usize)>,
    /// The session's subscriptions, by URI: the member that has each (again after it restarts).
    subscriptions: HashMap<String, usize>,
    /// Each member's first page of each list, until the member says that list changed (or is
    /// opened again): a list asks only the members whose lists changed.
    lists: HashMap<(&'static str, usize), Value>,
}

impl State {
    /// Forgets member `index`'s lists that `notification` says changed (all, for `None`).
    fn forget_lists(&mut self, index: usize, notification: Option<&str>) {
        let changed: &[&str] = match notification {
            Some(methods::TOOLS_LIST_CHANGED) => &[methods::TOOLS_LIST],
            Some(methods::PROMPTS_LIST_CHANGED) => &[methods::PROMPTS_LIST],
            Some(methods::RESOURCES_LIST_CHANGED) => {
                &[methods::RESOURCES_LIST, methods::RESOURCES_TEMPLATES_LIST]
            }
            Some(_) => &[],
            None => &[
                methods::TOOLS_LIST,
                methods::PROMPTS_LIST,
                methods::RESOURCES_LIST,
                methods::RESOURCES_TEMPLATES_LIST,
            ],
        };
        self.lists
            .retain(|(list, member), _| *member != index || !changed.contains(list));
    }
}

impl Composition {
    pub fn start(
        composer: Arc<Composer>,
        credential: Credential,
        events: EventSink,
        resumed: Option<&str>,
    ) -> Arc<Composition> {
        let count = composer.members.len();
        let composition = Arc::new_cyclic(|me: &Weak<Composition>| Composition {
            sinks: (0..count)
                .map(|index| {
                    Arc::new(MemberSink {
                        index,
                        composition: me.clone(),
                    })
                })
                .collect(),
            gates: (0..count).map(|_| tokio::sync::Mutex::new(())).collect(),
            composer,
            me: me.clone(),
            events,
            credential,
            state: Mutex::new(State {
                upstreams: vec![None; count],
                initialized: vec![false; count],
                linked: vec![false; count],
                results: vec![None; count],
                ..State::default()
            }),
            next_own: AtomicU64::new(1),
            released: CancellationToken::new(),
        });
        let resumed: BTreeMap<String, String> = resumed
            .and_then(|record| serde_json::from_str::<Record>(record).ok())
            .map(|record| record.members)
            .unwrap_or_default();
        for index in 0..count {
            let member = composition.member_name(index);
            if let Err(error) = composition.open(index, resumed.get(member).map(String::as_str)) {
                composition.warn_down(index, &error);
            }
        }
        composition
    }

    /// The sessions the members' servers keep, as the shared store holds them.
    fn record(&self) -> Option<String> {
        let state = self.lock();
        let members: BTreeMap<String, String> = state
            .upstreams
            .iter()
            .enumerate()
            .filter_map(|(index, upstream)| {
                let record = upstream.as_ref()?.upstream_session_record()?;
                Some((self.member_name(index).to_owned(), record))
            })
            .collect();
        (!members.is_empty())
            .then(|| serde_json::to_string(&Record { members }).unwrap_or_default())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn member_name(&self, index: usize) -> &str {
        &self.composer.members[index].names.name
    }

    fn member_error(&self, index: usize, cause: UpstreamError) -> UpstreamError {
        match cause {
            named @ UpstreamError::Member { .. } => named,
            cause => UpstreamError::Member {
                member: self.member_name(index).to_owned(),
                cause: Box::new(cause),
            },
        }
    }

    fn warn_down(&self, index: usize, error: &UpstreamError) {
        let (server, member) = (&self.composer.name, self.member_name(index));
        self.composer.metrics.member(member, MemberEvent::Down);
        warn!(%server, %member, %error, "a member of the virtual server is down for this session; it is tried again when next needed");
    }

    /// A new upstream for member `index` (a child started, an HTTP session to be opened), or
    /// one going on in the session its server keeps (`resumed`, as another replica's record
    /// has it), which needs no `initialize`.
    fn open(&self, index: usize, resumed: Option<&str>) -> Result<Upstream, UpstreamError> {
        let factory = &self.composer.members[index].factory;
        let credential = self.credential.for_member(self.member_name(index));
        let opened = match resumed {
            Some(record) => factory.resume(credential, Some(record)),
            None => factory.build(credential),
        };
        let (upstream, binding) = opened.map_err(|cause| self.member_error(index, cause))?;
        let sink: Arc<dyn Sink> = self.sinks[index].clone();
        binding.bind(Arc::downgrade(&sink));
        let linked = resumed.is_some() && upstream.upstream_session().is_some();
        let mut state = self.lock();
        state.upstreams[index] = Some(upstream.clone());
        state.initialized[index] = linked;
        state.linked[index] = linked;
        state.forget_lists(index, None);
        Ok(upstream)
    }

    /// Member `index`'s upstream, opened and initialized (once the client's `initialize` is
    /// known) if it was not.
    async fn ready(&self, index: usize) -> Result<Upstream, UpstreamError> {
        // The usual case, without waiting for the gate: open and initialized.
        {
            let state = self.lock();
            if let (Some(upstream), true) = (&state.upstreams[index], state.initialized[index]) {
                return Ok(upstream.clone());
            }
        }
        let _gate = self.gates[index].lock().await;
        let (upstream, initialized, params) = {
            let state = self.lock();
            (
                state.upstreams[index].clone(),
                state.initialized[index],
                state.initialize.clone(),
            )
        };
        let upstream = match upstream {
            Some(upstream) => upstream,
            None => self.open(index, None)?,
        };
        if let (false, Some(params)) = (initialized, params) {
            if let Err(error) = self.initialize_member(index, &upstream, params).await {
                self.down(index, &upstream);
                return Err(error);
            }
        }
        Ok(upstream)
    }

    /// `initialize` (with the client's params), then `notifications/initialized` if the client
    /// said it, then the member's subscriptions again: its result.
    async fn initialize_member(
        &self,
        index: usize,
        upstream: &Upstream,
        params: Box<RawValue>,
    ) -> Result<Value, UpstreamError> {
        let result = self
            .ask(index, upstream, methods::INITIALIZE, Some(params))
            .await?;
        let (told, subscriptions) = {
            let mut state = self.lock();
            state.initialized[index] = true;
            state.results[index] = Some(result.clone());
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
    fn down(&self, index: usize, upstream: &Upstream) {
        upstream.release();
        let mut state = self.lock();
        state.upstreams[index] = None;
        state.initialized[index] = false;
    }

    /// A request of the virtual server's own to member `index`: its result, or why not (the
    /// member's error, or no answer within the request timeout).
    async fn ask(
        &self,
        index: usize,
        upstream: &Upstream,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<Value, UpstreamError> {
        let id = format!("{OWN}{}", self.next_own.fetch_add(1, Ordering::Relaxed));
        let (answer, answered) = oneshot::channel();
        self.lock().pending.insert(id.clone(), (index, answer));
        let request = Message::request(Some(Value::from(id.as_str())), method, params);
        if let Err(cause) = upstream.send(request).await {
            self.lock().pending.remove(&id);
            return Err(self.member_error(index, cause));
        }
        let timeout = self.composer.request_timeout;
        let answer = match tokio::time::timeout(timeout, answered).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(UpstreamError::Gone),
            Err(_) => {
                self.lock().pending.remove(&id);
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
                error: error.get().to_owned(),
            };
            return Err(self.member_error(index, refused));
        }
        let result = answer.result().map(RawValue::get).unwrap_or("null");
        Ok(serde_json::from_str(result).unwrap_or(Value::Null))
    }

    /// Gives the answer to one of the virtual server's own requests to whoever waits for it.
    fn settle(&self, id: &str, answer: Result<Message, UpstreamError>) {
        if let Some((_, waiting)) = self.lock().pending.remove(id) {
            let _ = waiting.send(answer);
        }
    }

    fn deliver(&self, message: Message) {
        self.events
            .deliver(UpstreamEvent::Message(Box::new(message)));
    }

    fn answer(&self, id: &Value, result: Value) {
        self.deliver(Message::response(id, result));
    }

    fn refuse(&self, id: &Value, code: i64, text: &str, data: Option<Value>) {
        let answer = jsonrpc::error_response(id, code, text, data);
        match Message::parse(answer) {
            Ok(message) => self.deliver(message),
            Err(error) => debug!(%error, "an error answer that does not parse"),
        }
    }

    // ----- from the session -----

    async fn take(&self, message: Message) -> Result<(), UpstreamError> {
        if self.released.is_cancelled() {
            return Err(UpstreamError::Gone);
        }
        match message.kind() {
            Kind::Request => {
                self.request(message).await;
                Ok(())
            }
            Kind::Notification => {
                self.notify(message).await;
                Ok(())
            }
            Kind::Response => {
                self.answer_member(message).await;
                Ok(())
            }
        }
    }

    async fn request(&self, message: Message) {
        let method = message.method().unwrap_or_default().to_owned();
        let id = message.id().cloned().unwrap_or(Value::Null);
        match method.as_str() {
            methods::PING => self.answer(&id, json!({})),
            methods::INITIALIZE
            | methods::TOOLS_LIST
            | methods::PROMPTS_LIST
            | methods::RESOURCES_LIST
            | methods::RESOURCES_TEMPLATES_LIST
            | methods::LOGGING_SET_LEVEL => {
                // Every member is asked: answered from a task of its own, so the session's
                // next message is not held behind the slowest member.
                let Some(me) = self.me.upgrade() else {
                    return;
                };
                let params = message.params().map(|p| p.to_owned());
                tokio::spawn(async move { me.answer_for_all(&method, &id, params).await });
            }
            methods::TOOLS_CALL
            | methods::PROMPTS_GET
            | methods::RESOURCES_READ
            | methods::RESOURCES_SUBSCRIBE
            | methods::RESOURCES_UNSUBSCRIBE
            | methods::COMPLETION_COMPLETE => self.route(message, &method, &id).await,
            _ => self.refuse(
                &id,
                METHOD_NOT_FOUND,
                &format!("Method not found: {method} (a virtual server routes its members' tools, prompts, resources and completions)"),
                None,
            ),
        }
    }

    /// A `tools/call` or `prompts/get` routed without waiting, when every member is open and
    /// initialized: the member and its upstream, the name in `message` made the member's own
    /// and the request noted in flight there. `None` (and `message` unchanged): the long way.
    fn route_at_once(&self, message: &mut Message) -> Option<(usize, Upstream)> {
        let kind = match (message.kind(), message.method()) {
            (Kind::Request, Some(methods::TOOLS_CALL)) => Named::Tools,
            (Kind::Request, Some(methods::PROMPTS_GET)) => Named::Prompts,
            _ => return None,
        };
        let mut state = self.lock();
        if !state.initialized.iter().all(|done| *done) {
            return None;
        }
        let index = self.by_name(kind, message, &["name"]).ok()?;
        let upstream = state.upstreams[index].clone()?;
        if let Some(n) = message.id().and_then(Value::as_u64) {
            state.inflight.insert(n, index);
        }
        Some((index, upstream))
    }

    /// Sends a request [`Self::route_at_once`] routed; one its member cannot take is answered
    /// with why.
    async fn send_routed(
        &self,
        index: usize,
        upstream: Upstream,
        message: Message,
    ) -> Result<(), UpstreamError> {
        let id = message.id().cloned().unwrap_or(Value::Null);
        if let Err(cause) = upstream.send(message).await {
            if let Some(n) = id.as_u64() {
                self.lock().inflight.remove(&n);
            }
            let error = self.member_error(index, cause);
            self.refuse(&id, INTERNAL_ERROR, &error.to_string(), None);
        }
        Ok(())
    }

    /// A request routed to the member it names.
    async fn route(&self, mut message: Message, method: &str, id: &Value) {
        let target = match method {
            methods::TOOLS_CALL => self.by_name(Named::Tools, &mut message, &["name"]),
            methods::PROMPTS_GET => self.by_name(Named::Prompts, &mut message, &["name"]),
            methods::COMPLETION_COMPLETE => self.by_reference(&mut message).await,
            _ => self.by_uri(&message).await,
        };
        let index = match target {
            Ok(index) => index,
            Err(refusal) => return self.refuse(id, refusal.code, &refusal.text, refusal.data),
        };
        let upstream = match self.ready(index).await {
            Ok(upstream) => upstream,
            Err(error) => {
                self.warn_down(index, &error);
                return self.refuse(id, INTERNAL_ERROR, &error.to_string(), None);
            }
        };
        let subscription = match method {
            methods::RESOURCES_SUBSCRIBE | methods::RESOURCES_UNSUBSCRIBE => uri_of(&message),
            _ => None,
        };
        {
            let mut state = self.lock();
            if let Some(n) = id.as_u64() {
                state.inflight.insert(n, index);
            }
            match (method, subscription) {
                (methods::RESOURCES_SUBSCRIBE, Some(uri)) => {
                    state.subscriptions.insert(uri, index);
                }
                (_, Some(uri)) => {
                    state.subscriptions.remove(&uri);
                }
                _ => {}
            }
        }
        if let Err(cause) = upstream.send(message).await {
            if let Some(n) = id.as_u64() {
                self.lock().inflight.remove(&n);
            }
            let error = self.member_error(index, cause);
            self.refuse(id, INTERNAL_ERROR, &error.to_string(), None);
        }
    }

    /// The member whose tool or prompt the params' `path` names, that name replaced by the
    /// member's own.
    fn by_name(&self, kind: Named, message: &mut Message, path: &[&str]) -> Result<usize, Refusal> {
        if path == ["name"] {
            return self.by_top_name(kind, message);
        }
        let mut params: Value = message
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let slot = path
            .iter()
            .try_fold(&mut params, |value, key| value.get_mut(*key));
        let Some(slot) = slot else {
            return Err(unknown(kind, ""));
        };
        let composed = slot.as_str().unwrap_or_default().to_owned();
        let (index, name) = self
            .member_of_name(kind, &composed)
            .ok_or_else(|| unknown(kind, &composed))?;
        *slot = Value::from(name);
        if let Ok(params) = serde_json::value::to_raw_value(&params) {
            message.set_params(params);
        }
        Ok(index)
    }

    /// [`Self::by_name`] for the params' own `name` (`tools/call`, `prompts/get`): the other
    /// params (a call's arguments) are carried as they came, not read, and the params written
    /// once, not parsed again.
    fn by_top_name(&self, kind: Named, message: &mut Message) -> Result<usize, Refusal> {
        let params = Params::read(message.params().map(RawValue::get).unwrap_or("{}"));
        let composed = params
            .as_ref()
            .and_then(|params| params.string("name"))
            .unwrap_or_default();
        let (index, name) = self
            .member_of_name(kind, &composed)
            .ok_or_else(|| unknown(kind, &composed))?;
        if let Some(renamed) = params.and_then(|params| params.with_string("name", &name)) {
            message.set_params(renamed);
        }
        Ok(index)
    }

    /// The first member (in `servers`) whose tool or prompt clients call `composed`, and the
    /// member's own name of it.
    fn member_of_name(&self, kind: Named, composed: &str) -> Option<(usize, String)> {
        let separator = &self.composer.separator;
        self.composer
            .members
            .iter()
            .enumerate()
            .find_map(|(i, m)| Some((i, m.names.server_name(kind, separator, composed)?)))
    }

    /// The member a `completion/complete` is for: a prompt's by its name, a resource template's
    /// by its URI.
    async fn by_reference(&self, message: &mut Message) -> Result<usize, Refusal> {
        let kind = message
            .params_as::<Value>()
            .and_then(|p| p["ref"]["type"].as_str().map(str::to_owned))
            .unwrap_or_default();
        match kind.as_str() {
            "ref/prompt" => self.by_name(Named::Prompts, message, &["ref", "name"]),
            _ => {
                let uri = message
                    .params_as::<Value>()
                    .and_then(|p| p["ref"]["uri"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                self.member_of_uri(&uri).await
            }
        }
    }

    async fn by_uri(&self, message: &Message) -> Result<usize, Refusal> {
        let uri = uri_of(message).unwrap_or_default();
        self.member_of_uri(&uri).await
    }

    /// The member that listed `uri` (or a template it matches, or that template itself); the
    /// members' resources are listed first where none did.
    async fn member_of_uri(&self, uri: &str) -> Result<usize, Refusal> {
        if let Some(index) = self.known_member_of(uri) {
            return Ok(index);
        }
        for list in [ResourceList::Resources, ResourceList::Templates] {
            let method = match list {
                ResourceList::Resources => methods::RESOURCES_LIST,
                ResourceList::Templates => methods::RESOURCES_TEMPLATES_LIST,
            };
            let _ = self.merged_list(method, None).await;
        }
        self.known_member_of(uri).ok_or_else(|| Refusal {
            code: LEGACY_RESOURCE_NOT_FOUND,
            text: format!("Resource not found: {uri}"),
            data: Some(json!({ "uri": uri })),
        })
    }

    fn known_member_of(&self, uri: &str) -> Option<usize> {
        let state = self.lock();
        if let Some(index) = state.uris.get(uri) {
            return Some(*index);
        }
        state
            .templates
            .iter()
            .find(|(template, _)| template == uri || template_matches(template, uri))
            .map(|(_, index)| *index)
    }

    /// The answer to a request every member is asked.
    async fn answer_for_all(&self, method: &str, id: &Value, params: Option<Box<RawValue>>) {
        let answer = match method {
            methods::INITIALIZE => self.initialize_all(params).await,
            methods::LOGGING_SET_LEVEL => self.set_level(params).await,
            _ => self.merged_list(method, params).await,
        };
        match answer {
            Ok(result) => self.answer(id, result),
            Err(refusal) => self.refuse(id, refusal.code, &refusal.text, refusal.data),
        }
    }

    /// Every member initialized with the client's params, at once: the union of their answers.
    async fn initialize_all(&self, params: Option<Box<RawValue>>) -> Result<Value, Refusal> {
        let linked: Vec<Upstream> = {
            let mut state = self.lock();
            state.initialize = params.or_else(|| serde_json::value::to_raw_value(&json!({})).ok());
            // Members going on in their servers' sessions are initialized there already.
            let linked = std::mem::take(&mut state.linked);
            state.linked = vec![false; linked.len()];
            for (index, linked) in linked.iter().enumerate() {
                state.initialized[index] &= *linked;
            }
            linked
                .iter()
                .zip(&state.upstreams)
                .filter(|(linked, _)| **linked)
                .filter_map(|(_, upstream)| upstream.clone())
                .collect()
        };
        // Their streams open now that the session hears them.
        linked.iter().for_each(Upstream::listen);
        let count = self.composer.members.len();
        let answers = futures_util::future::join_all(
            (0..count).map(|index| async move { self.ready(index).await.map(|_| ()) }),
        )
        .await;
        let mut results = Vec::new();
        let mut failures = Vec::new();
        for (index, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(()) => results.push(index),
                Err(error) => {
                    self.warn_down(index, &error);
                    failures.push(error.to_string());
                }
            }
        }
        if results.is_empty() {
            return Err(Refusal::new(
                INTERNAL_ERROR,
                format!(
                    "no member of the virtual server {} could be opened: {}",
                    self.composer.name,
                    failures.join("; ")
                ),
            ));
        }
        let initialized = self.initialize_results();
        let named: Vec<(&str, &Value)> = initialized
            .iter()
            .map(|(index, result)| (self.member_name(*index), result))
            .collect();
        Ok(merge::initialize(&self.composer.name, &named))
    }

    /// What each initialized member answered `initialize`, in order (asked again of none: kept
    /// from its initialization).
    fn initialize_results(&self) -> Vec<(usize, Value)> {
        let state = self.lock();
        state
            .results
            .iter()
            .enumerate()
            .filter(|(i, _)| state.initialized[*i])
            .filter_map(|(i, r)| Some((i, r.clone()?)))
            .collect()
    }

    async fn set_level(&self, params: Option<Box<RawValue>>) -> Result<Value, Refusal> {
        let count = self.composer.members.len();
        let params = &params;
        futures_util::future::join_all((0..count).map(|index| async move {
            let upstream = self.ready(index).await?;
            self.ask(index, &upstream, methods::LOGGING_SET_LEVEL, params.clone())
                .await
        }))
        .await;
        Ok(json!({}))
    }

    /// A list (`tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`) of
    /// every member, merged: composed names, the first member's item where two give the same
    /// name or URI, and a cursor that goes on with the members that have more.
    async fn merged_list(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<Value, Refusal> {
        let method: &'static str = match method {
            methods::TOOLS_LIST => methods::TOOLS_LIST,
            methods::PROMPTS_LIST => methods::PROMPTS_LIST,
            methods::RESOURCES_LIST => methods::RESOURCES_LIST,
            _ => methods::RESOURCES_TEMPLATES_LIST,
        };
        let cursor = params
            .as_deref()
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| p["cursor"].as_str().map(str::to_owned));
        let asked: Vec<(usize, Option<String>)> = match cursor {
            None => (0..self.composer.members.len())
                .map(|i| (i, None))
                .collect(),
            Some(cursor) => match merge::read_cursor(&cursor) {
                Some(more) if more.iter().all(|(i, _)| *i < self.composer.members.len()) => {
                    more.into_iter().map(|(i, c)| (i, Some(c))).collect()
                }
                _ => {
                    return Err(Refusal::new(
                        INVALID_PARAMS,
                        format!("Invalid params: unknown cursor {cursor:?}"),
                    ))
                }
            },
        };
        let answers =
            futures_util::future::join_all(asked.iter().map(|(index, cursor)| async move {
                // A member's first page, kept until it says its list changed.
                let kept = (method, *index);
                if cursor.is_none() {
                    if let Some(result) = self.lock().lists.get(&kept) {
                        return Ok(result.clone());
                    }
                }
                let upstream = self.ready(*index).await?;
                let params = cursor
                    .as_ref()
                    .and_then(|c| serde_json::value::to_raw_value(&json!({ "cursor": c })).ok());
                let result = self.ask(*index, &upstream, method, params).await?;
                if cursor.is_none() {
                    self.lock().lists.insert(kept, result.clone());
                }
                Ok(result)
            }))
            .await;
        let (key, identity) = match method {
            methods::TOOLS_LIST => ("tools", "name"),
            methods::PROMPTS_LIST => ("prompts", "name"),
            methods::RESOURCES_LIST => ("resources", "uri"),
            _ => ("resourceTemplates", "uriTemplate"),
        };
        let mut seen = HashSet::new();
        let mut items = Vec::new();
        let mut more = Vec::new();
        let mut listed = Vec::new();
        for ((index, _), answer) in asked.iter().zip(answers) {
            let result = match answer {
                Ok(result) => result,
                Err(error) => {
                    self.warn_down(*index, &error);
                    continue;
                }
            };
            if let Some(next) = result["nextCursor"].as_str() {
                more.push((*index, next.to_owned()));
            }
            let Ok(raw) = serde_json::value::to_raw_value(&result) else {
                continue;
            };
            let names = &self.composer.members[*index].names;
            let separator = &self.composer.separator;
            let member_items = match method {
                methods::TOOLS_LIST => names.list(Named::Tools, separator, &raw),
                methods::PROMPTS_LIST => names.list(Named::Prompts, separator, &raw),
                methods::RESOURCES_LIST => names.resources(ResourceList::Resources, &raw),
                _ => names.resources(ResourceList::Templates, &raw),
            };
            for item in member_items.unwrap_or_default() {
                let Some(name) = item[identity].as_str().map(str::to_owned) else {
                    continue;
                };
                if !seen.insert(name.clone()) {
                    let (server, member) = (&self.composer.name, self.member_name(*index));
                    self.composer
                        .metrics
                        .member(member, MemberEvent::NameCollision);
                    warn!(%server, %member, %name, "two members of the virtual server offer the same name: the first in `servers` is seen");
                    continue;
                }
                listed.push((name, *index));
                items.push(item);
            }
        }
        {
            let mut state = self.lock();
            for (name, index) in listed {
                match identity {
                    "uri" if state.uris.len() < MAX_URIS || state.uris.contains_key(&name) => {
                        state.uris.insert(name, index);
                    }
                    "uriTemplate" => {
                        state.templates.retain(|(template, _)| *template != name);
                        if state.templates.len() < MAX_TEMPLATES {
                            state.templates.push((name, index));
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut result = json!({ key: items });
        if let Some(cursor) = merge::cursor(&more) {
            result["nextCursor"] = Value::from(cursor);
        }
        Ok(result)
    }

    /// A notification of the client's: a cancellation to the member that has the request,
    /// anything else to every member initialized.
    async fn notify(&self, message: Message) {
        let method = message.method().unwrap_or_default();
        let targets: Vec<(usize, Upstream)> = {
            let mut state = self.lock();
            if method == methods::INITIALIZED {
                state.client_initialized = true;
            }
            let only = match method {
                methods::CANCELLED => {
                    let request = message
                        .params_as::<Value>()
                        .and_then(|p| p["requestId"].as_u64());
                    // The request is over for the session: its member is told, and it is
                    // forgotten here whether or not the member answers.
                    match request.and_then(|n| state.inflight.remove(&n)) {
                        Some(index) => Some(index),
                        None => return,
                    }
                }
                _ => None,
            };
            state
                .upstreams
                .iter()
                .enumerate()
                .filter(|(index, _)| only.is_none_or(|only| only == *index))
                .filter(|(index, _)| state.initialized[*index])
                .filter_map(|(index, upstream)| Some((index, upstream.clone()?)))
                .collect()
        };
        for (index, upstream) in targets {
            if let Err(error) = upstream.send(message.clone()).await {
                debug!(member = self.member_name(index), %error, "a notification did not reach a member");
            }
        }
    }

    /// The client's answer to a member's request: to that member, under its own id.
    async fn answer_member(&self, mut message: Message) {
        let Some((index, id)) = message.id().and_then(untag) else {
            debug!("an answer to no member's request; dropped");
            return;
        };
        let upstream = self.lock().upstreams.get(index).cloned().flatten();
        let Some(upstream) = upstream else {
            return;
        };
        message.set_id(id);
        if let Err(error) = upstream.send(message).await {
            debug!(member = self.member_name(index), %error, "an answer did not reach its member");
        }
    }

    // ----- from the members -----

    fn heard(&self, index: usize, mut message: Message) {
        match message.kind() {
            Kind::Response => {
                if let Some(Value::String(own)) = message.id() {
                    if own.starts_with(OWN) {
                        let own = own.clone();
                        return self.settle(&own, Ok(message));
                    }
                }
                if let Some(n) = message.id().and_then(Value::as_u64) {
                    self.lock().inflight.remove(&n);
                }
            }
            Kind::Request => {
                let tagged = tag(index, message.id().unwrap_or(&Value::Null));
                message.set_id(tagged);
            }
            Kind::Notification => match message.method() {
                // A member cancels a request of its own: under the id the client knows it by.
                Some(methods::CANCELLED) => {
                    if let Some(mut params) = message.params_as::<Value>() {
                        if let Some(request) = params.get("requestId").cloned() {
                            params["requestId"] = tag(index, &request);
                            if let Ok(params) = serde_json::value::to_raw_value(&params) {
                                message.set_params(params);
                            }
                        }
                    }
                }
                Some(
                    changed @ (methods::TOOLS_LIST_CHANGED
                    | methods::PROMPTS_LIST_CHANGED
                    | methods::RESOURCES_LIST_CHANGED),
                ) => self.lock().forget_lists(index, Some(changed)),
                // A log message names its member.
                Some(methods::MESSAGE) => {
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
                }
                _ => {}
            },
        }
        self.deliver(message);
    }

    fn on_member(&self, index: usize, event: UpstreamEvent) {
        match event {
            UpstreamEvent::Message(message) => self.heard(index, *message),
            UpstreamEvent::Oversized { id, max } => {
                let cause = UpstreamError::Oversized(max);
                match id.as_deref() {
                    Some(Value::String(own)) if own.starts_with(OWN) => {
                        self.settle(own, Err(cause))
                    }
                    _ => {
                        if let Some(n) = id.as_deref().and_then(Value::as_u64) {
                            self.lock().inflight.remove(&n);
                        }
                        self.events.deliver(UpstreamEvent::Oversized { id, max });
                    }
                }
            }
            UpstreamEvent::Failed { id, cause } => {
                let cause = self.member_error(index, cause);
                match id.as_str() {
                    Some(own) if own.starts_with(OWN) => self.settle(own, Err(cause)),
                    _ => {
                        if let Some(n) = id.as_u64() {
                            self.lock().inflight.remove(&n);
                        }
                        self.events.deliver(UpstreamEvent::Failed { id, cause });
                    }
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

    /// Fails what member `index` had in flight, with `cause` naming it; `gone`: it is down
    /// until next needed.
    fn fail_member(&self, index: usize, cause: UpstreamError, gone: bool) {
        let cause = self.member_error(index, cause);
        let (requests, own) = {
            let mut state = self.lock();
            let requests: Vec<u64> = state
                .inflight
                .iter()
                .filter(|(_, member)| **member == index)
                .map(|(n, _)| *n)
                .collect();
            requests.iter().for_each(|n| {
                state.inflight.remove(n);
            });
            let own: Vec<String> = state
                .pending
                .iter()
                .filter(|(_, (member, _))| *member == index)
                .map(|(id, _)| id.clone())
                .collect();
            let own: Vec<Answer> = own
                .iter()
                .filter_map(|id| state.pending.remove(id).map(|(_, answer)| answer))
                .collect();
            if gone {
                state.upstreams[index] = None;
                state.initialized[index] = false;
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
            self.events.deliver(UpstreamEvent::Failed {
                id: Box::new(Value::from(n)),
                cause: cause.clone(),
            });
        }
    }

    /// Member `index`'s server forgot its session: initialized again with the client's params
    /// (its upstream holds other traffic until told how that went).
    async fn reestablish(&self, index: usize) {
        let _gate = self.gates[index].lock().await;
        let (upstream, params) = {
            let mut state = self.lock();
            state.initialized[index] = false;
            (state.upstreams[index].clone(), state.initialize.clone())
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

    fn release_with(&self, let_go: impl Fn(&Upstream)) {
        self.released.cancel();
        let upstreams: Vec<Upstream> = {
            let mut state = self.lock();
            state.pending.clear();
            state
                .upstreams
                .iter_mut()
                .filter_map(Option::take)
                .collect()
        };
        upstreams.iter().for_each(let_go);
    }
}

impl Composed for Composition {
    fn send(&self, mut message: Message) -> Sending<'_> {
        // The usual call, every member up: routed here, its future no larger than the send.
        if let Some((index, upstream)) = self.route_at_once(&mut message) {
            return Box::pin(self.send_routed(index, upstream, message));
        }
        Box::pin(self.take(message))
    }

    fn release(&self) {
        self.release_with(Upstream::release);
    }

    fn detach(&self) {
        self.release_with(Upstream::detach);
    }

    fn record(&self) -> Option<String> {
        Composition::record(self)
    }
}

/// What the shared store holds of a virtual server's session: the session each member's
/// server keeps, by member.
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    members: BTreeMap<String, String>,
}

/// A member's way into its session's composition.
struct MemberSink {
    index: usize,
    composition: Weak<Composition>,
}

impl Sink for MemberSink {
    fn deliver(&self, event: UpstreamEvent) {
        if let Some(composition) = self.composition.upgrade() {
            composition.on_member(self.index, event);
        }
    }

    fn backlog(&self) -> Option<Arc<Backlog>> {
        self.composition.upgrade()?.events.backlog()
    }
}

/// Why a request is answered here rather than by a member.
struct Refusal {
    code: i64,
    text: String,
    data: Option<Value>,
}

impl Refusal {
    fn new(code: i64, text: String) -> Refusal {
        Refusal {
            code,
            text,
            data: None,
        }
    }
}

/// The refusal of a call of a tool (or a get of a prompt) no member has.
fn unknown(kind: Named, name: &str) -> Refusal {
    let what = match kind {
        Named::Tools => "tool",
        Named::Prompts => "prompt",
    };
    Refusal::new(INVALID_PARAMS, format!("Unknown {what}: {name}"))
}

/// The `uri` a request's params name.
fn uri_of(message: &Message) -> Option<String> {
    message
        .params_as::<Value>()
        .and_then(|p| p["uri"].as_str().map(str::to_owned))
}

/// Member `index`'s request id, as the session's client sees it.
fn tag(index: usize, id: &Value) -> Value {
    Value::from(format!("{index}{TAG}{}", id_key(id)))
}

/// The member and its own id of an id [`tag`] made.
fn untag(id: &Value) -> Option<(usize, Value)> {
    let (index, id) = id.as_str()?.split_once(TAG)?;
    Some((index.parse().ok()?, serde_json::from_str(id).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_members_list_changed_forgets_that_list_of_that_member_only() {
        let mut state = State::default();
        for list in [
            methods::TOOLS_LIST,
            methods::PROMPTS_LIST,
            methods::RESOURCES_LIST,
        ] {
            for member in [0, 1] {
                state.lists.insert((list, member), json!({}));
            }
        }
        state.forget_lists(1, Some(methods::TOOLS_LIST_CHANGED));
        assert!(!state.lists.contains_key(&(methods::TOOLS_LIST, 1)));
        assert!(state.lists.contains_key(&(methods::TOOLS_LIST, 0)));
        assert!(state.lists.contains_key(&(methods::PROMPTS_LIST, 1)));
        state.forget_lists(0, Some(methods::RESOURCES_LIST_CHANGED));
        assert!(!state.lists.contains_key(&(methods::RESOURCES_LIST, 0)));
        state.forget_lists(1, None);
        assert_eq!(state.lists.len(), 2, "member 0's tools and prompts");
    }

    #[test]
    fn a_members_request_id_is_tagged_and_untagged_whatever_its_type() {
        for id in [json!(7), json!("abc"), json!("a~b"), json!(-1.5)] {
            let tagged = tag(3, &id);
            assert!(tagged.is_string());
            assert_eq!(untag(&tagged), Some((3, id)));
        }
        assert_eq!(untag(&json!(7)), None);
        assert_eq!(untag(&json!("no tag")), None);
    }
}
