//! Test harness: a proxy listening on 127.0.0.1:0 in front of the real demo server binary, and
//! a small HTTP client that speaks Streamable HTTP over real sockets. Every helper that waits on
//! the proxy or a peer is bounded ([`within`]): a proxy that never answers fails the test.

pub mod auth_server;
pub mod balancer;
mod client;
pub mod cluster;
pub mod line;
mod modern;
mod peers;
mod process;
mod proxy;
pub mod redis_cluster;
mod reply;
pub mod sentinel;
pub mod tls;
mod wait;
pub mod ws;

pub use client::Client;
pub use modern::{modern_meta, modern_request, MODERN};
pub use peers::{
    modern_demo_over_http, node_dir, pinned_node_client, recording_upstream, sdk_client,
    sdk_client_with_env, server_everything,
};
pub use process::{
    free_port, memory_kib, python_script, refused_start, refused_start_command, repo_root,
    spawn_announcing, spawn_proxy, spawn_proxy_command, spawn_proxy_with_env, stdout_of, LogLines,
    StdoutLines,
};
pub use proxy::{metric_in, serve_the_modern_demo, Proxy, SecretFile};
pub use reply::{assert_duplicate_refused, assert_refused_for, keep_alives, Received, Reply};
pub use wait::{eventually, on_the_paused_clock_until, until, with_bound, within, WAIT};

/// The proxy's own binary (also the demo server, `demo-server`).
pub const DEMO: &str = env!("CARGO_BIN_EXE_mcp-session-proxy");

/// Stdio children of proxies in this process start through the proxy's binary, their
/// launcher (this process is the test binary).
pub fn use_the_proxys_launcher() {
    mcp_session_proxy::upstream::sandbox::use_launcher(DEMO);
}
