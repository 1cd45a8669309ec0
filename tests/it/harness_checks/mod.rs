//! The harness's own promises: waits that fail instead of hanging, and the authorization server the
//! OAuth tests run against.

mod auth_server_harness;
mod harness_bounds;
