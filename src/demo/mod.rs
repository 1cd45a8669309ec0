//! The bundled demo MCP server (`mcp-session-proxy demo-server`): stdio, protocol 2025-11-25,
//! deterministic tools and subscribable resources for the README, the tests and benchmarks.
//! Its state (the counter, subscriptions) lives in the process, like a legacy stateful server.

mod conformance;
mod input_fixtures;
mod modern;
mod modern_http;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::era::Era;
use crate::upstream::lines::{Line, LineReader};

pub use modern_http::serve as serve_modern_over_http;

const PROTOCOL_VERSION: &str = "2025-11-25";
const INSTRUCTIONS: &str =
    "A deterministic demo server: echo, add, counter, sleep, emit_updates, progress.";
const KNOWN_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

#[derive(Default)]
struct State {
    /// `initialize` was answered: a legacy server takes nothing else before it.
    initialized: bool,
    counter: u64,
    subscriptions: HashSet<String>,
    running: HashMap<String, JoinHandle<()>>,
    client_capabilities: Value,
    /// Requests this server sent to the client, by id, awaiting the client's answer.
    asked: HashMap<String, oneshot::Sender<Value>>,
    next_ask: u64,
    /// 2026-07-28 mode: the open `subscriptions/listen` requests.
    listens: Vec<Listen>,
}

/// An open `subscriptions/listen`: what it asked for and where its notifications go.
struct Listen {
    id: Value,
    tools: bool,
    resources: bool,
    uris: Vec<String>,
    out: mpsc::UnboundedSender<Value>,
}

#[derive(Clone)]
struct Demo {
    state: Arc<Mutex<State>>,
    out: mpsc::UnboundedSender<Value>,
    protocol: Era,
    /// The 2026-07-28 request this clone serves.
    round: Option<Arc<modern::Round>>,
}

/// Serves MCP on stdin/stdout until stdin closes.
pub async fn run(protocol: Era) -> anyhow::Result<()> {
    let (out, mut lines_out) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        // Every message ready goes out in one write (tokio's stdout hands each write to a
        // blocking thread).
        while let Some(message) = lines_out.recv().await {
            let mut lines = message.to_string().into_bytes();
            lines.push(b'\n');
            while lines.len() < 64 << 10 {
                let Ok(next) = lines_out.try_recv() else {
                    break;
                };
                lines.extend_from_slice(next.to_string().as_bytes());
                lines.push(b'\n');
            }
            if stdout.write_all(&lines).await.is_err() || stdout.flush().await.is_err() {
                return;
            }
        }
    });
    let demo = Demo {
        state: Arc::default(),
        out,
        protocol,
        round: None,
    };
    let mut input = LineReader::new(BufReader::new(tokio::io::stdin()), 16 << 20);
    while let Some(line) = input.next_line().await? {
        let Line::Text(line) = line else {
            eprintln!("demo-server: skipped an oversized line");
            continue;
        };
        match serde_json::from_slice::<Value>(&line) {
            Ok(message) => demo.handle(message),
            Err(error) => eprintln!("demo-server: not JSON: {error}"),
        }
    }
    // Stdin is closed: nothing more is answered; what still holds the output lets it go.
    {
        let mut state = demo.lock();
        state.listens.clear();
        state.running.drain().for_each(|(_, task)| task.abort());
    }
    drop(demo);
    let _ = writer.await;
    Ok(())
}

impl Demo {
    fn send(&self, message: Value) {
        let _ = self.out.send(message);
    }

    fn reply(&self, id: &Value, mut result: Value) {
        if let Some(round) = &self.round {
            modern::decorate(&mut result, &round.method);
        }
        self.send(json!({ "jsonrpc": "2.0", "id": id, "result": result }));
    }

