//! The demo's 2026-07-28 mode (`demo-server --protocol 2026-07-28`): a modern-only server. No
//! `initialize` (refused with -32022, naming the revision it speaks; the other removed legacy
//! methods with -32601); every request carries its
//! protocol version and client capabilities in `_meta`; `server/discover`; the lists' changes and
//! resource updates go to `subscriptions/listen` requests only; what the legacy demo asks the
//! client comes back as `input_required` (the tools run again on the retry, with the answers
//! gathered so far carried in a tamper-evident `requestState`). The same tools and resources;
//! the counter still lives in the process.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::{Demo, Listen};

use crate::wire::era::MODERN_VERSION as VERSION;
use crate::wire::era::{
    capability_object, declares, is_cacheable, removed_in_modern, required_capability,
    CAPABILITIES_KEY, INPUT_KEY, LOG_LEVEL_KEY, MISSING_CAPABILITY, SERVER_INFO_KEY,
    SUBSCRIPTION_ID_KEY, VERSION_KEY,
};
use crate::wire::methods;

/// One request being served: what it declared, the answers its retries carried, and the
/// questions it still has.
pub struct Round {
    pub id: Value,
    pub method: String,
    pub capabilities: Value,
    pub log_level: Option<String>,
    answers: Map<String, Value>,
    missing: Mutex<BTreeMap<String, Value>>,
    asked: AtomicBool,
}

impl Round {
    pub fn answer(&self, key: &str) -> Option<Value> {
        self.answers.get(key).cloned()
    }
}

/// What the modern demo does with a message before the legacy handler sees it: `Some(round)`
/// to serve it through the tools with that round, `None` when it was answered here.
pub fn admit(demo: &Demo, message: &Value) -> Option<Arc<Round>> {
    let method = message["method"].as_str().unwrap_or_default();
    let id = message.get("id")?;
    let params = &message["params"];
    let answers = match check_request(method, params).and_then(|()| gathered_answers(params)) {
        Ok(answers) => answers,
        Err(error) => {
            demo.send(json!({ "jsonrpc": "2.0", "id": id, "error": error }));
            return None;
        }
    };
    let meta = &params["_meta"];
    let round = Arc::new(Round {
        id: id.clone(),
        method: method.to_owned(),
        capabilities: meta[CAPABILITIES_KEY].clone(),
        log_level: meta[LOG_LEVEL_KEY].as_str().map(str::to_owned),
        answers,
        missing: Mutex::default(),
        asked: AtomicBool::new(false),
    });
    match method {
        methods::SERVER_DISCOVER => {
            let mut result = discover();
            decorate(&mut result, method);
            demo.send(json!({ "jsonrpc": "2.0", "id": id, "result": result }));
            None
        }
        methods::SUBSCRIPTIONS_LISTEN => {
            listen(demo, id, &params["notifications"]);
            None
        }
        _ => Some(round),
    }
}

/// A JSON-RPC error object, as the demo answers a refused request.
fn error(code: i64, message: &str) -> Value {
    json!({ "code": code, "message": message })
}

/// A request of this revision: not a legacy method, and its `_meta` names the revision and the
/// client's capabilities. `Err`: the error it is answered with.
fn check_request(method: &str, params: &Value) -> Result<(), Value> {
    if method == methods::INITIALIZE {
        // A legacy client: told which revision this server speaks instead.
        return Err(unsupported_version(&params["protocolVersion"]));
    }
    if removed_in_modern(method) {
        return Err(error(
            -32601,
            &format!("Method not found: {method} (this server speaks only MCP {VERSION})"),
        ));
    }
    let meta = &params["_meta"];
    let Some(version) = meta[VERSION_KEY].as_str() else {
        return Err(error(
            -32602,
            &format!("Invalid params: _meta[\"{VERSION_KEY}\"] is required on every request"),
        ));
    };
    if version != VERSION {
        return Err(unsupported_version(&json!(version)));
    }
    if !meta[CAPABILITIES_KEY].is_object() {
        return Err(error(
            -32602,
            &format!("Invalid params: _meta[\"{CAPABILITIES_KEY}\"] is required on every request"),
        ));
    }
    Ok(())
}

