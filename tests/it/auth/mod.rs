//! The proxy as an OAuth 2.1 resource server, and what servers behind it get to authenticate their
//! requests.

mod authorization;
mod upstream_credentials;
