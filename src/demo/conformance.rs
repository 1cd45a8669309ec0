//! The fixtures the server scenarios of `@modelcontextprotocol/conformance` call (tools,
//! resources, prompts named `test_*` / `test://…`), with the exact contents they check.

use std::time::Duration;

use serde_json::{json, Value};

use super::Demo;
use crate::wire::methods;

/// A 1×1 red PNG.
const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";
/// A two-sample 8 kHz mono WAV.
const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQIAAACAgA==";

fn no_arguments() -> Value {
    json!({ "type": "object", "properties": {} })
}

fn string_arguments(names: &[&str]) -> Value {
    let properties: serde_json::Map<String, Value> = names
        .iter()
        .map(|name| (name.to_string(), json!({ "type": "string" })))
        .collect();
    json!({ "type": "object", "properties": properties, "required": names })
}

pub fn tools() -> Vec<Value> {
    let tool = |name: &str, description: &str, schema: Value| json!({ "name": name, "description": description, "inputSchema": schema });
    vec![
        tool("test_simple_text", "Returns simple text", no_arguments()),
        tool("test_image_content", "Returns an image", no_arguments()),
        tool("test_audio_content", "Returns audio", no_arguments()),
        tool("test_embedded_resource", "Returns an embedded resource", no_arguments()),
        tool("test_multiple_content_types", "Returns text, image and resource", no_arguments()),
        tool("test_tool_with_logging", "Logs three messages while it runs", no_arguments()),
        tool("test_tool_with_progress", "Reports progress 0, 50, 100", no_arguments()),
        tool("test_error_handling", "Always fails", no_arguments()),
        tool("test_sampling", "Asks the client to sample", string_arguments(&["prompt"])),
        tool("test_elicitation", "Asks the user for input", string_arguments(&["message"])),
        tool(
            "test_elicitation_sep1034_defaults",
            "Elicitation with defaults for every primitive type",
            no_arguments(),
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Elicitation with every enum variant",
            no_arguments(),
        ),
        tool(
            "test_reconnection",
            "Answers after ms milliseconds (default 750): past a 500 ms sse_close_after, so the answer arrives on the resumed stream",
            json!({ "type": "object", "properties": { "ms": { "type": "integer" } } }),
        ),
        tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {
                    "address": {
                        "$anchor": "addressDef",
                        "type": "object",
                        "properties": { "street": { "type": "string" }, "city": { "type": "string" } }
                    }
                },
                "properties": {
                    "name": { "type": "string" },
                    "address": { "$ref": "#/$defs/address" },
                    "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                    "phone": { "type": "string" },
                    "email": { "type": "string" }
                },
                "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
                "if": { "properties": { "contactMethod": { "const": "phone" } }, "required": ["contactMethod"] },
                "then": { "required": ["phone"] },
                "else": { "required": ["email"] },
                "additionalProperties": false
            }),
        ),
    ]
}

fn content(items: Value) -> Value {
    json!({ "content": items })
}

fn text(text: &str) -> Value {
    content(json!([{ "type": "text", "text": text }]))
}

