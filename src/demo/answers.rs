//! The methods the demo answers: a client message dispatched by its method, and each method's
//! answer (`tools/call` goes to `tools`).

use serde_json::{json, Value};

use super::{
    conformance, input_fixtures, tools, Demo, INSTRUCTIONS, KNOWN_VERSIONS, PROTOCOL_VERSION,
};
use crate::wire::era::Era;
use crate::wire::methods;

impl Demo {
    pub(super) fn serve(&self, message: Value) {
        let method = message["method"].as_str().unwrap_or_default();
        let params = &message["params"];
        let Some(id) = message.get("id") else {
            if method == methods::CANCELLED {
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
        if self.refused_before_initialize(id, method) {
            return;
        }
        match method {
            methods::INITIALIZE => self.initialize(id, params),
            methods::PING | methods::LOGGING_SET_LEVEL => self.reply(id, json!({})),
            methods::TOOLS_LIST => {
                let mut all = tools::tools();
                all.extend(conformance::tools());
                all.extend(input_fixtures::tools());
                self.reply(id, json!({ "tools": all }));
            }
            methods::COMPLETION_COMPLETE => {
                // One value: what it was asked to complete, as it arrived (the prompt's name or
                // the template's URI), so a client can tell which the server saw.
                let reference = &params["ref"];
                let named = reference["name"].as_str().or(reference["uri"].as_str());
                let values: Vec<&str> = named.into_iter().collect();
                let total = values.len();
                self.reply(
                    id,
                    json!({ "completion": { "values": values, "total": total, "hasMore": false } }),
                )
            }
            methods::TOOLS_CALL => self.call_tool(id, params),
            methods::RESOURCES_LIST => {
                let mut all = vec![
                    json!({ "uri": "demo://greeting", "name": "greeting", "description": "A fixed greeting", "mimeType": "text/plain" }),
                    json!({ "uri": "demo://counter", "name": "counter", "description": "The counter tool's value", "mimeType": "text/plain" }),
                ];
                all.extend(conformance::resources());
                self.reply(id, json!({ "resources": all }));
            }
            methods::RESOURCES_TEMPLATES_LIST => self.reply(
                id,
                json!({ "resourceTemplates": conformance::resource_templates() }),
            ),
            methods::RESOURCES_READ => self.read_resource(id, params),
            methods::RESOURCES_SUBSCRIBE | methods::RESOURCES_UNSUBSCRIBE => {
                let uri = params["uri"].as_str().unwrap_or_default().to_owned();
                let mut state = self.lock();
                if method == methods::RESOURCES_SUBSCRIBE {
                    state.subscriptions.insert(uri);
                } else {
                    state.subscriptions.remove(&uri);
                }
                drop(state);
                self.reply(id, json!({}));
            }
            methods::PROMPTS_LIST => {
                let mut all = vec![json!(
                    { "name": "greet", "description": "Greets someone", "arguments": [{ "name": "name", "required": true }] }
                )];
                all.extend(conformance::prompts());
                all.extend(input_fixtures::prompts());
                self.reply(id, json!({ "prompts": all }));
            }
            methods::PROMPTS_GET => self.get_prompt(id, params),
            _ => self.fail(id, -32601, &format!("Method not found: {method}")),
        }
    }

    /// A server of 2024-11-05 … 2025-11-25 only: before `initialize`, nothing but `ping` (and a
    /// 2026-07-28 probe, which it does not know), so a sessionless modern request is refused as
    /// a legacy server refuses it. Whether `method` was refused.
    fn refused_before_initialize(&self, id: &Value, method: &str) -> bool {
        let before_initialize = self.protocol == Era::Legacy && !self.lock().initialized;
        if before_initialize
            && !matches!(
                method,
                methods::INITIALIZE | methods::PING | methods::SERVER_DISCOVER
            )
        {
            self.fail(
                id,
                -32600,
                &format!(
                    "Invalid Request: {method} before initialize; this server speaks MCP \
                     2024-11-05 to 2025-11-25 and is initialized first"
                ),
            );
            return true;
        }
        false
    }

    fn initialize(&self, id: &Value, params: &Value) {
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

    fn read_resource(&self, id: &Value, params: &Value) {
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

    /// `greet` here; any other prompt from the `input_required` fixtures or the conformance ones.
    fn get_prompt(&self, id: &Value, params: &Value) {
        if input_fixtures::get_prompt(self, id, params["name"].as_str().unwrap_or_default()) {
            return;
        }
        if params["name"] != "greet" {
            return match conformance::get_prompt(
                params["name"].as_str().unwrap_or_default(),
                &params["arguments"],
            ) {
                Some(prompt) => self.reply(id, prompt),
                None => self.fail(id, -32602, &format!("Unknown prompt: {}", params["name"])),
            };
        }
        let name = params["arguments"]["name"].as_str().unwrap_or("world");
        self.reply(id, json!({ "messages": [
            { "role": "user", "content": { "type": "text", "text": format!("Say hello to {name}") } }
        ]}));
    }
}
