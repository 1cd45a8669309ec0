//! `subscriptions/listen`: the 2026-07-28 way to hear of changes. A long-lived SSE answer
//! that starts with `notifications/subscriptions/acknowledged` (what the server can send, of
//! what was asked), then carries the session's `*/list_changed` and `resources/updated`
//! notifications the filter asked for, each tagged with the listen's id; resource
//! subscriptions become upstream `resources/subscribe` (counted per session, released when the
//! last listen for a URI ends). At shutdown the listen ends with its result.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use dashmap::DashMap;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::front::event_stream::{self, Ended, Next, Options, Source};
use crate::front::rejection::Rejection;
use crate::front::request::ask;
use crate::front::App;
use crate::session::correlate::Correlated;
use crate::session::{Reader, Registry, Session};
use crate::wire::era::request::Unfit;
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::{self, Message};
use crate::wire::methods::{
    PROMPTS_LIST_CHANGED, RESOURCES_LIST_CHANGED, RESOURCES_SUBSCRIBE, RESOURCES_UNSUBSCRIBE,
    RESOURCES_UPDATED, SUBSCRIPTIONS_ACKNOWLEDGED, SUBSCRIPTIONS_LISTEN, TOOLS_LIST_CHANGED,
};
use crate::wire::sse;

use crate::wire::era::SUBSCRIPTION_ID_KEY as SUBSCRIPTION_ID;

/// What a listen asks for, or what the server can send of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: BTreeSet<String>,
}

/// Why a listen's params ask for nothing the proxy can read.
#[derive(Debug, thiserror::Error)]
enum FilterRefused {
    #[error("subscriptions/listen needs a notifications object")]
    NoNotifications,
    #[error("resourceSubscriptions must be strings")]
    UrisNotStrings,
    #[error("resourceSubscriptions must be an array")]
    UrisNotAnArray,
}