/// Runs conformance tool `name`; false if there is no such tool.
pub fn call_tool(demo: &Demo, id: &Value, name: &str, args: &Value, params: &Value) -> bool {
    let image = json!({ "type": "image", "data": PNG, "mimeType": "image/png" });
    match name {
        "test_simple_text" => demo.reply(id, text("This is a simple text response for testing.")),
        "test_image_content" => demo.reply(id, content(json!([image]))),
        "test_audio_content" => demo.reply(
            id,
            content(json!([{ "type": "audio", "data": WAV, "mimeType": "audio/wav" }])),
        ),
        "test_embedded_resource" => demo.reply(
            id,
            content(json!([{ "type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content."
            }}])),
        ),
        "test_multiple_content_types" => demo.reply(
            id,
            content(json!([
                { "type": "text", "text": "Multiple content types test:" },
                image,
                { "type": "resource", "resource": {
                    "uri": "test://mixed-content-resource", "mimeType": "application/json",
                    "text": "{\"test\":\"data\",\"value\":123}"
                }}
            ])),
        ),
        "test_error_handling" => demo.reply(
            id,
            json!({ "isError": true, "content": [{ "type": "text",
                "text": "This tool intentionally returns an error for testing" }] }),
        ),
        "json_schema_2020_12_tool" => demo.reply(id, text("ok")),
        "test_tool_with_logging" => demo.spawn_for(id, |demo, id| async move {
            for (i, message) in [
                "Tool execution started",
                "Tool processing data",
                "Tool execution completed",
            ]
            .into_iter()
            .enumerate()
            {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                demo.notify(
                    methods::MESSAGE,
                    json!({ "level": "info", "logger": "demo", "data": message }),
                );
            }
            demo.reply(&id, text("Tool with logging executed successfully"));
        }),
        "test_tool_with_progress" => {
            let token = params["_meta"]["progressToken"].clone();
            demo.spawn_for(id, |demo, id| async move {
                for (i, progress) in [0, 50, 100].into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    if !token.is_null() {
                        demo.notify(
                            methods::PROGRESS,
                            json!({ "progressToken": token, "progress": progress, "total": 100 }),
                        );
                    }
                }
                demo.reply(&id, text("Tool with progress executed successfully"));
            })
        }
        "test_reconnection" => {
            let ms = args["ms"].as_u64().unwrap_or(750);
            demo.spawn_for(id, move |demo, id| async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                demo.reply(&id, text("Reconnection test completed"));
            })
        }
        "test_sampling" => {
            if !demo.client_supports("sampling") {
                demo.fail(id, -32602, "the client does not support sampling");
                return true;
            }
            let prompt = args["prompt"].as_str().unwrap_or_default().to_owned();
            demo.spawn_for(id, |demo, id| async move {
                let answer = demo
                    .ask(
                        methods::SAMPLING_CREATE_MESSAGE,
                        json!({
                            "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
                            "maxTokens": 100
                        }),
                    )
                    .await;
                let said = answer["result"]["content"]["text"].as_str().unwrap_or_default();
                demo.reply(&id, text(&format!("LLM response: {said}")));
            })
        }
        "test_elicitation" => {
            let message = args["message"].as_str().unwrap_or_default().to_owned();
            elicit(
                demo,
                id,
                json!({
                    "message": message,
                    "requestedSchema": {
                        "type": "object",
                        "properties": {
                            "username": { "type": "string", "description": "User's response" },
                            "email": { "type": "string", "description": "User's email address" }
                        },
                        "required": ["username", "email"]
                    }
                }),
                "User response",
            );
        }
        "test_elicitation_sep1034_defaults" => elicit(
            demo,
            id,
            json!({
                "message": "Please review the defaults",
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "name": { "type": "string", "default": "John Doe" },
                        "age": { "type": "integer", "default": 30 },
                        "score": { "type": "number", "default": 95.5 },
                        "status": { "type": "string", "enum": ["active", "inactive", "pending"], "default": "active" },
                        "verified": { "type": "boolean", "default": true }
                    }
                }
            }),
            "Elicitation completed",
        ),
        "test_elicitation_sep1330_enums" => elicit(
            demo,
            id,
            json!({
                "message": "Please choose",
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "untitledSingle": { "type": "string", "enum": ["option1", "option2", "option3"] },
                        "titledSingle": { "type": "string", "oneOf": [
                            { "const": "value1", "title": "First Option" },
                            { "const": "value2", "title": "Second Option" },
                            { "const": "value3", "title": "Third Option" }
                        ]},
                        "legacyEnum": { "type": "string", "enum": ["opt1", "opt2", "opt3"],
                            "enumNames": ["Option One", "Option Two", "Option Three"] },
                        "untitledMulti": { "type": "array",
                            "items": { "type": "string", "enum": ["option1", "option2", "option3"] } },
                        "titledMulti": { "type": "array", "items": { "anyOf": [
                            { "const": "value1", "title": "First Choice" },
                            { "const": "value2", "title": "Second Choice" },
                            { "const": "value3", "title": "Third Choice" }
                        ]}}
                    }
                }
            }),
            "Elicitation completed",
        ),
        _ => return false,
    }
    true
}

