//! mcp-session-proxy: a session-aware reverse proxy for MCP servers.
//!
//! Requests flow front → session → upstream; server messages flow back through the session's
//! event log. No module imports against that flow, and no two files or folders import each
//! other (`scripts/layers.py`, run in CI).
//!
//! - [`front`]: client transports. Each serves its wire and hands the session what a client
//!   sends through the registry's door (`find`, then `call` for a request, `send` for a
//!   notification or a response).
//!   - `streamable_http/` serves POST/GET/DELETE on `/mcp` (`post`, `get`, `protocol_session`
//!     for `session/*` and `Mcp-Protocol-Session-Id`), `websocket/` the same path upgraded (the
//!     handshake, the connection's loop, what each message does), `legacy_sse` the 2024-11-05
//!     pair, `internal` the other replicas' hop, `session_methods` `session/start|resume|end`.
//!   - `modern/` is the 2026-07-28 face in front of legacy servers: the checks of a request, the
//!     call and its stream (`call`, `exchange`), what the server asks of the client
//!     (`server_requests`, `retry`), `subscriptions_listen`; `data_layer/` is the wire of the
//!     sessions a client names in its messages (the cookie, the `sessions/*` answers,
//!     `messages/listen`, the handle tools answered). Both ask `session::correlate` and
//!     `session::data_layer` for a session.
//!   - `authorization` makes the proxy an OAuth 2.1 resource server in front of every path
//!     (401/403 with their challenges, the RFC 9728 metadata); `guard` says who a request
//!     acts for.
//!   - Shared by all: `event_stream`, the one SSE writer (prelude, priming, keep-alive from
//!     `http.sse_keep_alive`, close-after, `retry:` at shutdown), fed by `session_stream` and
//!     each listen; `telemetry`, the one wrapper around a request (its metrics, its span from
//!     `traced`, what its `access` line names); `rejection/`, the one place where refused
//!     input or a session's error becomes an HTTP status and a JSON-RPC error; `request`
//!     reads and checks requests and writes the plain responses; `connections` bounds the
//!     connections open (`http.max_connections`); `cors` answers pages on other origins;
//!     `cidr` the networks peers are matched against. `settings` holds the values the
//!     configuration gives the front (the configuration names them there, not in the front's
//!     workings).
//! - [`session`]: what a session is. The handle (`mod.rs`: made of its `Parts`, it locks, delegates
//!   and does the I/O) decides where its messages go (`reach`: its upstream here, or the replica
//!   that owns it); its methods are in three more files, one per direction: `calls` (client
//!   messages in, in flight under upstream ids), `filing` (server messages and upstream failures
//!   into the log), `readers` (streams read, replayed, resumed). `state` is what the one lock
//!   guards, in parts that own their bookkeeping (`inflight`, `reading`, `subscriptions`,
//!   `replica`, the named session's `Layer`); `log` is the bounded, coalescing event log. Beside
//!   them: `handshake` (initialize, initialized and subscriptions, for a client or to bring an
//!   upstream back), `revival` (a session whose server exited going on with a new one), `error`
//!   (why a session did not take a message), `error_answer` (the code of each error a session
//!   answers with itself), `exposure` (which of the server's tools and prompts clients see, and
//!   under which names; which of its resources, by URI), `rate` (requests per second per principal
//!   and per tool, checked at the door), `protocol` (a protocol-level session's numbered events),
//!   `routing` (which stream a server message belongs to), `list_cache` and `response_cache` (lists
//!   and reusable results answered without the server), `settings` (what the configuration gives
//!   sessions). `registry/` creates, finds (per principal) and expires sessions, with what serves
//!   it: `door` (the way in), `per_principal` (each principal's count, with replicas together),
//!   `expiry` (the sweeps), `leaving` (shutting down without losing what was taken), `listens` (the
//!   resource subscriptions 2026-07-28 listens make, counted in the session's one book of them,
//!   `subscriptions`), and `replica/` (finding a session wherever it lives, following views,
//!   takeover, fencing a deposed owner, handing sessions over when leaving, the sessions of
//!   2026-07-28 principals, one-use tokens). `replica/` is what one session holds of the shared
//!   store (where it records itself, the `server_side` of it, the `cluster` the fronts see);
//!   `state/record` the state written there and read back (an owned session's record, a view's
//!   copy, a session adopted after its owner died). `correlate/` holds the server-wide tables of
//!   sessions for requests that name none of the proxy's (which session serves a principal,
//!   sessions prepared ahead for requests without one, calls held for the client's input);
//!   `data_layer/` the sessions a client names in its messages (what one is, `table` of them,
//!   `handles`: how a call names a state handle); `virtual_server/` is a virtual server's members
//!   in one session (`members`: an upstream each; `router`: to which member a request goes, `rules`
//!   whether it may, `catalog` what each serves; `fan_out` and `merge`: what every member is asked,
//!   merged; `attribution`: what each member sends, held to its own requests).
//! - [`upstream`]: server transports only. `factory` builds a session's upstream; `stdio` runs
//!   one child process per session, `shared` one for all, `streamable_http` and `legacy_sse`
//!   make the proxy an HTTP client, `modern/` bridges a legacy session to a 2026-07-28 server
//!   (handshake, listen, calls, its HTTP transport), `deferred` starts any of them at the
//!   session's `initialize`, `owner` is the client of the hop to another replica,
//!   `in_process` a server in this process (how the session layer is tested without
//!   sockets; test builds only), `virtual_server` the upstream a virtual server's session holds
//!   (its members, behind two traits the session layer implements); `error`'s `UpstreamError`
//!   names every way one fails. For stdio: `lines` the bounded framing, `child_env` the
//!   environment a child starts with, `child_user` whom it runs as, `sandbox/` how it is
//!   started (the launcher, its reaper) and confined (Landlock, seccomp, limits, capabilities,
//!   its private directory, its view of the package cache). For HTTP: `http_client` the
//!   client and how a request is sent, `driven` connections polled by the task that sends on
//!   them, `tls_stream` plain or TLS, `body` an answer read whole within bounds, `credential`
//!   what a server gets to authenticate the proxy. `probe` asks a server which revision it
//!   speaks at start, `era_switch` switches it while running, `modern_http_builder` builds the
//!   2026-07-28 upstream a legacy session is handed to.
//! - [`store`]: state beyond the process: `Memory`, or `redis` (records, logs as Redis Streams,
//!   heartbeats; a write-behind `Mirror` per owned session, its writes fenced by the owner epoch
//!   its `Fence` holds (`fence`), a follower per view; the sessions of each principal and the rate
//!   buckets, counted for every replica).
//! - Floors every layer may use, each a folder:
//!   - [`wire`]: the formats on the wire. `methods` the method table (every MCP method the proxy
//!     knows and its properties: era, shape, list cache, caching hints, session need, target,
//!     client capability, metric label), `jsonrpc` the message model, its builders and every
//!     error code (a duplicated member name refused at any depth), `named` what a request
//!     names (tool, prompt, resource, completion reference), read once for every check, `era/`
//!     the names of the 2026-07-28 revision, its params read once and what a request must
//!     carry (checked alike by the proxy's face and the demo server), `mirrored` the headers
//!     that mirror a 2026-07-28 request's body (`Mcp-Name`, `Mcp-Param-*`), `sse` the SSE
//!     codec, `http_body` the response body handed to hyper, `loopback` the loopback names
//!     a listener on loopback answers to.
//!   - [`telemetry`]: what the proxy tells of itself. `metrics` the Prometheus figures per
//!     server, `spans` spans and their OTLP/HTTP export, `logs` the log lines,
//!     `trace_context` W3C trace context from headers into `_meta` and back, `redact` what is
//!     printed of URLs and session ids.
//!   - [`tls`]: TLS in one shape: `pem` certificates and keys read from files, `client` how a
//!     server is verified and what the proxy shows it, `server` the listener's (reloaded when
//!     its files change), `subject` a client certificate's subject as text, `failure` a failed
//!     handshake in words.
//!   - [`base`]: `clock` deadlines that never overflow, `keys` one key per purpose derived
//!     from the cluster secret, `ids` session ids, replica names and principals, `caller` a
//!     request's principal and the credential its server may get (made once where the front
//!     admits it), `event` event ids and logged messages, `backlog` the bounded write-behind
//!     queue's count, which upstream readers wait on, `memory` freed memory given back,
//!     `lazy_map` the maps that cost nothing while empty, `error_chain` an error and its
//!     causes on one line, `swap` a layer's settings as one handle a reload may replace,
//!     `text` the characters a third party's text may not show in a log.
//!   - [`hop`] the replicas' hop on the wire, its signatures and the nonces taken (`nonces`);
//!     [`auth`] bearer tokens verified (JWT signatures by the issuer's keys, introspection, the
//!     issuer's metadata), tokens exchanged, a virtual server's members' credentials in one value
//!     (`members`).
//! - Entry: [`config`] every key declared once (type, default, flag, doc, checks), validation
//!   and the rendered reference, [`server`] start and stop (`stdio_checks`: what is checked of
//!   the stdio servers before the proxy listens), [`demo`] the bundled
//!   server (it names methods from the same table), [`health_probe`] the `health` subcommand
//!   (a running proxy's `/healthz` asked once).

#![forbid(unsafe_code)]

pub mod auth;
pub mod base;
pub mod config;
pub mod demo;
pub mod front;
pub mod health_probe;
pub mod hop;
pub mod server;
pub mod session;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod upstream;
pub mod wire;
