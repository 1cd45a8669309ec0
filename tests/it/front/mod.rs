//! Client transports over real sockets (Streamable HTTP, legacy SSE, WebSocket, the 2026-07-28
//! front, gateway routes) and the input they refuse.

mod bad_input;
mod gateway;
mod grid;
mod hostile_members;
mod legacy_sse;
mod modern;
mod streamable_http;
mod tls_listener;
mod virtual_servers;
mod websocket;
