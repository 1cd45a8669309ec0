//! Which resources clients see (`[resources]`, `[servers.<name>.resources]`), over real sockets
//! in front of the demo server: hidden resources are absent from `resources/list` (cached
//! lists included) and templates are listed by their text; reading, subscribing to or
//! unsubscribing from a hidden URI is a resource not found, never sent to the server; and the
//! server's updates of a hidden URI never reach the client.

use crate::harness::{assert_duplicate_refused, Client, Proxy};
use mcp_session_proxy::config::ResourcesConfig;
use mcp_session_proxy::config::{Config, Isolation, ServerConfig};
use serde_json::{json, Value};

fn counter_hidden(config: &mut Config) {
    config.resources = ResourcesConfig {
        deny: vec!["demo://counter".into(), "test://static-*".into()],
        ..ResourcesConfig::default()
    };
}

/// The URIs (or URI templates) of a list answer's `key` entries, by `field`.
fn listed(answer: &Value, key: &str, field: &str) -> Vec<String> {
    answer["result"][key]
        .as_array()
        .unwrap_or_else(|| panic!("a {key} list: {answer}"))
        .iter()
        .map(|entry| entry[field].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn uris(client: &mut Client) -> Vec<String> {
    let answer = client.request("resources/list", json!({})).await;
    listed(&answer, "resources", "uri")
}

fn assert_not_found(answer: &Value, uri: &str) {
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        format!("Resource not found: {uri}")
    );
    assert_eq!(answer["error"]["data"]["uri"], uri, "{answer}");
}

#[tokio::test]
async fn hidden_resources_are_neither_listed_nor_read_nor_subscribed_to() {
    let proxy = Proxy::start_with(counter_hidden).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let seen = uris(&mut client).await;
    assert!(seen.contains(&"demo://greeting".to_owned()), "{seen:?}");
    assert!(
        seen.contains(&"test://watched-resource".to_owned()),
        "{seen:?}"
    );
    for hidden in [
        "demo://counter",
        "test://static-text",
        "test://static-binary",
    ] {
        assert!(!seen.contains(&hidden.to_owned()), "{hidden} in {seen:?}");
    }

    let read = client
        .request("resources/read", json!({ "uri": "demo://greeting" }))
        .await;
    assert_eq!(
        read["result"]["contents"][0]["text"], "Hello from the demo server",
        "{read}"
    );
    for method in [
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
    ] {
        let refused = client
            .request(method, json!({ "uri": "demo://counter" }))
            .await;
        // The demo server takes any subscription: this refusal is the proxy's own.
        assert_not_found(&refused, "demo://counter");
    }
    let subscribed = client
        .request("resources/subscribe", json!({ "uri": "demo://greeting" }))
        .await;
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    proxy.stop().await;
}

#[tokio::test]
async fn updates_of_hidden_resources_never_reach_the_client() {
    let proxy = Proxy::start_with(counter_hidden).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let mut updates = client.get(None).await;
    client
        .call_tool(
            "emit_updates",
            json!({ "uris": ["demo://counter", "demo://greeting"], "count": 4, "tag": "t" }),
        )
        .await;
    // In order on one stream: had a hidden one been delivered, it would come first.
    for index in [1, 3] {
        let update = updates
            .next_with_method("notifications/resources/updated")
            .await;
        assert_eq!(update["params"]["uri"], "demo://greeting", "{update}");
        assert_eq!(update["params"]["_meta"]["demo/index"], index, "{update}");
    }
    proxy.stop().await;
}

#[tokio::test]
async fn templates_are_listed_by_their_text_and_reads_through_them_checked_by_uri() {
    let proxy = Proxy::start_with(|config| {
        config.resources.allow = vec!["demo://*".into(), "test://template/*".into()];
        config.resources.deny = vec!["test://template/secret/*".into()];
    })
    .await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    assert_eq!(
        uris(&mut client).await,
        ["demo://greeting", "demo://counter"]
    );
    let templates = client.request("resources/templates/list", json!({})).await;
    assert_eq!(
        listed(&templates, "resourceTemplates", "uriTemplate"),
        ["test://template/{id}/data"]
    );
    let read = client
        .request("resources/read", json!({ "uri": "test://template/7/data" }))
        .await;
    assert!(read["result"]["contents"].is_array(), "{read}");
    let uri = "test://template/secret/data";
    let refused = client
        .request("resources/read", json!({ "uri": uri }))
        .await;
    assert_not_found(&refused, uri);
    let refused = client
        .request("resources/read", json!({ "uri": "test://static-text" }))
        .await;
    assert_not_found(&refused, "test://static-text");
    proxy.stop().await;
}

#[tokio::test]
async fn the_list_cache_keeps_resource_lists_as_clients_see_them() {
    let proxy = Proxy::start_with(|config| {
        counter_hidden(config);
        config.upstream.isolation = Isolation::Shared;
    })
    .await;
    let mut a = proxy.initialized_client("2025-06-18").await;
    let mut b = proxy.initialized_client("2025-06-18").await;
    let first = uris(&mut a).await;
    let cached = uris(&mut b).await;
    assert_eq!(proxy.metric("mcp_proxy_list_cache_hits_total"), 1);
    assert_eq!(first, cached);
    assert!(!cached.contains(&"demo://counter".to_owned()), "{cached:?}");
    a.call_tool("notify_list_changed", json!({ "list": "resources" }))
        .await;
    assert_eq!(uris(&mut b).await, first, "refetched and shown alike");
    proxy.stop().await;
}

#[tokio::test]
async fn each_gateway_server_shows_its_resources_its_own_way() {
    let proxy = Proxy::start_with(|config| {
        config.upstream.stdio = None;
        for name in ["alpha", "beta"] {
            let mut server = ServerConfig::default();
            server.upstream.stdio = Some(format!(
                "{} demo-server",
                shell_words::quote(crate::harness::DEMO)
            ));
            if name == "alpha" {
                server.resources.deny = vec!["demo://counter".into()];
            }
            config.servers.insert(name.into(), server);
        }
    })
    .await;
    let mut alpha = proxy.client();
    alpha.path = "/servers/alpha/mcp".into();
    alpha.initialize("2025-11-25").await;
    assert!(!uris(&mut alpha)
        .await
        .contains(&"demo://counter".to_owned()));
    let refused = alpha
        .request("resources/read", json!({ "uri": "demo://counter" }))
        .await;
    assert_not_found(&refused, "demo://counter");

    let mut beta = proxy.client();
    beta.path = "/servers/beta/mcp".into();
    beta.initialize("2025-11-25").await;
    assert!(uris(&mut beta).await.contains(&"demo://counter".to_owned()));
    let read = beta
        .request("resources/read", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(read["result"]["contents"][0]["text"], "0", "{read}");
    proxy.stop().await;
}

#[tokio::test]
async fn a_2026_07_28_server_behind_the_bridge_shows_its_resources_alike() {
    let proxy = Proxy::start_with(|config| {
        crate::harness::serve_the_modern_demo(config);
        counter_hidden(config);
    })
    .await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let seen = uris(&mut client).await;
    assert!(seen.contains(&"demo://greeting".to_owned()), "{seen:?}");
    assert!(!seen.contains(&"demo://counter".to_owned()), "{seen:?}");
    let refused = client
        .request("resources/read", json!({ "uri": "demo://counter" }))
        .await;
    assert_not_found(&refused, "demo://counter");
    proxy.stop().await;
}

#[tokio::test]
async fn a_duplicated_uri_is_refused_whole_never_read_one_way_and_sent_another() {
    let proxy = Proxy::start_with(|config| {
        config.resources.deny = vec!["demo://counter*".into()];
    })
    .await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    let refused = client
        .request("resources/read", json!({ "uri": "demo://counter" }))
        .await;
    assert_not_found(&refused, "demo://counter");
    // A server that keeps the last of two values would read the counter.
    let reply = client
        .post_text(
            r#"{"jsonrpc":"2.0","id":41,"method":"resources/read",
                "params":{"uri":"demo://counter","uri":"demo://counter"}}"#,
        )
        .await;
    assert_duplicate_refused(reply, 41, "params.uri").await;
    let reply = client
        .post_text(
            r#"{"jsonrpc":"2.0","id":42,"method":"resources/read",
                "params":{"uri":"demo://greeting","_meta":{"a":1,"a":2}}}"#,
        )
        .await;
    assert_duplicate_refused(reply, 42, "params._meta.a").await;
    // The session goes on.
    let read = client
        .request("resources/read", json!({ "uri": "demo://greeting" }))
        .await;
    assert_eq!(
        read["result"]["contents"][0]["text"],
        "Hello from the demo server"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_uri_is_held_to_the_rules_however_the_server_reads_it() {
    let proxy = Proxy::start_with(|config| {
        config.resources.deny = vec!["demo://counter*".into(), "test://template/secret/*".into()];
    })
    .await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    // Each of these is the counter, or the secret template's data, to a server that reads URIs
    // as RFC 3986 says (and the demo serves the template's data for any id it is sent).
    for uri in [
        "DEMO://counter",
        "demo://COUNTER",
        "demo://%63ounter",
        "test://template/1/data/../../secret/data",
        "test://template/%73ecret/data",
        "test://template/public/..%2Fsecret/data",
        "test://template//secret/data",
        "test://template/public//../secret/data",
    ] {
        let refused = client
            .request("resources/read", json!({ "uri": uri }))
            .await;
        assert_not_found(&refused, uri);
    }
    let read = client
        .request("resources/read", json!({ "uri": "test://template/7/data" }))
        .await;
    assert!(read["result"]["contents"].is_array(), "{read}");
    proxy.stop().await;
}

#[tokio::test]
async fn a_request_whose_resource_cannot_be_read_is_refused_not_sent_unread() {
    let proxy = Proxy::start_with(counter_hidden).await;
    let mut client = proxy.initialized_client("2025-11-25").await;
    for (params, why) in [
        (
            json!({ "uri": ["demo://counter"] }),
            "params.uri must be a string",
        ),
        (json!({}), "params.uri must be a string"),
        (json!(["demo://counter"]), "params must be an object"),
    ] {
        let refused = client.request("resources/read", params).await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(why), "{refused}");
    }
    proxy.stop().await;
}
