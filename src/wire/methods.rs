//! Every MCP method the proxy knows, one row each, with what the fronts, the 2026-07-28 bridge,
//! the caches, metrics, spans and the demo need to know of it. Adding a method is a row here
//! and its handler where it is served.

use serde_json::Value;

pub const INITIALIZE: &str = "initialize";
pub const PING: &str = "ping";
pub const TOOLS_LIST: &str = "tools/list";
pub const TOOLS_CALL: &str = "tools/call";
pub const RESOURCES_LIST: &str = "resources/list";
pub const RESOURCES_TEMPLATES_LIST: &str = "resources/templates/list";
pub const RESOURCES_READ: &str = "resources/read";
pub const RESOURCES_SUBSCRIBE: &str = "resources/subscribe";
pub const RESOURCES_UNSUBSCRIBE: &str = "resources/unsubscribe";
pub const PROMPTS_LIST: &str = "prompts/list";
pub const PROMPTS_GET: &str = "prompts/get";
pub const COMPLETION_COMPLETE: &str = "completion/complete";
pub const LOGGING_SET_LEVEL: &str = "logging/setLevel";
pub const TASKS_GET: &str = "tasks/get";
pub const TASKS_LIST: &str = "tasks/list";
pub const TASKS_RESULT: &str = "tasks/result";
pub const TASKS_CANCEL: &str = "tasks/cancel";
pub const SERVER_DISCOVER: &str = "server/discover";
pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
pub const MESSAGES_LISTEN: &str = "messages/listen";
pub const SESSIONS_CREATE: &str = "sessions/create";
pub const SESSIONS_DELETE: &str = "sessions/delete";
pub const SESSION_START: &str = "session/start";
pub const SESSION_RESUME: &str = "session/resume";
pub const SESSION_END: &str = "session/end";
/// An earlier draft's name of `sessions/create`.
pub const SESSION_CREATE_DRAFT: &str = "session/create";
/// An earlier draft's name of `sessions/delete`.
pub const SESSION_DELETE_DRAFT: &str = "session/delete";
pub const SAMPLING_CREATE_MESSAGE: &str = "sampling/createMessage";
pub const ELICITATION_CREATE: &str = "elicitation/create";
pub const ROOTS_LIST: &str = "roots/list";
pub const INITIALIZED: &str = "notifications/initialized";
pub const CANCELLED: &str = "notifications/cancelled";
pub const PROGRESS: &str = "notifications/progress";
pub const MESSAGE: &str = "notifications/message";
pub const ROOTS_LIST_CHANGED: &str = "notifications/roots/list_changed";
pub const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
pub const PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";
pub const RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";
pub const RESOURCES_UPDATED: &str = "notifications/resources/updated";
pub const ELICITATION_COMPLETE: &str = "notifications/elicitation/complete";
pub const TASKS_STATUS: &str = "notifications/tasks/status";
pub const SESSION_DETACHED: &str = "notifications/session/detached";
pub const SUBSCRIPTIONS_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
pub const MESSAGES_LISTEN_ACKNOWLEDGED: &str = "notifications/messages/listen";

/// Which revisions define a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eras {
    /// 2024-11-05 … 2025-11-25 only: 2026-07-28 removed it (a modern server answers -32601).
    Legacy,
    /// 2026-07-28 only.
    Modern,
    Both,
    /// This proxy's own (protocol-level and data-layer sessions), in front of either.
    Proxy,
}

/// Who sends it, and whether it has an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// A client's request to its server.
    ClientRequest,
    /// A server's request to its client.
    ServerRequest,
    /// Sent by either side as a request.
    EitherRequest,
    ClientNotification,
    ServerNotification,
    EitherNotification,
}

/// The parameter that names what a request acts on (`Mcp-Name`, span names and attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Name,
    Uri,
}

impl Target {
    pub fn field(self) -> &'static str {
        match self {
            Target::Name => "name",
            Target::Uri => "uri",
        }
    }
}