    fn fail(&self, id: &Value, code: i64, message: &str) {
        self.send(
            json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }),
        );
    }

    fn notify(&self, method: &str, params: Value) {
        if self.protocol == Era::Modern {
            match method {
                "notifications/progress" => {}
                // Only to a request that asked for log messages.
                "notifications/message"
                    if self.round.as_ref().is_some_and(|r| r.log_level.is_some()) => {}
                "notifications/message" => return,
                // Changes go to the listens that asked for them, never to a request's stream.
                _ => return modern::publish(self, method, &params),
            }
        }
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn handle(&self, message: Value) {
        if self.protocol == Era::Modern && message["method"].is_string() {
            let Some(round) = modern::admit(self, &message) else {
                return;
            };
            let serving = Demo {
                round: Some(round),
                ..self.clone()
            };
            return serving.serve(message);
        }
        self.serve(message);
    }

    fn serve(&self, message: Value) {
        let method = message["method"].as_str().unwrap_or_default();
        let params = &message["params"];
        let Some(id) = message.get("id") else {
            if method == "notifications/cancelled" {
                self.cancel(&params["requestId"]);
            }
            return;
        };
        if method.is_empty() {
            // The client's answer to one of our requests.
            if let Some(waiting) = self.lock().asked.remove(&id.to_string()) {
                let _ = waiting.send(message);
            }
            return;
        }
        // A server of 2024-11-05 … 2025-11-25 only: before `initialize`, nothing but `ping`
        // (and a 2026-07-28 probe, which it does not know), so a sessionless modern request is
        // refused as a legacy server refuses it.
        let before_initialize = self.protocol == Era::Legacy && !self.lock().initialized;
        if before_initialize && !matches!(method, "initialize" | "ping" | "server/discover") {
            self.fail(
                id,
                -32600,
                &format!(
                    "Invalid Request: {method} before initialize; this server speaks MCP \
                     2024-11-05 to 2025-11-25 and is initialized first"
                ),
            );
            return;
        }
        match method {
            "initialize" => {
                let mut state = self.lock();
                state.initialized = true;
                state.client_capabilities = params["capabilities"].clone();
                drop(state);
                let asked = params["protocolVersion"].as_str().unwrap_or_default();
                let version = if KNOWN_VERSIONS.contains(&asked) {
                    asked
                } else {
                    PROTOCOL_VERSION
                };
                self.reply(id, json!({
                    "protocolVersion": version,
                    "capabilities": {
                        "tools": { "listChanged": true },
                        "resources": { "subscribe": true, "listChanged": true },
                        "prompts": { "listChanged": false },
                        "logging": {},
                        "completions": {}
                    },
                    "serverInfo": { "name": "mcp-session-proxy-demo", "version": env!("CARGO_PKG_VERSION") },
                    "instructions": INSTRUCTIONS
                }));
            }
            "ping" | "logging/setLevel" => self.reply(id, json!({})),
            "tools/list" => {
                let mut all = tools();
                all.extend(conformance::tools());
                all.extend(input_fixtures::tools());
                self.reply(id, json!({ "tools": all }));
            }
            "completion/complete" => self.reply(
                id,
                json!({ "completion": { "values": [], "total": 0, "hasMore": false } }),
            ),
            "tools/call" => self.call_tool(id, params),
            "resources/list" => {
                let mut all = vec![
                    json!({ "uri": "demo://greeting", "name": "greeting", "description": "A fixed greeting", "mimeType": "text/plain" }),
                    json!({ "uri": "demo://counter", "name": "counter", "description": "The counter tool's value", "mimeType": "text/plain" }),
                ];
                all.extend(conformance::resources());
                self.reply(id, json!({ "resources": all }));
            }
            "resources/templates/list" => self.reply(
                id,
                json!({ "resourceTemplates": conformance::resource_templates() }),
            ),
            "resources/read" => {
                let uri = params["uri"].as_str().unwrap_or_default();
                let text = match uri {
                    "demo://greeting" => "Hello from the demo server".to_string(),
                    "demo://counter" => self.lock().counter.to_string(),
                    _ => {
                        return match conformance::read_resource(uri) {
                            Some(contents) => self.reply(id, json!({ "contents": [contents] })),
                            None => self.fail(id, -32002, &format!("Resource not found: {uri}")),
                        }
                    }
                };
                self.reply(
                    id,
                    json!({ "contents": [{ "uri": uri, "mimeType": "text/plain", "text": text }] }),
                );
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let uri = params["uri"].as_str().unwrap_or_default().to_owned();
                let mut state = self.lock();
                if method == "resources/subscribe" {
                    state.subscriptions.insert(uri);
                } else {
                    state.subscriptions.remove(&uri);
                }
                drop(state);
                self.reply(id, json!({}));
            }
            "prompts/list" => {
                let mut all = vec![json!(
                    { "name": "greet", "description": "Greets someone", "arguments": [{ "name": "name", "required": true }] }
                )];
                all.extend(conformance::prompts());
                all.extend(input_fixtures::prompts());
                self.reply(id, json!({ "prompts": all }));
            }
            "prompts/get"
                if input_fixtures::get_prompt(
                    self,
                    id,
                    params["name"].as_str().unwrap_or_default(),
                ) => {}
            "prompts/get" if params["name"] != "greet" => {
                match conformance::get_prompt(
                    params["name"].as_str().unwrap_or_default(),
                    &params["arguments"],
                ) {
                    Some(prompt) => self.reply(id, prompt),
                    None => self.fail(id, -32602, &format!("Unknown prompt: {}", params["name"])),
                }
            }
            "prompts/get" => {
                let name = params["arguments"]["name"].as_str().unwrap_or("world");
                self.reply(id, json!({ "messages": [
                    { "role": "user", "content": { "type": "text", "text": format!("Say hello to {name}") } }
                ]}));
            }
            _ => self.fail(id, -32601, &format!("Method not found: {method}")),
        }
    }

    fn call_tool(&self, id: &Value, params: &Value) {
        let args = &params["arguments"];
        let name = params["name"].as_str().unwrap_or_default();
        if let Err(refused) = check_arguments(name, args) {
            return self.fail(id, -32602, &refused.to_string());
        }
        let text = |t: String| json!({ "content": [{ "type": "text", "text": t }] });
        match name {
            // What a server behind the proxy sees of the caller's trace.
            "trace_context" => {
                let meta = &params["_meta"];
                let context = json!({
                    "traceparent": meta["traceparent"],
                    "tracestate": meta["tracestate"],
                });
                self.reply(
                    id,
                    json!({ "content": [{ "type": "text", "text": context.to_string() }],
                            "structuredContent": context }),
                );
            }
            // `text`, or `message` as the reference servers call it, or `msg` as seed 002 does.
            "echo" => match args["text"]
                .as_str()
                .or(args["message"].as_str())
                .or(args["msg"].as_str())
            {
                Some(said) => self.reply(id, text(said.to_owned())),
                None => self.fail(
                    id,
                    -32602,
                    "echo needs a string `text` (or `message`, `msg`)",
                ),
            },
            "lookup" => {
                let region = args["region"].as_str().unwrap_or_default();
                let said = args["text"].as_str().unwrap_or_default();
                self.reply(id, text(format!("{region}: {said}")));
            }
            "add" => {
                let (a, b) = (
                    args["a"].as_f64().unwrap_or(0.0),
                    args["b"].as_f64().unwrap_or(0.0),
                );
                self.reply(id, text(format!("{}", a + b)));
            }
            "counter" => {
                let (value, watched) = {
                    let mut state = self.lock();
                    state.counter += 1;
                    // A modern server has no subscriptions: its listens pick what they asked for.
                    let watched = self.protocol == Era::Modern
                        || state.subscriptions.contains("demo://counter");
                    (state.counter, watched)
                };
                if watched {
                    self.notify(
                        "notifications/resources/updated",
                        json!({ "uri": "demo://counter" }),
                    );
                }
                self.reply(id, text(value.to_string()));
            }
            "sleep" => {
                let ms = args["ms"].as_u64().unwrap_or(0);
                let done = text(format!("slept {ms} ms"));
                self.spawn_for(id, move |demo: Demo, id: Value| async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    demo.reply(&id, done);
                });
            }
            "emit_updates" => {
                let uris = strings(&args["uris"]);
                let count = args["count"].as_u64().unwrap_or(1);
                if uris.is_empty() {
                    return self.fail(id, -32602, "emit_updates needs a non-empty `uris` list");
                }
                // With a tag, each update says which call sent it and where in it (`_meta`), so
                // a client can tell exactly which ones reached it.
                let tag = args.get("tag").filter(|t| !t.is_null());
                for i in 0..count {
                    let uri = &uris[(i % uris.len() as u64) as usize];
                    let params = match tag {
                        Some(tag) => {
                            json!({ "uri": uri, "_meta": { "demo/tag": tag, "demo/index": i } })
                        }
                        None => json!({ "uri": uri }),
                    };
                    self.notify("notifications/resources/updated", params);
                }
                self.reply(id, text(format!("emitted {count} updates")));
            }
            "progress" => {
                let steps = args["steps"].as_u64().unwrap_or(3);
                let delay = Duration::from_millis(args["delay_ms"].as_u64().unwrap_or(0));
                let token = params["_meta"]["progressToken"].clone();
                let done = text(format!("done after {steps} steps"));
                if delay.is_zero() {
                    // Written before the next request is read: tests rely on this order.
                    for step in 1..=steps {
                        self.progress(&token, step, steps);
                    }
                    return self.reply(id, done);
                }
                self.spawn_for(id, move |demo: Demo, id: Value| async move {
                    for step in 1..=steps {
                        tokio::time::sleep(delay).await;
                        demo.progress(&token, step, steps);
                    }
                    demo.reply(&id, done);
                });
            }
            "notify_list_changed" => {
                let list = args["list"].as_str().unwrap_or("tools").to_owned();
                self.notify(&format!("notifications/{list}/list_changed"), json!({}));
                self.reply(id, text(format!("announced a change of the {list} list")));
            }
            "list_roots" | "ping_client" => {
                let (method, label) = match params["name"].as_str() {
                    Some("list_roots") => ("roots/list", "roots"),
                    _ => ("ping", "pong"),
                };
                self.spawn_for(id, move |demo: Demo, id: Value| async move {
                    let answer = demo.ask(method, json!({})).await;
                    let reply = match answer.get("result") {
                        Some(result) => format!("{label}: {result}"),
                        None => format!("the client answered {method} with {answer}"),
                    };
                    demo.reply(&id, text(reply));
                });
            }
            "crash" => {
                let code = args["code"].as_i64().unwrap_or(3) as i32;
                eprintln!("demo-server: crashing on request with exit code {code}");
                std::process::exit(code);
            }
            other => {
                if !conformance::call_tool(self, id, other, args, params)
                    && !input_fixtures::call_tool(self, id, other)
                {
                    self.fail(id, -32602, &format!("Unknown tool: {other}"));
                }
            }
        }
    }

    /// Sends a request to the client and waits for its answer (the whole response message).
    async fn ask(&self, method: &str, params: Value) -> Value {
        if let Some(round) = &self.round {
            return modern::ask(self, round, method, params).await;
        }
        let (answer, answered) = oneshot::channel();
        let id = {
            let mut state = self.lock();
            state.next_ask += 1;
            let id = Value::from(format!("demo-{}", state.next_ask));
            state.asked.insert(id.to_string(), answer);
            id
        };
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        answered.await.unwrap_or(Value::Null)
    }

    fn client_supports(&self, capability: &str) -> bool {
        match &self.round {
            Some(round) => !round.capabilities[capability].is_null(),
            None => !self.lock().client_capabilities[capability].is_null(),
        }
    }

    fn progress(&self, token: &Value, step: u64, steps: u64) {
        if !token.is_null() {
            self.notify(
                "notifications/progress",
                json!({
                    "progressToken": token, "progress": step, "total": steps,
                    "message": format!("step {step} of {steps}")
                }),
            );
        }
    }

    /// Runs a slow tool in its own task, cancellable by `notifications/cancelled`.
    fn spawn_for<F, Fut>(&self, id: &Value, work: F)
    where
        F: FnOnce(Demo, Value) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let key = id.to_string();
        let demo = self.clone();
        let state = self.state.clone();
        let task_key = key.clone();
        let future = work(demo, id.clone());
        let handle = tokio::spawn(async move {
            future.await;
            state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .running
                .remove(&task_key);
        });
        self.lock().running.insert(key, handle);
    }

    fn cancel(&self, request_id: &Value) {
        // A 2026-07-28 listen ends when its request is cancelled.
        self.lock()
            .listens
            .retain(|listen| listen.id != *request_id);
        let task = self.lock().running.remove(&request_id.to_string());
        let outcome = match task {
            Some(task) => {
                task.abort();
                "cancelled a request in flight"
            }
            None => "received a cancellation for no request in flight",
        };
        self.notify(
            "notifications/message",
            json!({ "level": "info", "logger": "demo", "data": outcome }),
        );
    }
}

