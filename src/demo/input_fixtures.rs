//! The fixtures the 2026-07-28 server scenarios of `@modelcontextprotocol/conformance` call,
//! served the legacy way: what a modern server asks with `input_required`, this one asks with
//! requests to the client (naming the input key each answer is for in
//! `_meta["mcp-session-proxy/inputKey"]`), as servers written before 2026-07-28 do.

use serde_json::{json, Value};

use super::Demo;
use crate::wire::era::INPUT_KEY;
use crate::wire::methods;

fn no_arguments() -> Value {
    json!({ "type": "object", "properties": {} })
}

pub fn tools() -> Vec<Value> {
    let tool = |name: &str, description: &str| json!({ "name": name, "description": description, "inputSchema": no_arguments() });
    vec![
        tool(
            "test_missing_capability",
            "Asks the client to sample, whatever it declared",
        ),
        tool(
            "test_streaming_elicitation",
            "Answers at once on its stream",
        ),
        tool("test_logging_tool", "Logs while it runs, then answers"),
        tool(
            "test_trigger_tool_change",
            "Announces that the tool list changed",
        ),
        tool(
            "test_trigger_prompt_change",
            "Announces that the prompt list changed",
        ),
        tool(
            "test_input_required_result_elicitation",
            "Asks the user's name",
        ),
        tool(
            "test_input_required_result_sampling",
            "Asks the client's model a question",
        ),
        tool(
            "test_input_required_result_list_roots",
            "Asks the client's roots",
        ),
        tool(
            "test_input_required_result_request_state",
            "Asks for a confirmation",
        ),
        tool(
            "test_input_required_result_multiple_inputs",
            "Asks three things at once",
        ),
        tool(
            "test_input_required_result_multi_round",
            "Asks twice, one after the other",
        ),
        tool(
            "test_input_required_result_tampered_state",
            "Asks for a confirmation",
        ),
        tool(
            "test_input_required_result_capabilities",
            "Asks only what the client can answer",
        ),
    ]
}

pub fn prompts() -> Vec<Value> {
    vec![json!({ "name": "test_input_required_result_prompt",
                 "description": "A prompt that asks the user for its context first" })]
}

fn elicitation(key: &str, message: &str, properties: Value, required: &[&str]) -> Value {
    json!({ "message": message, "_meta": { INPUT_KEY: key },
            "requestedSchema": { "type": "object", "properties": properties, "required": required } })
}

fn sampling(key: &str, question: &str, max_tokens: u64) -> Value {
    json!({ "_meta": { INPUT_KEY: key }, "maxTokens": max_tokens,
            "messages": [{ "role": "user", "content": { "type": "text", "text": question } }] })
}

fn roots(key: &str) -> Value {
    json!({ "_meta": { INPUT_KEY: key } })
}

fn text(t: String) -> Value {
    json!({ "content": [{ "type": "text", "text": t }] })
}

/// What an elicitation answer holds under `field`.
fn said(answer: &Value, field: &str) -> String {
    match &answer["result"]["content"][field] {
        Value::String(s) => s.clone(),
        Value::Null => "nothing".into(),
        other => other.to_string(),
    }
}