/// Where the fronts hand a client's request: each front maps these to its handlers in one
/// table, so that what a method is served by is read here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To the server, through the session serving the request (the default, and every method
    /// the proxy does not know).
    Server,
    /// `initialize`: opens a transport session.
    Initialize,
    /// The proxy's protocol-level sessions: `session/start`, `session/resume`, `session/end`,
    /// and any other name under `session/` (an unknown session method).
    ProtocolSession,
    /// Sessions named in messages: `sessions/create`, `sessions/delete`, `messages/listen`.
    Named(NamedVerb),
    /// `server/discover` (2026-07-28): what the server said at its `initialize`.
    Discover,
    /// `subscriptions/listen` (2026-07-28): a stream of the server's notifications.
    Listen,
}

/// What a request does with sessions named in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedVerb {
    /// `sessions/create` (`draft`: under the earlier draft's name, `session/create`).
    Create {
        draft: bool,
    },
    Delete,
    Listen,
}

/// One method and its properties.
#[derive(Debug, Clone, Copy)]
pub struct Method {
    pub name: &'static str,
    pub eras: Eras,
    pub flow: Flow,
    /// A list the proxy caches per principal, and the notification that makes it stale.
    pub list_changed: Option<&'static str>,
    /// A 2026-07-28 server gives its complete results caching hints (`ttlMs`, `cacheScope`).
    pub cacheable: bool,
    /// It reaches a server's state: it needs a data-layer session where one is required.
    pub session_bound: bool,
    pub target: Option<Target>,
    /// The client capability a server's request needs (refined by its params:
    /// [`required_capability`]).
    pub capability: Option<&'static str>,
    /// Counted under its own name in metrics (any other method is `other`, so a client cannot
    /// grow the label set).
    pub counted: bool,
    /// A `list_changed` notification: the server capability whose `listChanged` announces it.
    pub announced_by: Option<&'static str>,
    /// While it is served, the server may ask the client for input (`input_required` in
    /// 2026-07-28, server requests before).
    pub asks_for_input: bool,
    /// Where the fronts hand it, as a client's request.
    pub route: Route,
}

impl Method {
    const fn new(name: &'static str, eras: Eras, flow: Flow) -> Method {
        Method {
            name,
            eras,
            flow,
            list_changed: None,
            cacheable: false,
            session_bound: false,
            target: None,
            capability: None,
            counted: false,
            announced_by: None,
            asks_for_input: false,
            route: Route::Server,
        }
    }
    const fn routed(mut self, route: Route) -> Method {
        self.route = route;
        self
    }
    const fn counted(mut self) -> Method {
        self.counted = true;
        self
    }
    const fn list(mut self, changed: &'static str) -> Method {
        self.list_changed = Some(changed);
        self.cacheable = true;
        self
    }
    const fn cacheable(mut self) -> Method {
        self.cacheable = true;
        self
    }
    const fn session_bound(mut self) -> Method {
        self.session_bound = true;
        self
    }
    const fn target(mut self, target: Target) -> Method {
        self.target = Some(target);
        self
    }
    const fn needs(mut self, capability: &'static str) -> Method {
        self.capability = Some(capability);
        self
    }
    const fn announced_by(mut self, capability: &'static str) -> Method {
        self.announced_by = Some(capability);
        self
    }
    const fn asks_for_input(mut self) -> Method {
        self.asks_for_input = true;
        self
    }
}

use Eras::{Both, Legacy, Modern, Proxy};
use Flow::*;