/// The strings of a JSON array (none for anything else).
fn strings(array: &Value) -> Vec<String> {
    array
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|u| u.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The arguments each of the demo's own tools takes (the conformance fixtures check their own).
const ARGUMENTS: [(&str, &[&str]); 12] = [
    ("echo", &["text", "message", "msg"]),
    ("lookup", &["region", "limit", "text"]),
    ("add", &["a", "b"]),
    ("counter", &[]),
    ("sleep", &["ms"]),
    ("emit_updates", &["uris", "count", "tag"]),
    ("progress", &["steps", "delay_ms"]),
    ("notify_list_changed", &["list"]),
    ("list_roots", &[]),
    ("ping_client", &[]),
    ("crash", &["code"]),
    ("trace_context", &[]),
];

/// Why a demo tool refuses its arguments.
#[derive(Debug, thiserror::Error)]
enum ArgumentsRefused {
    #[error("{0}: arguments must be an object")]
    NotAnObject(String),
    #[error("{tool}: unknown argument(s) {} (it takes: {})", .unknown.join(", "), takes(.known))]
    Unknown {
        tool: String,
        unknown: Vec<String>,
        known: &'static [&'static str],
    },
}

/// What a tool takes, for a refusal: its arguments, or `none`.
fn takes(known: &[&str]) -> String {
    match known.is_empty() {
        true => "none".to_owned(),
        false => known.join(", "),
    }
}

