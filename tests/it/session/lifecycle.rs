//! How sessions and their children end: idle expiry on tokio's paused clock (an idle session
//! ends and its child is released; one with an attached stream stays), and proxy shutdown.

use std::time::Duration;

use crate::harness::Proxy;
use http::StatusCode;
use mcp_session_proxy::base::ids::Principal;
use mcp_session_proxy::config::Isolation;
use mcp_session_proxy::upstream::Upstream;
use nix::sys::signal::kill;
use nix::unistd::Pid;

fn child_pid(proxy: &Proxy, session: &str) -> i32 {
    let session = proxy
        .running
        .registry()
        .get(session, &Principal::anonymous())
        .expect("the session is registered");
    let Some(Upstream::Stdio(stdio)) = session.upstream() else {
        panic!("a stdio upstream");
    };
    stdio.pid().expect("a running child") as i32
}

fn alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

/// Long enough that set-up cannot reach it: under the paused clock every moment the runtime
/// waits on a child process auto-advances time to the next timer (a sweep, at most 30 s). The
/// request timeout gets the same length, or a request waiting on a child would leap past it.
const TTL: Duration = Duration::from_secs(6 * 3600);

#[tokio::test(start_paused = true)]
async fn an_idle_session_expires_and_its_child_is_released() {
    let proxy = Proxy::start_with(|c| {
        c.session.idle_ttl = TTL;
        c.upstream.request_timeout = TTL;
    })
    .await;
    let idle = proxy.initialized_client("2025-06-18").await;
    let mut watched = proxy.initialized_client("2025-06-18").await;
    let _stream = watched.get(None).await;
    let idle_pid = child_pid(&proxy, idle.session.as_deref().unwrap());
    assert!(alive(idle_pid));
    assert_eq!(proxy.metric("mcp_proxy_sessions_expired_total"), 0);

    tokio::time::advance(TTL + Duration::from_secs(30)).await;
    crate::harness::on_the_paused_clock_until("the idle session to expire", || {
        proxy.metric("mcp_proxy_sessions_expired_total") > 0
    })
    .await;

    assert_eq!(idle.get(None).await.status, StatusCode::NOT_FOUND);
    crate::harness::on_the_paused_clock_until("the idle session's child to exit", || {
        !alive(idle_pid)
    })
    .await;
    assert_eq!(proxy.metric("mcp_proxy_sessions_expired_total"), 1);
    assert_eq!(
        watched
            .call_tool("echo", serde_json::json!({ "text": "kept" }))
            .await,
        "kept",
        "a session with an attached stream is not idle"
    );
    proxy.stop().await;
}

/// The idle sweep looks at a session when it could have been idle for its TTL, not at every
/// tick: twenty idle sessions cost no look until they are due, then one each; a session used
/// meanwhile is looked at again when it could be idle.
#[tokio::test(start_paused = true)]
async fn the_idle_sweep_looks_only_at_sessions_due() {
    let proxy = Proxy::start_with(|c| {
        c.session.idle_ttl = TTL;
        c.upstream.request_timeout = TTL;
        c.upstream.isolation = Isolation::Shared;
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(proxy.initialized_client("2025-06-18").await);
    }
    let mut used = proxy.initialized_client("2025-06-18").await;
    let looks = || proxy.metric("mcp_proxy_idle_sweep_looks_total");
    let expired = || proxy.metric("mcp_proxy_sessions_expired_total");

    tokio::time::advance(TTL / 2).await;
    let text = serde_json::json!({ "text": "still here" });
    assert_eq!(used.call_tool("echo", text.clone()).await, "still here");
    assert_eq!(looks(), 0, "nothing was due");

    tokio::time::advance(TTL / 2 + Duration::from_secs(1)).await;
    crate::harness::on_the_paused_clock_until("the idle sessions to expire", || expired() == 20)
        .await;
    assert_eq!(looks(), 21, "each session once, the idle ones ended");
    assert_eq!(used.call_tool("echo", text).await, "still here");
    assert_eq!(idle[0].get(None).await.status, StatusCode::NOT_FOUND);

    tokio::time::advance(TTL + Duration::from_secs(1)).await;
    crate::harness::on_the_paused_clock_until("the used session to expire", || expired() == 21)
        .await;
    assert_eq!(looks(), 22, "the used one once more, when it could be idle");
    proxy.stop().await;
}

#[tokio::test]
async fn stopping_the_proxy_releases_every_child_before_it_returns() {
    let proxy = Proxy::start().await;
    let mut pids = Vec::new();
    for _ in 0..3 {
        let client = proxy.initialized_client("2025-06-18").await;
        pids.push(child_pid(&proxy, client.session.as_deref().unwrap()));
    }
    assert!(pids.iter().all(|pid| alive(*pid)));
    proxy.stop().await;
    for pid in pids {
        assert!(!alive(pid), "child {pid} is gone once stop returns");
    }
}

#[tokio::test]
async fn a_warm_pool_hands_out_children_started_beforehand_and_refills() {
    let proxy = Proxy::start_with(|c| c.upstream.warm = 2).await;
    assert_eq!(
        proxy.metric("mcp_proxy_upstream_spawns_total"),
        2,
        "started with the proxy, before any session"
    );
    let mut client = proxy.initialized_client("2025-06-18").await;
    assert_eq!(
        client.call_tool("counter", serde_json::json!({})).await,
        "1"
    );
    assert_eq!(
        proxy.metric("mcp_proxy_upstream_spawns_total"),
        3,
        "one taken, one started"
    );
    let pid = child_pid(&proxy, client.session.as_deref().unwrap());
    let mut other = proxy.initialized_client("2025-06-18").await;
    assert_eq!(
        other.call_tool("counter", serde_json::json!({})).await,
        "1",
        "a child each"
    );
    proxy.stop().await;
    assert!(!alive(pid));
}
