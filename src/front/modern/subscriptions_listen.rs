//! `subscriptions/listen`: the 2026-07-28 way to hear of changes. A long-lived SSE answer
//! that starts with `notifications/subscriptions/acknowledged` (what the server can send, of
//! what was asked), then carries the session's `*/list_changed` and `resources/updated`
//! notifications the filter asked for, each tagged with the listen's id; resource
//! subscriptions become upstream `resources/subscribe` (counted per session, released when the
//! last listen for a URI ends). At shutdown the listen ends with its result.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::front::event_stream::{self, Ended, Next, Options, Source};
use crate::front::rejection::Rejection;
use crate::front::App;
use crate::session::correlate::Correlated;
use crate::session::{Reader, Registry, Session};
use crate::wire::era::request::Unfit;
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::{self, Message};
use crate::wire::methods::{
    PROMPTS_LIST_CHANGED, RESOURCES_LIST_CHANGED, RESOURCES_UPDATED, SUBSCRIPTIONS_ACKNOWLEDGED,
    SUBSCRIPTIONS_LISTEN, TOOLS_LIST_CHANGED,
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
        app.registry
            .subscribe_for_listen(&session, uri)
            .await
            .map_err(|e| Rejection::session(&e).with_id(Some(&id)))?;
    }
    let ack = jsonrpc::notification(
        SUBSCRIPTIONS_ACKNOWLEDGED,
        json!({ "_meta": { SUBSCRIPTION_ID: id }, "notifications": honoured.to_json() }),
    );
    let mut options = Options::new(&app.http.now(), app.shutdown.clone());
    options.prelude = Some(sse::event(None, &ack));
    options.at_shutdown = Some(frame(&end(&id)));
    options.buffered = 64;
    let listen = Listen {
        id,
        filter: honoured,
        reader: session.tap(),
        registry: app.registry.clone(),
        session,
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
            _correlated: correlated,
            ..
        } = self;
        drop(reader);
        drop(correlated);
        for uri in &filter.uris {
            registry.release_for_listen(&session, uri).await;
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
