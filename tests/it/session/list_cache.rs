//! The list cache over real sockets: shared across sessions and kept per principal, emptied by
//! the server's list_changed; off by default for per-session children.

use crate::harness::Proxy;
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

#[tokio::test]
async fn per_request_metadata_does_not_make_a_list_new() {
    let proxy = Proxy::start_with(|c| c.upstream.isolation = Isolation::Shared).await;
    let mut client = proxy.initialized_client("2025-06-18").await;
    let traced = |n: u32| json!({ "_meta": { "traceparent": format!("00-{n:032x}-{n:016x}-01") } });
    let first = client.request("tools/list", traced(1)).await;
    for n in 2..=50 {
        let again = client.request("tools/list", traced(n)).await;
        assert_eq!(again["result"], first["result"]);
    }
    assert_eq!(
        counts(&proxy),
        (49, 1),
        "one entry, whatever the trace context"
    );
    client
        .request("tools/list", json!({ "cursor": "x", "_meta": {} }))
        .await;
    assert_eq!(counts(&proxy), (49, 2), "a cursor pages apart");
    proxy.stop().await;
}

#[tokio::test]
async fn the_cache_is_bounded_and_counts_what_it_evicts() {
    let proxy = Proxy::start_with(|c| c.upstream.isolation = Isolation::Shared).await;
    let mut client = proxy.initialized_client("2025-06-18").await;
    // Each request's params differ, a MiB each: the cache keeps 16 MiB at most.
    let padded = |n: u32| json!({ "pad": format!("{n}{}", "-".repeat(1 << 20)) });
    for n in 0..20 {
        let listed = client.request("tools/list", padded(n)).await;
        assert!(listed["result"]["tools"].is_array(), "{listed}");
    }
    assert_eq!(counts(&proxy), (0, 20));
    let evicted = proxy.metric("mcp_proxy_list_cache_evictions_total");
    assert!((4..20).contains(&evicted), "{evicted} evicted");
    client.request("tools/list", padded(19)).await;
    assert_eq!(counts(&proxy), (1, 20), "the newest entry is kept");
    client.request("tools/list", padded(0)).await;
    assert_eq!(counts(&proxy), (1, 21), "the oldest made room");
    proxy.stop().await;
}