/// Asks the client for input and answers with what it said.
fn elicit(demo: &Demo, id: &Value, request: Value, label: &'static str) {
    if !demo.client_supports("elicitation") {
        demo.fail(id, -32602, "the client does not support elicitation");
        return;
    }
    demo.spawn_for(id, move |demo, id| async move {
        let answer = demo.ask(methods::ELICITATION_CREATE, request).await;
        let result = &answer["result"];
        demo.reply(
            &id,
            text(&format!(
                "{label}: action={}, content={}",
                result["action"].as_str().unwrap_or("unknown"),
                result["content"]
            )),
        );
    });
}

pub fn resources() -> Vec<Value> {
    let resource = |uri: &str, name: &str, mime: &str| json!({ "uri": uri, "name": name, "description": format!("Conformance fixture {name}"), "mimeType": mime });
    vec![
        resource("test://static-text", "static-text", "text/plain"),
        resource("test://static-binary", "static-binary", "image/png"),
        resource("test://watched-resource", "watched-resource", "text/plain"),
    ]
}

pub fn resource_templates() -> Vec<Value> {
    vec![json!({
        "uriTemplate": "test://template/{id}/data", "name": "template-data",
        "description": "Data for an id", "mimeType": "application/json"
    })]
}

pub fn read_resource(uri: &str) -> Option<Value> {
    let text = |mime: &str, text: String| json!({ "uri": uri, "mimeType": mime, "text": text });
    match uri {
        "test://static-text" => Some(text(
            "text/plain",
            "This is the content of the static text resource.".into(),
        )),
        "test://static-binary" => Some(json!({ "uri": uri, "mimeType": "image/png", "blob": PNG })),
        "test://watched-resource" => Some(text("text/plain", "Watched resource content".into())),
        _ => {
            let id = uri
                .strip_prefix("test://template/")?
                .strip_suffix("/data")?;
            let data =
                json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
            Some(text("application/json", data.to_string()))
        }
    }
}

pub fn prompts() -> Vec<Value> {
    let argument = |name: &str, description: &str| json!({ "name": name, "description": description, "required": true });
    vec![
        json!({ "name": "test_simple_prompt", "description": "A simple prompt" }),
        json!({ "name": "test_prompt_with_arguments", "description": "A prompt with arguments",
            "arguments": [argument("arg1", "First test argument"), argument("arg2", "Second test argument")] }),
        json!({ "name": "test_prompt_with_embedded_resource", "description": "A prompt with a resource",
            "arguments": [argument("resourceUri", "URI of the resource to embed")] }),
        json!({ "name": "test_prompt_with_image", "description": "A prompt with an image" }),
    ]
}

pub fn get_prompt(name: &str, args: &Value) -> Option<Value> {
    let user = |content: Value| json!({ "role": "user", "content": content });
    let text = |text: String| user(json!({ "type": "text", "text": text }));
    let messages = match name {
        "test_simple_prompt" => vec![text("This is a simple prompt for testing.".into())],
        "test_prompt_with_arguments" => {
            let arg = |n: &str| args[n].as_str().unwrap_or_default().to_owned();
            vec![text(format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                arg("arg1"),
                arg("arg2")
            ))]
        }
        "test_prompt_with_embedded_resource" => vec![
            user(json!({ "type": "resource", "resource": {
                "uri": args["resourceUri"].as_str().unwrap_or_default(),
                "mimeType": "text/plain", "text": "Embedded resource content for testing."
            }})),
            text("Please process the embedded resource above.".into()),
        ],
        "test_prompt_with_image" => vec![
            user(json!({ "type": "image", "data": PNG, "mimeType": "image/png" })),
            text("Please analyze the image above.".into()),
        ],
        _ => return None,
    };
    Some(json!({ "messages": messages }))
}