pub fn call_tool(demo: &Demo, id: &Value, name: &str) -> bool {
    match name {
        "test_missing_capability" => demo.spawn_for(id, |demo, id| async move {
            let answer = demo
                .ask(
                    methods::SAMPLING_CREATE_MESSAGE,
                    sampling("sample", "Hi?", 10),
                )
                .await;
            demo.reply(
                &id,
                text(format!("sampled: {}", answer["result"]["content"]["text"])),
            );
        }),
        "test_streaming_elicitation" => demo.reply(id, text("Streaming complete".into())),
        "test_logging_tool" => {
            demo.notify(
                methods::MESSAGE,
                json!({ "level": "info", "logger": "demo", "data": "Logging evaluated" }),
            );
            demo.reply(id, text("Logging evaluated".into()));
        }
        "test_trigger_tool_change" => {
            demo.notify(methods::TOOLS_LIST_CHANGED, json!({}));
            demo.reply(id, text("Tool list changed".into()));
        }
        "test_trigger_prompt_change" => {
            demo.notify(methods::PROMPTS_LIST_CHANGED, json!({}));
            demo.reply(id, text("Prompt list changed".into()));
        }
        "test_input_required_result_elicitation" => demo.spawn_for(id, |demo, id| async move {
            let request = elicitation(
                "user_name",
                "What is your name?",
                json!({ "name": { "type": "string" } }),
                &["name"],
            );
            let answer = demo.ask(methods::ELICITATION_CREATE, request).await;
            demo.reply(&id, text(format!("Hello, {}!", said(&answer, "name"))));
        }),
        "test_input_required_result_sampling" => demo.spawn_for(id, |demo, id| async move {
            let request = sampling("sample_request", "What is the capital of France?", 100);
            let answer = demo.ask(methods::SAMPLING_CREATE_MESSAGE, request).await;
            let reply = answer["result"]["content"]["text"]
                .as_str()
                .unwrap_or("nothing")
                .to_owned();
            demo.reply(&id, text(format!("The model said: {reply}")));
        }),
        "test_input_required_result_list_roots" => demo.spawn_for(id, |demo, id| async move {
            let answer = demo.ask(methods::ROOTS_LIST, roots("roots_request")).await;
            let count = answer["result"]["roots"].as_array().map_or(0, Vec::len);
            demo.reply(&id, text(format!("The client has {count} roots")));
        }),
        "test_input_required_result_request_state"
        | "test_input_required_result_tampered_state" => {
            demo.spawn_for(id, |demo, id| async move {
                let request = elicitation(
                    "confirm",
                    "Please confirm",
                    json!({ "ok": { "type": "boolean" } }),
                    &["ok"],
                );
                let answer = demo.ask(methods::ELICITATION_CREATE, request).await;
                demo.reply(
                    &id,
                    text(format!("state-ok: confirmed {}", said(&answer, "ok"))),
                );
            })
        }
        "test_input_required_result_multiple_inputs" => demo.spawn_for(id, |demo, id| async move {
            let (named, greeted, rooted) = tokio::join!(
                demo.ask(
                    methods::ELICITATION_CREATE,
                    elicitation(
                        "user_name",
                        "What is your name?",
                        json!({ "name": { "type": "string" } }),
                        &["name"]
                    )
                ),
                demo.ask(
                    methods::SAMPLING_CREATE_MESSAGE,
                    sampling("greeting", "Generate a greeting", 50)
                ),
                demo.ask(methods::ROOTS_LIST, roots("client_roots")),
            );
            let greeting = greeted["result"]["content"]["text"]
                .as_str()
                .unwrap_or("nothing")
                .to_owned();
            let count = rooted["result"]["roots"].as_array().map_or(0, Vec::len);
            demo.reply(
                &id,
                text(format!(
                    "{greeting} {} ({count} roots)",
                    said(&named, "name")
                )),
            );
        }),
        "test_input_required_result_multi_round" => demo.spawn_for(id, |demo, id| async move {
            let name = demo
                .ask(
                    methods::ELICITATION_CREATE,
                    elicitation(
                        "step1",
                        "What is your name?",
                        json!({ "name": { "type": "string" } }),
                        &["name"],
                    ),
                )
                .await;
            let color = demo
                .ask(
                    methods::ELICITATION_CREATE,
                    elicitation(
                        "step2",
                        "What is your favourite color?",
                        json!({ "color": { "type": "string" } }),
                        &["color"],
                    ),
                )
                .await;
            demo.reply(
                &id,
                text(format!(
                    "{} likes {}",
                    said(&name, "name"),
                    said(&color, "color")
                )),
            );
        }),
        "test_input_required_result_capabilities" => {
            let (samples, elicits) = (
                demo.client_supports("sampling"),
                demo.client_supports("elicitation"),
            );
            demo.spawn_for(id, move |demo, id| async move {
                let mut heard = Vec::new();
                if samples {
                    let answer = demo
                        .ask(
                            methods::SAMPLING_CREATE_MESSAGE,
                            sampling("sample_input", "Sample request", 50),
                        )
                        .await;
                    heard.push(format!("sampled {}", answer["result"]["content"]["text"]));
                }
                if elicits {
                    let answer = demo
                        .ask(
                            methods::ELICITATION_CREATE,
                            elicitation(
                                "user_input",
                                "Anything to add?",
                                json!({ "note": { "type": "string" } }),
                                &[],
                            ),
                        )
                        .await;
                    heard.push(format!("elicited {}", said(&answer, "note")));
                }
                demo.reply(
                    &id,
                    text(format!(
                        "asked only what the client declared: {}",
                        heard.join(", ")
                    )),
                );
            })
        }
        _ => return false,
    }
    true
}

/// `prompts/get` of the prompt that asks first; false for any other prompt.
pub fn get_prompt(demo: &Demo, id: &Value, name: &str) -> bool {
    if name != "test_input_required_result_prompt" {
        return false;
    }
    demo.spawn_for(id, |demo, id| async move {
        let request = elicitation(
            "user_context",
            "What context should the prompt use?",
            json!({ "context": { "type": "string" } }),
            &["context"],
        );
        let answer = demo.ask(methods::ELICITATION_CREATE, request).await;
        let context = said(&answer, "context");
        demo.reply(
            &id,
            json!({ "messages": [{ "role": "user",
            "content": { "type": "text", "text": format!("Prompt with context: {context}") } }] }),
        );
    });
    true
}
