//! Real third-party peers through the proxy: the official SDK clients (with and without OAuth), the
//! conformance suite, browsers, npm server-everything.

mod browser_clients;
mod conformance;
mod everything_grid;
mod sdk_clients;
mod sdk_oauth;
