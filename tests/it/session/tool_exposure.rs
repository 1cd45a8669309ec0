//! Which tools clients see (`[tools]`, `[servers.<name>.tools]`): hidden tools are absent from
//! `tools/list` and unknown to `tools/call` (never sent to the server), renamed and prefixed
//! tools are called by the name clients see, and the list cache keeps the lists as seen;
//! prompts likewise (`[prompts]`).

use crate::harness::{Client, Proxy};
use mcp_session_proxy::config::ToolsConfig;
use mcp_session_proxy::config::{Config, Isolation, ServerConfig};
use serde_json::{json, Value};

fn exposed(config: &mut Config) {
    config.tools = ToolsConfig {
        deny: vec!["sleep*".into(), "emit_*".into()],
        rename: [("echo".to_owned(), "say".to_owned())].into(),
        descriptions: [("add".to_owned(), "Adds two numbers.".to_owned())].into(),
        ..ToolsConfig::default()
    };
}

fn names(listed: &Value) -> Vec<String> {
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("a tool list: {listed}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn call(client: &mut Client, name: &str, arguments: Value) -> Value {
    client
        .request(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        )
        .await
}

fn assert_unknown(answer: &Value, name: &str) {
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(answer["error"]["message"], format!("Unknown tool: {name}"));
}

#[tokio::test]
async fn hidden_tools_are_neither_listed_nor_called_and_renamed_ones_answer_to_their_new_name() {
    let proxy = Proxy::start_with(exposed).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let listed = client.request("tools/list", json!({})).await;
    let seen = names(&listed);
    assert!(seen.contains(&"say".to_owned()), "{seen:?}");
    for hidden in ["echo", "sleep", "emit_updates"] {
        assert!(!seen.contains(&hidden.to_owned()), "{hidden} in {seen:?}");
    }
    let add = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "add")
        .expect("add is seen");
    assert_eq!(add["description"], "Adds two numbers.");

    assert_eq!(
        client.call_tool("say", json!({ "text": "renamed" })).await,
        "renamed"
    );
    assert_unknown(
        &call(&mut client, "echo", json!({ "text": "x" })).await,
        "echo",
    );
    // Were it sent, this call would hold the server for a minute; it is answered at once.
    let sleeping = crate::harness::within(
        "a hidden tool's refusal",
        call(&mut client, "sleep", json!({ "ms": 60_000 })),
    )
    .await;
    assert_unknown(&sleeping, "sleep");
    assert_eq!(
        client.call_tool("add", json!({ "a": 2, "b": 3 })).await,
        "5"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn the_list_cache_keeps_the_lists_as_clients_see_them() {
    let proxy = Proxy::start_with(|config| {
        exposed(config);
        config.upstream.isolation = Isolation::Shared;
    })
    .await;
    let mut a = proxy.initialized_client("2025-06-18").await;
    let mut b = proxy.initialized_client("2025-06-18").await;
    let first = a.request("tools/list", json!({})).await;
    let cached = b.request("tools/list", json!({})).await;
    assert_eq!(proxy.metric("mcp_proxy_list_cache_hits_total"), 1);
    assert_eq!(first["result"], cached["result"]);
    assert!(!names(&cached).contains(&"echo".to_owned()));
    a.call_tool("notify_list_changed", json!({ "list": "tools" }))
        .await;
    let relisted = b.request("tools/list", json!({})).await;
    assert_eq!(
        names(&relisted),
        names(&first),
        "refetched and exposed alike"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn each_gateway_server_exposes_its_tools_its_own_way() {
    let proxy = Proxy::start_with(|config| {
        config.upstream.stdio = None;
        for (name, prefix) in [("alpha", "alpha_"), ("beta", "")] {
            let mut server = ServerConfig::default();
            server.upstream.stdio = Some(format!(
                "{} demo-server",
                shell_words::quote(crate::harness::DEMO)
            ));
            server.tools.prefix = prefix.into();
            if name == "beta" {
                server.tools.allow = vec!["echo".into()];
            }
            config.servers.insert(name.into(), server);
        }
    })
    .await;
    let mut alpha = proxy.client();
    alpha.path = "/servers/alpha/mcp".into();
    alpha.initialize("2025-11-25").await;
    let seen = names(&alpha.request("tools/list", json!({})).await);
    assert!(
        seen.iter().all(|name| name.starts_with("alpha_")),
        "{seen:?}"
    );
    assert_eq!(
        alpha
            .call_tool("alpha_echo", json!({ "text": "prefixed" }))
            .await,
        "prefixed"
    );
    assert_unknown(
        &call(&mut alpha, "echo", json!({ "text": "x" })).await,
        "echo",
    );

    let mut beta = proxy.client();
    beta.path = "/servers/beta/mcp".into();
    beta.initialize("2025-11-25").await;
    assert_eq!(
        names(&beta.request("tools/list", json!({})).await),
        ["echo"]
    );
    assert_unknown(
        &call(&mut beta, "add", json!({ "a": 1, "b": 1 })).await,
        "add",
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_2026_07_28_server_behind_the_bridge_is_exposed_alike() {
    let proxy = Proxy::start_with(|config| {
        crate::harness::serve_the_modern_demo(config);
        exposed(config);
    })
    .await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let seen = names(&client.request("tools/list", json!({})).await);
    assert!(seen.contains(&"say".to_owned()), "{seen:?}");
    assert!(!seen.contains(&"echo".to_owned()), "{seen:?}");
    assert_eq!(
        client.call_tool("say", json!({ "text": "bridged" })).await,
        "bridged"
    );
    assert_unknown(
        &call(&mut client, "echo", json!({ "text": "x" })).await,
        "echo",
    );
    proxy.stop().await;
}

#[tokio::test]
async fn prompts_are_exposed_the_same_way() {
    let proxy = Proxy::start_with(|config| {
        config.prompts.rename = [("greet".to_owned(), "hello".to_owned())].into();
    })
    .await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let listed = client.request("prompts/list", json!({})).await;
    let seen: Vec<&str> = listed["result"]["prompts"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|prompt| prompt["name"].as_str())
        .collect();
    assert!(
        seen.contains(&"hello") && !seen.contains(&"greet"),
        "{seen:?}"
    );
    let got = client
        .request(
            "prompts/get",
            json!({ "name": "hello", "arguments": { "name": "Ada" } }),
        )
        .await;
    assert!(got["result"]["messages"].is_array(), "{got}");
    let unknown = client
        .request(
            "prompts/get",
            json!({ "name": "greet", "arguments": { "name": "Ada" } }),
        )
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert_eq!(unknown["error"]["message"], "Unknown prompt: greet");
    proxy.stop().await;
}

async fn complete(client: &mut Client, reference: Value) -> Value {
    client
        .request(
            "completion/complete",
            json!({ "ref": reference, "argument": { "name": "name", "value": "A" } }),
        )
        .await
}

#[tokio::test]
async fn completions_are_held_to_the_rules_of_what_they_complete() {
    let proxy = Proxy::start_with(|config| {
        config.prompts.rename = [("greet".to_owned(), "hello".to_owned())].into();
        config.prompts.prefix = "demo_".into();
        config.prompts.deny = vec!["test_prompt_with_arguments".into()];
        config.resources.deny = vec!["test://template/*".into()];
    })
    .await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    // The demo completes with what it was asked about: the server's own name.
    let seen = complete(
        &mut client,
        json!({ "type": "ref/prompt", "name": "demo_hello" }),
    )
    .await;
    assert_eq!(
        seen["result"]["completion"]["values"],
        json!(["greet"]),
        "{seen}"
    );
    for hidden in ["greet", "demo_greet", "demo_test_prompt_with_arguments"] {
        let refused = complete(&mut client, json!({ "type": "ref/prompt", "name": hidden })).await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert_eq!(
            refused["error"]["message"],
            format!("Unknown prompt: {hidden}")
        );
    }
    let template = "test://template/{id}/data";
    let refused = complete(
        &mut client,
        json!({ "type": "ref/resource", "uri": template }),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
    assert_eq!(refused["error"]["data"]["uri"], template, "{refused}");
    let seen = complete(
        &mut client,
        json!({ "type": "ref/resource", "uri": "demo://greeting" }),
    )
    .await;
    assert_eq!(
        seen["result"]["completion"]["values"],
        json!(["demo://greeting"]),
        "{seen}"
    );
    let refused = complete(
        &mut client,
        json!({ "type": "ref/tool", "name": "demo_hello" }),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    proxy.stop().await;
}