/// The table.
pub const METHODS: &[Method] = &[
    Method::new(INITIALIZE, Legacy, ClientRequest)
        .routed(Route::Initialize)
        .counted(),
    Method::new(PING, Legacy, EitherRequest).counted(),
    Method::new(TOOLS_LIST, Both, ClientRequest)
        .list(TOOLS_LIST_CHANGED)
        .counted(),
    Method::new(TOOLS_CALL, Both, ClientRequest)
        .session_bound()
        .target(Target::Name)
        .asks_for_input()
        .counted(),
    Method::new(RESOURCES_LIST, Both, ClientRequest)
        .list(RESOURCES_LIST_CHANGED)
        .counted(),
    Method::new(RESOURCES_TEMPLATES_LIST, Both, ClientRequest)
        .list(RESOURCES_LIST_CHANGED)
        .counted(),
    Method::new(RESOURCES_READ, Both, ClientRequest)
        .cacheable()
        .session_bound()
        .target(Target::Uri)
        .asks_for_input()
        .counted(),
    Method::new(RESOURCES_SUBSCRIBE, Legacy, ClientRequest)
        .session_bound()
        .target(Target::Uri)
        .counted(),
    Method::new(RESOURCES_UNSUBSCRIBE, Legacy, ClientRequest)
        .session_bound()
        .target(Target::Uri)
        .counted(),
    Method::new(PROMPTS_LIST, Both, ClientRequest)
        .list(PROMPTS_LIST_CHANGED)
        .counted(),
    Method::new(PROMPTS_GET, Both, ClientRequest)
        .session_bound()
        .target(Target::Name)
        .asks_for_input()
        .counted(),
    Method::new(COMPLETION_COMPLETE, Both, ClientRequest)
        .session_bound()
        .counted(),
    Method::new(LOGGING_SET_LEVEL, Legacy, ClientRequest).counted(),
    Method::new(TASKS_GET, Both, ClientRequest).counted(),
    Method::new(TASKS_LIST, Both, ClientRequest).counted(),
    Method::new(TASKS_RESULT, Both, ClientRequest).counted(),
    Method::new(TASKS_CANCEL, Both, ClientRequest).counted(),
    Method::new(SERVER_DISCOVER, Modern, ClientRequest)
        .cacheable()
        .routed(Route::Discover)
        .counted(),
    Method::new(SUBSCRIPTIONS_LISTEN, Modern, ClientRequest).routed(Route::Listen),
    Method::new(MESSAGES_LISTEN, Proxy, ClientRequest).routed(Route::Named(NamedVerb::Listen)),
    Method::new(SESSIONS_CREATE, Proxy, ClientRequest)
        .routed(Route::Named(NamedVerb::Create { draft: false })),
    Method::new(SESSIONS_DELETE, Proxy, ClientRequest).routed(Route::Named(NamedVerb::Delete)),
    Method::new(SESSION_CREATE_DRAFT, Proxy, ClientRequest)
        .routed(Route::Named(NamedVerb::Create { draft: true })),
    Method::new(SESSION_DELETE_DRAFT, Proxy, ClientRequest).routed(Route::Named(NamedVerb::Delete)),
    Method::new(SESSION_START, Proxy, ClientRequest).routed(Route::ProtocolSession),
    Method::new(SESSION_RESUME, Proxy, ClientRequest).routed(Route::ProtocolSession),
    Method::new(SESSION_END, Proxy, ClientRequest).routed(Route::ProtocolSession),
    Method::new(SAMPLING_CREATE_MESSAGE, Both, ServerRequest).needs("sampling"),
    Method::new(ELICITATION_CREATE, Both, ServerRequest).needs("elicitation"),
    Method::new(ROOTS_LIST, Both, ServerRequest).needs("roots"),
    Method::new(INITIALIZED, Legacy, ClientNotification).counted(),
    Method::new(CANCELLED, Both, EitherNotification).counted(),
    Method::new(PROGRESS, Both, EitherNotification).counted(),
    Method::new(ROOTS_LIST_CHANGED, Both, ClientNotification).counted(),
    Method::new(MESSAGE, Both, ServerNotification),
    Method::new(TOOLS_LIST_CHANGED, Both, ServerNotification).announced_by("tools"),
    Method::new(RESOURCES_LIST_CHANGED, Both, ServerNotification).announced_by("resources"),
    Method::new(PROMPTS_LIST_CHANGED, Both, ServerNotification).announced_by("prompts"),
    Method::new(RESOURCES_UPDATED, Both, ServerNotification),
    Method::new(ELICITATION_COMPLETE, Both, ServerNotification),
    Method::new(TASKS_STATUS, Both, ServerNotification),
    Method::new(SESSION_DETACHED, Proxy, ServerNotification),
    Method::new(SUBSCRIPTIONS_ACKNOWLEDGED, Modern, ServerNotification),
    Method::new(MESSAGES_LISTEN_ACKNOWLEDGED, Proxy, ServerNotification),
];