/// A demo tool's arguments are an object (or absent) naming only what the tool takes.
fn check_arguments(tool: &str, args: &Value) -> Result<(), ArgumentsRefused> {
    let Some((_, known)) = ARGUMENTS.iter().find(|(name, _)| *name == tool) else {
        return Ok(());
    };
    let unknown: Vec<&str> = match args {
        Value::Null => Vec::new(),
        Value::Object(given) => given
            .keys()
            .map(String::as_str)
            .filter(|key| !known.contains(key))
            .collect(),
        _ => return Err(ArgumentsRefused::NotAnObject(tool.to_owned())),
    };
    match unknown.is_empty() {
        true => Ok(()),
        false => Err(ArgumentsRefused::Unknown {
            tool: tool.to_owned(),
            unknown: unknown.into_iter().map(str::to_owned).collect(),
            known,
        }),
    }
}

fn tools() -> Vec<Value> {
    let schema = |properties: Value, required: &[&str]| json!({ "type": "object", "properties": properties, "required": required });
    let Value::Array(tools) = json!([
        { "name": "counter", "description": "Increments a counter kept in this process and returns it", "inputSchema": schema(json!({}), &[]) },
        { "name": "echo", "description": "Returns its text (`text`, or `message` or `msg` as others name it)", "inputSchema": schema(json!({ "text": { "type": "string" }, "message": { "type": "string" }, "msg": { "type": "string" } }), &[]) },
        { "name": "lookup", "description": "Returns `region: text` (`region` and `limit` travel in the Mcp-Param-Region and Mcp-Param-Limit headers over 2026-07-28 HTTP)", "inputSchema": schema(json!({ "region": { "type": "string", "x-mcp-header": "Region" }, "limit": { "type": "integer", "x-mcp-header": "Limit" }, "text": { "type": "string" } }), &["region", "text"]) },
        { "name": "add", "description": "Adds two numbers", "inputSchema": schema(json!({ "a": { "type": "number" }, "b": { "type": "number" } }), &["a", "b"]) },
        { "name": "sleep", "description": "Answers after ms milliseconds (cancellable)", "inputSchema": schema(json!({ "ms": { "type": "integer" } }), &["ms"]) },
        { "name": "emit_updates", "description": "Sends count resources/updated notifications, round-robin over uris (with tag: each carries _meta {demo/tag, demo/index})", "inputSchema": schema(json!({ "uris": { "type": "array", "items": { "type": "string" } }, "count": { "type": "integer" }, "tag": { "type": "string" } }), &["uris", "count"]) },
        { "name": "progress", "description": "Sends steps progress notifications (delay_ms apart), then answers", "inputSchema": schema(json!({ "steps": { "type": "integer" }, "delay_ms": { "type": "integer" } }), &["steps"]) },
        { "name": "notify_list_changed", "description": "Announces that a list (tools, prompts, resources) changed", "inputSchema": schema(json!({ "list": { "type": "string" } }), &["list"]) },
        { "name": "list_roots", "description": "Asks the client for its roots (roots/list) and returns them", "inputSchema": schema(json!({}), &[]) },
        { "name": "ping_client", "description": "Pings the client and reports its answer", "inputSchema": schema(json!({}), &[]) },
        { "name": "crash", "description": "Exits the server process at once (for failure tests)", "inputSchema": schema(json!({ "code": { "type": "integer" } }), &[]) },
        { "name": "trace_context", "description": "Returns the W3C trace context (traceparent, tracestate) its request carried in _meta", "inputSchema": schema(json!({}), &[]) }
    ]) else {
        unreachable!("a JSON array literal")
    };
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_table_matches_the_published_schemas() {
        for tool in tools() {
            let name = tool["name"].as_str().unwrap();
            let mut published: Vec<&str> = tool["inputSchema"]["properties"]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            published.sort_unstable();
            let (_, known) = ARGUMENTS.iter().find(|(n, _)| *n == name).unwrap();
            let mut known = known.to_vec();
            known.sort_unstable();
            assert_eq!(published, known, "{name}");
        }
    }

    #[test]
    fn unknown_arguments_are_named() {
        assert!(check_arguments("echo", &json!({ "message": "hi" })).is_ok());
        assert!(check_arguments("counter", &Value::Null).is_ok());
        let error = check_arguments("echo", &json!({ "txt": "hi" }))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("txt") && error.contains("text, message"),
            "{error}"
        );
        assert!(check_arguments("echo", &json!(["hi"])).is_err());
        assert!(check_arguments("test_simple_text", &json!({ "any": 1 })).is_ok());
    }
}
