//! Servers behind the proxy over each transport (stdio, Streamable HTTP, legacy SSE, 2026-07-28
//! servers), the bounds on what they can make it hold, and what a child finds in its environment.

mod child_env;
mod demo_server;
mod hostile_child;
mod http_upstream;
mod https_upstream;
mod modern_demo_http;
mod modern_upstream;
mod sandbox;
mod sse_upstream;
mod timeouts;
mod typescript_server;
mod upstream_bounds;
