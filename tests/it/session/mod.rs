//! What sessions keep for their clients: replay, subscriptions, lifetimes, the list cache, shared
//! children, server requests, exposure rules, rate limits, protocol-level and data-layer sessions.

mod data_layer;
mod lifecycle;
mod list_cache;
mod protocol_sessions;
mod rate_limits;
mod replay;
mod resource_exposure;
mod server_requests;
mod shared;
mod subscriptions;
mod tool_exposure;
