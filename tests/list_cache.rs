//! The list cache over real sockets: shared across sessions and kept per principal, emptied by
//! the server's list_changed; off by default for per-session children.

mod common;

use common::Proxy;
use mcp_session_proxy::config::Isolation;
use serde_json::json;

fn counts(proxy: &Proxy) -> (u64, u64) {
    (
        proxy.metric("mcp_proxy_list_cache_hits_total"),
        proxy.metric("mcp_proxy_list_cache_misses_total"),
    )
}

#[tokio::test]
async fn lists_are_cached_across_sessions_per_principal_until_they_change() {
    let proxy = Proxy::start_with(|c| c.upstream.isolation = Isolation::Shared).await;
    let mut a = proxy.initialized_client("2025-06-18").await;
    let mut b = proxy.initialized_client("2025-06-18").await;
    let first = a.request("tools/list", json!({})).await;
    assert_eq!(counts(&proxy), (0, 1));
    let second = b.request("tools/list", json!({})).await;
    assert_eq!(
        counts(&proxy),
        (1, 1),
        "the second session is answered from the cache"
    );
    assert_eq!(first["result"], second["result"]);
    assert_eq!(second["id"], b.next_id() - 1, "under its own request id");

    let mut other = proxy.client();
    other.authorization = Some("Bearer another-principal".into());
    other.initialize("2025-06-18").await;
    other.request("tools/list", json!({})).await;
    assert_eq!(
        counts(&proxy),
        (1, 2),
        "another principal has its own entries"
    );

    a.call_tool("notify_list_changed", json!({ "list": "tools" }))
        .await;
    b.request("tools/list", json!({})).await;
    assert_eq!(counts(&proxy), (1, 3), "list_changed emptied the cache");
    a.request("tools/list", json!({})).await;
    assert_eq!(counts(&proxy), (2, 3));
    b.request("prompts/list", json!({})).await;
    a.call_tool("notify_list_changed", json!({ "list": "tools" }))
        .await;
    a.request("prompts/list", json!({})).await;
    assert_eq!(
        counts(&proxy),
        (3, 4),
        "another list's change leaves prompts cached"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn per_session_children_are_not_cached_by_default() {
    let proxy = Proxy::start().await;
    let mut a = proxy.initialized_client("2025-06-18").await;
    let mut b = proxy.initialized_client("2025-06-18").await;
    a.request("tools/list", json!({})).await;
    b.request("tools/list", json!({})).await;
    assert_eq!(counts(&proxy), (0, 0));
    proxy.stop().await;
}