/// The answers a retry carries: those of its `requestState`, and its `inputResponses`. `Err`:
/// the error a request that altered them is answered with.
fn gathered_answers(params: &Value) -> Result<Map<String, Value>, Value> {
    let mut answers = match params.get("requestState") {
        None => Map::new(),
        Some(state) => state.as_str().and_then(open_state).ok_or_else(|| {
            error(
                -32602,
                "Invalid params: requestState was altered or is not this server's",
            )
        })?,
    };
    match params.get("inputResponses") {
        None | Some(Value::Null) => {}
        Some(Value::Object(given)) if given.values().all(Value::is_object) => {
            answers.extend(given.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Some(_) => {
            return Err(error(
                -32602,
                "Invalid params: inputResponses must map each key to a result object",
            ))
        }
    }
    Ok(answers)
}

/// `server/discover`'s result.
/// The -32022 error for a request of revision `requested`: the one this server speaks.
pub fn unsupported_version(requested: &Value) -> Value {
    json!({ "code": -32022, "message": format!("Unsupported protocol version {requested}"),
            "data": { "supported": [VERSION], "requested": requested } })
}

fn discover() -> Value {
    json!({
        "supportedVersions": [VERSION],
        "capabilities": {
            "tools": { "listChanged": true },
            "resources": { "subscribe": true, "listChanged": true },
            "prompts": {},
            "logging": {},
            "completions": {}
        },
        "instructions": super::INSTRUCTIONS,
    })
}

fn server_info() -> Value {
    json!({ "name": "mcp-session-proxy-demo", "version": env!("CARGO_PKG_VERSION") })
}

/// How long the demo's lists may be reused.
const LISTS_FRESH_MS: u64 = 60_000;

/// What every modern result carries; lists, reads and discover say how long they keep.
pub fn decorate(result: &mut Value, method: &str) {
    let Value::Object(result) = result else {
        return;
    };
    result
        .entry("resultType")
        .or_insert_with(|| json!("complete"));
    if let Value::Object(meta) = result.entry("_meta").or_insert_with(|| json!({})) {
        meta.insert(SERVER_INFO_KEY.into(), server_info());
    }
    if is_cacheable(method) && result["resultType"] == "complete" {
        // Its lists stay the same for everyone (until a list_changed); reads change.
        let fresh_for = match method.ends_with("/list") {
            true => LISTS_FRESH_MS,
            false => 0,
        };
        result.insert("ttlMs".into(), json!(fresh_for));
        result.insert("cacheScope".into(), json!("public"));
    }
}

/// A listen: acknowledged with what the demo can send, then kept until the process ends.
fn listen(demo: &Demo, id: &Value, asked: &Value) {
    let wanted = |flag: &str| asked[flag].as_bool().unwrap_or(false);
    let uris = super::strings(&asked["resourceSubscriptions"]);
    let mut honoured = json!({});
    for flag in ["toolsListChanged", "resourcesListChanged"] {
        if wanted(flag) {
            honoured[flag] = json!(true);
        }
    }
    if !uris.is_empty() {
        honoured["resourceSubscriptions"] = json!(uris);
    }
    demo.send(
        json!({ "jsonrpc": "2.0", "method": methods::SUBSCRIPTIONS_ACKNOWLEDGED,
        "params": { "notifications": honoured, "_meta": { SUBSCRIPTION_ID_KEY: id } } }),
    );
    demo.lock().listens.push(Listen {
        id: id.clone(),
        tools: wanted("toolsListChanged"),
        resources: wanted("resourcesListChanged"),
        uris,
        out: demo.out.clone(),
    });
}

/// Sends a change to the listens that asked for it, tagged with each one's id.
pub fn publish(demo: &Demo, method: &str, params: &Value) {
    let state = demo.lock();
    for listen in &state.listens {
        let wanted = match method {
            methods::TOOLS_LIST_CHANGED => listen.tools,
            methods::RESOURCES_LIST_CHANGED => listen.resources,
            methods::RESOURCES_UPDATED => params["uri"]
                .as_str()
                .is_some_and(|uri| listen.uris.iter().any(|u| u == uri)),
            _ => false,
        };
        if wanted {
            let mut params = params.clone();
            params["_meta"][SUBSCRIPTION_ID_KEY] = listen.id.clone();
            let _ = listen
                .out
                .send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
        }
    }
}

/// A question a tool asks in this round: its answer when a retry carried one; otherwise it is
/// gathered with the round's other questions into one `input_required` answer, and the tool
/// stops here (it runs again on the retry).
pub async fn ask(demo: &Demo, round: &Round, method: &str, mut params: Value) -> Value {
    let key = match params["_meta"][INPUT_KEY].as_str() {
        Some(key) => key.to_owned(),
        None => format!(
            "input-{}",
            round
                .missing
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len()
        ),
    };
    if let Some(answer) = round.answer(&key) {
        return json!({ "result": answer });
    }
    let needed = required_capability(method, &params);
    let declared = |capability: &str| {
        round
            .capabilities
            .as_object()
            .is_some_and(|c| declares(c, capability))
    };
    if let Some(capability) = needed.filter(|c| !declared(c)) {
        if !round.asked.swap(true, Ordering::AcqRel) {
            let error = json!({ "code": MISSING_CAPABILITY,
                "message": format!("this tool needs the client capability {capability}"),
                "data": { "requiredCapabilities": capability_object(&capability) } });
            demo.send(json!({ "jsonrpc": "2.0", "id": round.id, "error": error }));
        }
        return stop(demo, round).await;
    }
    if let Some(Value::Object(meta)) = params.get_mut("_meta") {
        meta.remove(INPUT_KEY);
        if meta.is_empty() {
            params.as_object_mut().map(|p| p.remove("_meta"));
        }
    }
    round
        .missing
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, json!({ "method": method, "params": params }));
    // Questions asked together (`join!`) are all gathered before the answer goes out.
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    if !round.asked.swap(true, Ordering::AcqRel) {
        let requests =
            std::mem::take(&mut *round.missing.lock().unwrap_or_else(|e| e.into_inner()));
        let state = seal_state(&round.answers);
        let mut result = json!({ "resultType": "input_required", "inputRequests": requests,
                                 "requestState": state });
        decorate(&mut result, &round.method);
        demo.send(json!({ "jsonrpc": "2.0", "id": round.id, "result": result }));
    }
    stop(demo, round).await
}

/// The tool stops here: its task ends (and lets go of the output) at this await.
async fn stop(demo: &Demo, round: &Round) -> Value {
    if let Some(task) = demo.lock().running.remove(&round.id.to_string()) {
        task.abort();
    }
    std::future::pending().await
}

/// The per-process key that makes `requestState` tamper-evident.
fn state_key() -> &'static [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = [0; 32];
        getrandom::fill(&mut key).expect("the OS has randomness");
        key
    })
}

fn digest(body: &str) -> String {
    let sum = Sha256::new()
        .chain_update(state_key())
        .chain_update(body.as_bytes())
        .finalize();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sum)
}

/// The answers so far, with a digest only this process can make.
fn seal_state(answers: &Map<String, Value>) -> String {
    let body = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Value::Object(answers.clone()).to_string());
    format!("{body}.{}", digest(&body))
}

fn open_state(state: &str) -> Option<Map<String, Value>> {
    let (body, sum) = state.split_once('.')?;
    if digest(body) != sum {
        return None;
    }
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .ok()?;
    serde_json::from_slice(&json).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_state_opens_only_unaltered() {
        let mut answers = Map::new();
        answers.insert("k".into(), json!({ "action": "accept" }));
        let state = seal_state(&answers);
        assert_eq!(open_state(&state), Some(answers));
        let (body, sum) = state.split_once('.').unwrap();
        let forged = seal_state(&Map::new());
        assert!(open_state(&format!("{body}x.{sum}")).is_none());
        assert!(open_state(&format!("{}.{sum}", forged.split_once('.').unwrap().0)).is_none());
        assert!(open_state("garbage").is_none());
    }
}
