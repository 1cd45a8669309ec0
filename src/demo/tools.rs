//! The demo's own tools: what `tools/list` shows of them, the arguments each takes, and what a
//! call does (the conformance and `input_required` fixtures are asked for any other name).

use std::time::Duration;

use serde_json::{json, Value};

use super::{conformance, input_fixtures, strings, Demo};
use crate::wire::era::Era;
use crate::wire::methods;

impl Demo {
    pub(super) fn call_tool(&self, id: &Value, params: &Value) {
        let args = &params["arguments"];
        let name = params["name"].as_str().unwrap_or_default();
        if let Err(error) = check_arguments(name, args) {
            return self.fail(id, -32602, &error.to_string());
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
                        methods::RESOURCES_UPDATED,
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
                    self.notify(methods::RESOURCES_UPDATED, params);
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
                    Some("list_roots") => (methods::ROOTS_LIST, "roots"),
                    _ => (methods::PING, "pong"),
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

/// Arguments a demo tool does not take.
#[derive(Debug, thiserror::Error)]
enum ArgumentError {
    #[error("{tool}: arguments must be an object")]
    NotAnObject { tool: String },
    #[error("{tool}: unknown argument(s) {unknown} (it takes: {takes})")]
    Unknown {
        tool: String,
        unknown: String,
        takes: String,
    },
}

/// A demo tool's arguments are an object (or absent) naming only what the tool takes.
fn check_arguments(tool: &str, args: &Value) -> Result<(), ArgumentError> {
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
        _ => {
            return Err(ArgumentError::NotAnObject {
                tool: tool.to_owned(),
            })
        }
    };
    match unknown.as_slice() {
        [] => Ok(()),
        _ => Err(ArgumentError::Unknown {
            tool: tool.to_owned(),
            unknown: unknown.join(", "),
            takes: match known.is_empty() {
                true => "none".to_owned(),
                false => known.join(", "),
            },
        }),
    }
}

/// The demo's own tools, as `tools/list` shows them.
pub(super) fn tools() -> Vec<Value> {
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