/// The row of a method, if the proxy knows it.
pub fn find(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|method| method.name == name)
}

/// Where the fronts hand a client's request of method `name`. A name under `session/` the
/// proxy does not know is still the proxy's (an unknown session method, never the server's).
pub fn route(name: &str) -> Route {
    match find(name) {
        Some(method) => method.route,
        None if name.starts_with("session/") => Route::ProtocolSession,
        None => Route::Server,
    }
}

/// A legacy client request that 2026-07-28 removed (a modern server answers -32601).
pub fn removed_in_modern(name: &str) -> bool {
    find(name).is_some_and(|m| m.eras == Legacy && matches!(m.flow, ClientRequest | EitherRequest))
}

/// Results a modern server must give caching hints (`ttlMs`, `cacheScope`).
pub fn is_cacheable(name: &str) -> bool {
    find(name).is_some_and(|m| m.cacheable)
}

/// Whether a request reaches a server's state (needs a data-layer session where required).
pub fn is_session_bound(name: &str) -> bool {
    find(name).is_some_and(|m| m.session_bound)
}

/// The parameter naming what the request acts on.
pub fn target(name: &str) -> Option<Target> {
    find(name).and_then(|m| m.target)
}

/// The parameter a 2026-07-28 request mirrors in its `Mcp-Name` header (methods 2026-07-28
/// defines, with a target).
pub fn mirrored_target(name: &str) -> Option<Target> {
    find(name)
        .filter(|m| matches!(m.eras, Modern | Both))
        .and_then(|m| m.target)
}

/// Whether the server may ask the client for input while serving the request (only these
/// may be answered `input_required`).
pub fn may_ask_for_input(name: &str) -> bool {
    find(name).is_some_and(|m| m.asks_for_input)
}

/// The metrics label of a method: its name when counted, else `other`.
pub fn metric_label(name: &str) -> &'static str {
    find(name).filter(|m| m.counted).map_or("other", |m| m.name)
}

/// The cached lists, each with the notification that makes it stale.
pub fn cached_lists() -> impl Iterator<Item = (&'static str, &'static str)> {
    METHODS
        .iter()
        .filter_map(|m| Some((m.name, m.list_changed?)))
}

/// The `list_changed` notifications a server may send, each with the capability whose
/// `listChanged` announces it in its `initialize` result.
pub fn announced_lists() -> impl Iterator<Item = (&'static str, &'static str)> {
    METHODS
        .iter()
        .filter_map(|m| Some((m.announced_by?, m.name)))
}

/// The lists a `*/list_changed` notification makes stale (none for any other method).
pub fn lists_changed_by(notification: &str) -> impl Iterator<Item = &'static str> + '_ {
    cached_lists().filter_map(move |(list, changed)| (changed == notification).then_some(list))
}