impl Filter {
    fn asked(params: &Value) -> Result<Filter, FilterRefused> {
        let notifications = match params.get("notifications") {
            Some(Value::Object(n)) => n,
            _ => return Err(FilterRefused::NoNotifications),
        };
        let flag = |name: &str| {
            notifications
                .get(name)
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let uris = match notifications.get("resourceSubscriptions") {
            None | Some(Value::Null) => BTreeSet::new(),
            Some(Value::Array(uris)) => uris
                .iter()
                .map(|u| u.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or(FilterRefused::UrisNotStrings)?,
            Some(_) => return Err(FilterRefused::UrisNotAnArray),
        };
        Ok(Filter {
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            uris,
        })
    }

    /// What of `self` a server with `capabilities` can send.
    fn honoured(&self, capabilities: &Value) -> Filter {
        let can = |list: &str, what: &str| capabilities[list][what] == json!(true);
        Filter {
            tools: self.tools && can("tools", "listChanged"),
            prompts: self.prompts && can("prompts", "listChanged"),
            resources: self.resources && can("resources", "listChanged"),
            uris: match can("resources", "subscribe") {
                true => self.uris.clone(),
                false => BTreeSet::new(),
            },
        }
    }

    fn to_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        for (on, name) in [
            (self.tools, "toolsListChanged"),
            (self.prompts, "promptsListChanged"),
            (self.resources, "resourcesListChanged"),
        ] {
            if on {
                out.insert(name.into(), json!(true));
            }
        }
        if !self.uris.is_empty() {
            out.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        Value::Object(out)
    }

    /// Whether the client of this listen is to get `message`.
    fn wants(&self, message: &Value) -> bool {
        match message["method"].as_str() {
            Some(TOOLS_LIST_CHANGED) => self.tools,
            Some(PROMPTS_LIST_CHANGED) => self.prompts,
            Some(RESOURCES_LIST_CHANGED) => self.resources,
            Some(RESOURCES_UPDATED) => {
                let uri = message["params"]["uri"].as_str().unwrap_or_default();
                self.uris
                    .iter()
                    .any(|wanted| uri.starts_with(wanted.as_str()))
            }
            _ => false,
        }
    }
}

/// Whether a server with `capabilities` sends anything a listen could carry.
pub fn server_notifies(capabilities: &Value) -> bool {
    ["tools", "prompts", "resources"]
        .iter()
        .any(|list| capabilities[list]["listChanged"] == json!(true))
        || capabilities["resources"]["subscribe"] == json!(true)
}

/// Upstream resource subscriptions, counted per (session, URI) across its listens.
#[derive(Default)]
pub struct UpstreamSubscriptions {
    counts: DashMap<(String, String), usize>,
}

/// Opens a listen on the session `correlated` names.
pub async fn open(
    app: &App,
    correlated: Correlated,
    request: &Message,
) -> Result<http::Response<Body>, Rejection> {
    let id = request.id().cloned().unwrap_or(Value::Null);
    let params: Value = request
        .params()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default();
    let asked = Filter::asked(&params)
        .map_err(|refused| Rejection::invalid_params(refused.to_string()).with_id(Some(&id)))?;
    let capabilities = &correlated.initialized.result["capabilities"];
    if !server_notifies(capabilities) {
        let removed = Unfit::MethodRemoved(SUBSCRIPTIONS_LISTEN.to_owned());
        return Err(Rejection::from(removed).with_id(Some(&id)));
    }
    let honoured = asked.honoured(capabilities);
    let resources = &app.registry.settings().resources;
    if let Some(hidden) = honoured.uris.iter().find(|uri| !resources.shows(uri)) {
        return Err(Rejection::resource_not_found(hidden).with_id(Some(&id)));
    }
    let session = correlated.session.clone();
    for uri in &honoured.uris {
        app.modern
            .subscriptions
            .subscribe(&app.registry, &session, uri)
            .await
            .map_err(|r| r.with_id(Some(&id)))?;
    }
    let ack = jsonrpc::notification(
        SUBSCRIPTIONS_ACKNOWLEDGED,
        json!({ "_meta": { SUBSCRIPTION_ID: id }, "notifications": honoured.to_json() }),
    );
    let mut options = Options::new(&app.http, app.shutdown.clone());
    options.prelude = Some(sse::event(None, &ack));
    options.at_shutdown = Some(frame(&end(&id)));
    options.buffered = 64;
    let listen = Listen {
        id,
        filter: honoured,
        reader: session.tap(),
        registry: app.registry.clone(),
        session,
        subscriptions: app.modern.subscriptions.clone(),
        _correlated: correlated,
    };
    Ok(event_stream::open(listen, options))
}

/// A listen's frames: the acknowledgment, then what the filter lets through until the client
/// goes, the session ends or the proxy stops (then the listen's result).
struct Listen {
    id: Value,
    filter: Filter,
    reader: Reader,
    registry: Arc<Registry>,
    session: Arc<Session>,
    subscriptions: Arc<UpstreamSubscriptions>,
    /// Keeps a session of the listen's own until it ends.
    _correlated: Correlated,
}

impl Source for Listen {
    async fn next(&mut self, until: Option<Instant>) -> Next {
        loop {
            let delivery = match event_stream::before(until, self.reader.next()).await {
                None => return Next::Idle,
                Some(None) => return Next::End(Some(frame(&end(&self.id)))),
                Some(Some(delivery)) => delivery,
            };
            let frames: Vec<Bytes> = delivery
                .events
                .iter()
                .filter_map(|event| serde_json::from_slice::<Value>(&event.payload).ok())
                .filter(|message| self.filter.wants(message))
                .map(|mut message| {
                    message["params"]["_meta"][SUBSCRIPTION_ID] = self.id.clone();
                    frame(&message)
                })
                .collect();
            if !frames.is_empty() {
                return Next::Frames(frames);
            }
        }
    }

    /// The listen's resource subscriptions are released once its reader and any session of
    /// its own are gone (an ended session's server is not asked to unsubscribe).
    async fn finish(self, _ended: Ended) {
        let Listen {
            filter,
            reader,
            registry,
            session,
            subscriptions,
            _correlated: correlated,
            ..
        } = self;
        drop(reader);
        drop(correlated);
        for uri in &filter.uris {
            subscriptions.release(&registry, &session, uri).await;
        }
    }
}

/// The listen's result, its last message.
fn end(id: &Value) -> Value {
    jsonrpc::result_value(
        id,
        json!({ "resultType": "complete", "_meta": { SUBSCRIPTION_ID: id } }),
    )
}

fn frame(message: &Value) -> Bytes {
    sse::event(None, message.to_string().as_bytes())
}

impl UpstreamSubscriptions {
    /// Subscribes the session's server to `uri`, unless a listen of the session already has.
    async fn subscribe(
        &self,
        registry: &Registry,
        session: &Arc<Session>,
        uri: &str,
    ) -> Result<(), Rejection> {
        let key = (session.id().to_owned(), uri.to_owned());
        let first = {
            let mut count = self.counts.entry(key.clone()).or_default();
            *count += 1;
            *count == 1
        };
        if first {
            if let Err(refused) = change_subscription(registry, session, uri, true).await {
                // Not subscribed: the count goes back, so the next listen tries again.
                self.counts.remove_if_mut(&key, |_, count| {
                    *count -= 1;
                    *count == 0
                });
                return Err(refused);
            }
        }
        Ok(())
    }

    /// One listen of the session no longer wants `uri`; the last one unsubscribes its server.
    async fn release(&self, registry: &Registry, session: &Arc<Session>, uri: &str) {
        let key = (session.id().to_owned(), uri.to_owned());
        // Counted down and removed under one lock: a listen subscribing meanwhile is not lost.
        let last = self
            .counts
            .remove_if_mut(&key, |_, count| {
                *count -= 1;
                *count == 0
            })
            .is_some();
        if last && !session.ended.is_cancelled() {
            let _ = change_subscription(registry, session, uri, false).await;
        }
    }
}

/// Subscribes or unsubscribes the session's server: on the proxy's own behalf where the session
/// lives here (nothing the server sends meanwhile is taken as caused by it); through its owner
/// for a view.
async fn change_subscription(
    registry: &Registry,
    session: &Arc<Session>,
    uri: &str,
    subscribe: bool,
) -> Result<(), Rejection> {
    if session.owner().is_none() {
        return session
            .subscribe_upstream(uri, subscribe)
            .await
            .map_err(|e| Rejection::session(&e));
    }
    let method = match subscribe {
        true => RESOURCES_SUBSCRIBE,
        false => RESOURCES_UNSUBSCRIBE,
    };
    let params = serde_json::value::to_raw_value(&json!({ "uri": uri }))
        .map_err(|e| Rejection::bad_request(e.to_string()))?;
    let id = json!("mcp-session-proxy/subscription");
    let request = Message::request(Some(id), method, Some(params));
    ask(registry, session, request).await.map(|_| ())
}
