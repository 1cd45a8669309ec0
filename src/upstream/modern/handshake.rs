//! The bridge's side of the handshake: `initialize` is answered from the server's
//! `server/discover`, in the legacy revision the client asked for, and every request the bridge
//! sends carries what a 2026-07-28 request says of its client in `_meta` (protocol version,
//! client info, capabilities, log level).

use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::error::AskError;
use super::Bridge;
use crate::wire::era::{
    CAPABILITIES_KEY, CLIENT_INFO_KEY, LEGACY_VERSIONS, LOG_LEVEL_KEY, MODERN_VERSION,
    SERVER_INFO_KEY, VERSION_KEY,
};
use crate::wire::jsonrpc::Message;
use crate::wire::methods::SERVER_DISCOVER;

/// The legacy revisions a client may be answered in; others get the newest.
/// The longest the bridge waits for the server's `server/discover`.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(30);

impl Bridge {
    /// The `_meta` every modern request carries for this session.
    fn request_meta(&self) -> Map<String, Value> {
        let state = self.lock();
        let mut meta = Map::new();
        meta.insert(VERSION_KEY.into(), json!(MODERN_VERSION));
        meta.insert(CAPABILITIES_KEY.into(), state.capabilities.clone());
        meta.insert(CLIENT_INFO_KEY.into(), state.client_info.clone());
        if let Some(level) = &state.log_level {
            meta.insert(LOG_LEVEL_KEY.into(), json!(level));
        }
        meta
    }

    pub(super) fn with_meta(&self, mut params: Value) -> Value {
        if !params.is_object() {
            params = json!({});
        }
        let meta = params["_meta"].as_object().cloned().unwrap_or_default();
        let mut merged = self.request_meta();
        merged.extend(meta);
        params["_meta"] = Value::Object(merged);
        params
    }

    /// A request of the bridge's own, and its answer.
    pub(super) async fn ask_server(
        &self,
        what: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, AskError> {
        let (answer, answered) = oneshot::channel();
        let id = {
            let mut state = self.lock();
            let id = state.own_id(what);
            state.waiting.insert(id.clone(), answer);
            id
        };
        let request = json!({ "jsonrpc": "2.0", "id": id, "method": method,
                               "params": self.with_meta(params) });
        self.to_server(request).await?;
        match tokio::time::timeout(DISCOVER_TIMEOUT, answered).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(AskError::NoAnswer(method.to_owned())),
            Err(_) => {
                self.lock().waiting.remove(&id);
                Err(AskError::Silent {
                    method: method.to_owned(),
                    timeout: DISCOVER_TIMEOUT,
                })
            }
        }
    }

    /// `initialize`, answered from `server/discover` in the version the client can take.
    pub(super) async fn initialize(&self, request: &Message) {
        let id = request.id().cloned().unwrap_or(Value::Null);
        let params: Value = request
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        {
            let mut state = self.lock();
            state.client_info = params["clientInfo"].clone();
            state.capabilities = match &params["capabilities"] {
                Value::Object(c) => Value::Object(c.clone()),
                _ => json!({}),
            };
        }
        let discovered = match self
            .ask_server("discover", SERVER_DISCOVER, json!({}))
            .await
        {
            Ok(answer) => answer,
            Err(why) => return self.fail(&id, format!("initialize: {why}")),
        };
        let Some(result) = discovered.get("result") else {
            let error = discovered["error"].clone();
            return self.fail(
                &id,
                format!("the server refused {SERVER_DISCOVER}: {error}"),
            );
        };
        let asked = params["protocolVersion"].as_str().unwrap_or_default();
        let version = match LEGACY_VERSIONS.contains(&asked) {
            true => asked,
            false => LEGACY_VERSIONS[LEGACY_VERSIONS.len() - 1],
        };
        let server_info = result["_meta"][SERVER_INFO_KEY].clone();
        let mut initialized = json!({
            "protocolVersion": version,
            "capabilities": result["capabilities"],
            "serverInfo": match server_info {
                Value::Null => json!({ "name": "unknown", "version": "0" }),
                info => info,
            },
        });
        if let Some(instructions) = result.get("instructions") {
            initialized["instructions"] = instructions.clone();
        }
        self.answer(Some(&id), initialized);
        self.listen().await;
    }
}