/// The client capability a server request needs (dotted for a sub-capability: a URL
/// elicitation needs `elicitation.url`, a sampling request with tools `sampling.tools`).
pub fn required_capability(name: &str, params: &Value) -> Option<String> {
    let capability = find(name)?.capability?;
    let sub = match name {
        ELICITATION_CREATE if params["mode"] == "url" => Some("url"),
        SAMPLING_CREATE_MESSAGE if params.get("tools").is_some() => Some("tools"),
        _ => None,
    };
    Some(match sub {
        Some(sub) => format!("{capability}.{sub}"),
        None => capability.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_method_has_one_row() {
        for (i, method) in METHODS.iter().enumerate() {
            assert!(
                METHODS[i + 1..].iter().all(|m| m.name != method.name),
                "{} twice",
                method.name
            );
        }
    }

    /// The names of the rows `property` holds for, in table order.
    fn names_where(property: fn(&str) -> bool) -> Vec<&'static str> {
        METHODS
            .iter()
            .filter(|m| property(m.name))
            .map(|m| m.name)
            .collect()
    }

    #[test]
    fn the_removed_methods_are_the_legacy_requests() {
        assert_eq!(
            names_where(removed_in_modern),
            [
                INITIALIZE,
                PING,
                RESOURCES_SUBSCRIBE,
                RESOURCES_UNSUBSCRIBE,
                LOGGING_SET_LEVEL
            ]
        );
    }

    #[test]
    fn the_fronts_route_the_proxys_methods_to_its_own_handlers() {
        assert_eq!(route(INITIALIZE), Route::Initialize);
        assert_eq!(route(TOOLS_CALL), Route::Server);
        assert_eq!(route("vendor/unknown"), Route::Server);
        for name in [
            SESSION_START,
            SESSION_RESUME,
            SESSION_END,
            "session/unknown",
        ] {
            assert_eq!(route(name), Route::ProtocolSession, "{name}");
        }
        for (name, verb) in [
            (SESSIONS_CREATE, NamedVerb::Create { draft: false }),
            (SESSION_CREATE_DRAFT, NamedVerb::Create { draft: true }),
            (SESSIONS_DELETE, NamedVerb::Delete),
            (SESSION_DELETE_DRAFT, NamedVerb::Delete),
            (MESSAGES_LISTEN, NamedVerb::Listen),
        ] {
            assert_eq!(route(name), Route::Named(verb), "{name}");
        }
        assert_eq!(route(SERVER_DISCOVER), Route::Discover);
        assert_eq!(route(SUBSCRIPTIONS_LISTEN), Route::Listen);
    }

    #[test]
    fn lists_and_their_notifications() {
        assert_eq!(
            lists_changed_by(RESOURCES_LIST_CHANGED).collect::<Vec<_>>(),
            [RESOURCES_LIST, RESOURCES_TEMPLATES_LIST]
        );
        assert_eq!(lists_changed_by(RESOURCES_UPDATED).count(), 0);
        assert_eq!(cached_lists().count(), 4);
    }

    #[test]
    fn list_changed_notifications_are_announced_by_their_capability() {
        assert_eq!(
            announced_lists().collect::<Vec<_>>(),
            [
                ("tools", TOOLS_LIST_CHANGED),
                ("resources", RESOURCES_LIST_CHANGED),
                ("prompts", PROMPTS_LIST_CHANGED)
            ]
        );
    }

    #[test]
    fn capabilities_are_refined_by_params() {
        let url = json!({"mode": "url"});
        assert_eq!(
            required_capability(ELICITATION_CREATE, &url).as_deref(),
            Some("elicitation.url")
        );
        assert_eq!(
            required_capability(SAMPLING_CREATE_MESSAGE, &json!({"tools": []})).as_deref(),
            Some("sampling.tools")
        );
        assert_eq!(
            required_capability(ROOTS_LIST, &json!({})).as_deref(),
            Some("roots")
        );
        assert_eq!(required_capability(TOOLS_CALL, &json!({})), None);
    }

    #[test]
    fn mcp_name_mirrors_the_target_of_a_2026_07_28_request() {
        assert_eq!(mirrored_target(TOOLS_CALL), Some(Target::Name));
        assert_eq!(mirrored_target(PROMPTS_GET), Some(Target::Name));
        assert_eq!(mirrored_target(RESOURCES_READ), Some(Target::Uri));
        assert_eq!(mirrored_target(RESOURCES_SUBSCRIBE), None);
        assert_eq!(target(RESOURCES_SUBSCRIBE), Some(Target::Uri));
    }

    #[test]
    fn only_calls_prompts_and_reads_may_ask_for_input() {
        assert_eq!(
            names_where(may_ask_for_input),
            [TOOLS_CALL, RESOURCES_READ, PROMPTS_GET]
        );
        assert!(!may_ask_for_input(TOOLS_LIST));
        assert!(!may_ask_for_input("x/made-up"));
    }

    #[test]
    fn metric_labels_are_bounded() {
        assert_eq!(metric_label(TOOLS_CALL), TOOLS_CALL);
        assert_eq!(metric_label(SUBSCRIPTIONS_LISTEN), "other");
        assert_eq!(metric_label("x/made-up"), "other");
        assert_eq!(METHODS.iter().filter(|m| m.counted).count(), 22);
    }
}
