//! An OAuth 2.1 authorization server for tests: oidc-provider (tests/node/auth_server.mjs) on a
//! free loopback port, run by the pinned Node. It issues client-credentials access tokens to the
//! clients `alice`, `bob` and `proxy` (secret `<id>-secret`) for any http(s) resource, as JWTs
//! (RS256, `typ: at+jwt`) or, for a resource URL that contains `opaque`, as opaque tokens that
//! its introspection endpoint knows; it exchanges tokens (RFC 8693), signs arbitrary claims,
//! rotates its key, and goes down (503 on every endpoint) and up again on request, counting
//! every request it receives. Killed when the handle drops; it also exits when this process
//! dies (its stdin closes).

use std::net::SocketAddr;
use std::process::Stdio;

use base64::Engine;
use bytes::Bytes;
use http::Method;
use serde_json::{json, Value};
use tokio::process::{Child, ChildStdin, Command};

use super::{node_dir, spawn_announcing, within, Client, StdoutLines};

pub const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

pub struct AuthServer {
    issuer: String,
    addr: SocketAddr,
    /// The RFC 8414 metadata, read once at start.
    metadata: Value,
    _child: Child,
    /// Held open: the server leaves when it reaches its end.
    _stdin: ChildStdin,
    /// Held open, unread: the server prints nothing after its ready line.
    _stdout: StdoutLines,
}

impl AuthServer {
    /// Starts the server and waits (bounded) until it listens and serves its metadata.
    pub async fn start() -> AuthServer {
        let dir = node_dir();
        assert!(
            dir.join("node_modules/oidc-provider").is_dir(),
            "oidc-provider is not installed: run scripts/test (it runs `npm ci` in tests/node)"
        );
        let mut command = Command::new(dir.join("node_modules/.bin/node"));
        command
            .arg(dir.join("auth_server.mjs"))
            .current_dir(&dir)
            .env_remove("NODE_ENV")
            .stdin(Stdio::piped())
            .stderr(Stdio::inherit());
        let (mut child, ready, stdout) = spawn_announcing("the auth server", &mut command).await;
        let stdin = child.stdin.take().expect("a piped stdin");
        let ready: Value = serde_json::from_str(&ready)
            .unwrap_or_else(|e| panic!("the auth server's ready line is not JSON ({e}): {ready}"));
        let issuer = ready["issuer"]
            .as_str()
            .unwrap_or_else(|| panic!("no issuer in {ready}"))
            .to_owned();
        let addr = issuer
            .strip_prefix("http://")
            .and_then(|authority| authority.parse().ok())
            .unwrap_or_else(|| panic!("an http://127.0.0.1:<port> issuer: {issuer}"));
        let mut server = AuthServer {
            issuer,
            addr,
            metadata: Value::Null,
            _child: child,
            _stdin: stdin,
            _stdout: stdout,
        };
        server.metadata = server
            .get_json("/.well-known/oauth-authorization-server")
            .await;
        assert_eq!(server.metadata["issuer"], server.issuer.as_str());
        server
    }

    /// `http://127.0.0.1:<port>`, the `iss` of its tokens.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn jwks_uri(&self) -> &str {
        self.endpoint("jwks_uri")
    }

    pub fn token_endpoint(&self) -> &str {
        self.endpoint("token_endpoint")
    }

    pub fn introspection_endpoint(&self) -> &str {
        self.endpoint("introspection_endpoint")
    }

    fn endpoint(&self, name: &str) -> &str {
        self.metadata[name]
            .as_str()
            .unwrap_or_else(|| panic!("no {name} in {}", self.metadata))
    }

    /// The path of one of its URLs.
    fn path_of<'a>(&self, url: &'a str) -> &'a str {
        url.strip_prefix(self.issuer.as_str())
            .unwrap_or_else(|| panic!("{url} is not under {}", self.issuer))
    }

    /// GETs `path` (or a full URL of this server) and returns its JSON, expecting 200.
    pub async fn get_json(&self, path_or_url: &str) -> Value {
        let path = path_or_url
            .strip_prefix(self.issuer.as_str())
            .unwrap_or(path_or_url);
        let reply = within(
            path,
            Client::new(self.addr).send_to(path, Method::GET, &[], None),
        )
        .await;
        assert_eq!(reply.status, 200, "GET {path}");
        within(path, reply.json()).await
    }

    /// POSTs a form to `url` with HTTP Basic authentication as `client`: the status and JSON.
    async fn post_form(&self, url: &str, client: &str, form: &[(&str, &str)]) -> (u16, Value) {
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("{client}:{client}-secret"));
        let authorization = format!("Basic {credentials}");
        let path = self.path_of(url);
        let reply = within(
            path,
            Client::new(self.addr).send_to(
                path,
                Method::POST,
                &[
                    ("authorization", authorization.as_str()),
                    ("content-type", "application/x-www-form-urlencoded"),
                    ("accept", "application/json"),
                ],
                Some(Bytes::from(form_encode(form))),
            ),
        )
        .await;
        let status = reply.status.as_u16();
        (status, within(path, reply.json()).await)
    }

    async fn post_json(&self, path: &str, body: &Value) -> Value {
        let reply = within(
            path,
            Client::new(self.addr).send_to(
                path,
                Method::POST,
                &[("content-type", "application/json")],
                Some(Bytes::from(body.to_string())),
            ),
        )
        .await;
        assert_eq!(reply.status, 200, "POST {path}");
        within(path, reply.json()).await
    }

    /// A client-credentials access token of `client` for `resource` with `scope` (space
    /// separated; empty for none): a JWT, or an opaque token if `resource` contains `opaque`.
    pub async fn token(&self, client: &str, resource: &str, scope: &str) -> String {
        self.token_with(client, &[("resource", resource), ("scope", scope)])
            .await
    }

    /// [`AuthServer::token`] valid for `ttl_secs` seconds instead of 300.
    pub async fn token_for(
        &self,
        client: &str,
        resource: &str,
        scope: &str,
        ttl_secs: u64,
    ) -> String {
        let ttl = ttl_secs.to_string();
        self.token_with(
            client,
            &[("resource", resource), ("scope", scope), ("ttl", &ttl)],
        )
        .await
    }

    async fn token_with(&self, client: &str, params: &[(&str, &str)]) -> String {
        let mut form = vec![("grant_type", "client_credentials")];
        form.extend(params.iter().filter(|(_, value)| !value.is_empty()));
        let (status, answer) = self.post_form(self.token_endpoint(), client, &form).await;
        assert_eq!(status, 200, "a token for {client}: {answer}");
        answer["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access_token in {answer}"))
            .to_owned()
    }

    /// RFC 8693: `client` exchanges `subject_token` for an access token for `resource`. The new
    /// token, or the status and error the server answered.
    pub async fn exchange(
        &self,
        client: &str,
        subject_token: &str,
        resource: &str,
    ) -> Result<String, (u16, Value)> {
        let form = [
            ("grant_type", TOKEN_EXCHANGE),
            ("subject_token", subject_token),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("resource", resource),
        ];
        match self.post_form(self.token_endpoint(), client, &form).await {
            (200, answer) => Ok(answer["access_token"]
                .as_str()
                .unwrap_or_else(|| panic!("no access_token in {answer}"))
                .to_owned()),
            failure => Err(failure),
        }
    }

    /// RFC 7662: what the server says of `token` to `client` (only opaque tokens: it answers 400
    /// `unsupported_token_type` for a JWT).
    pub async fn introspect(&self, client: &str, token: &str) -> Value {
        let (status, answer) = self
            .post_form(self.introspection_endpoint(), client, &[("token", token)])
            .await;
        assert_eq!(status, 200, "introspection: {answer}");
        answer
    }

    /// A JWT with exactly `claims` (`iss`, `aud`, `exp` and all are up to the caller), signed
    /// with the server's current key for `alg` (`RS256`, `ES256` or `EdDSA`), `typ: at+jwt`.
    pub async fn sign(&self, claims: Value, alg: &str) -> String {
        self.sign_with_kid(claims, alg, None).await
    }

    /// [`AuthServer::sign`], with the header's `kid` replaced by `kid` when given.
    pub async fn sign_with_kid(&self, claims: Value, alg: &str, kid: Option<&str>) -> String {
        let mut body = json!({ "claims": claims, "alg": alg });
        if let Some(kid) = kid {
            body["kid"] = kid.into();
        }
        let answer = self.post_json("/test/sign", &body).await;
        answer["token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token in {answer}"))
            .to_owned()
    }

    /// A new RS256 signing key: listed first in the JWKS (the old ones stay) and signing every
    /// token from now on. Its kid.
    pub async fn rotate(&self) -> String {
        let answer = self.post_json("/test/rotate", &json!({})).await;
        answer["kid"]
            .as_str()
            .unwrap_or_else(|| panic!("no kid in {answer}"))
            .to_owned()
    }

    /// How many requests it has received, down or not: `{"discovery": n, "jwks": n,
    /// "introspection": n, "token": n, "exchange": n}` (`token` counts the exchanges too).
    pub async fn requests(&self) -> Value {
        self.get_json("/test/requests").await
    }

    /// One of [`AuthServer::requests`]' counts.
    pub async fn requests_of(&self, kind: &str) -> u64 {
        let requests = self.requests().await;
        requests[kind]
            .as_u64()
            .unwrap_or_else(|| panic!("no count of {kind} in {requests}"))
    }

    /// From now on every endpoint but its test controls answers 503, as an issuer that cannot
    /// serve would (the requests are still counted).
    pub async fn go_down(&self) {
        let answer = self.post_json("/test/down", &json!({})).await;
        assert_eq!(answer["down"], true, "{answer}");
    }

    /// Serves again after [`AuthServer::go_down`].
    pub async fn come_up(&self) {
        let answer = self.post_json("/test/up", &json!({})).await;
        assert_eq!(answer["down"], false, "{answer}");
    }
}

/// The payload of a JWT, decoded without checking anything.
pub fn claims_of(token: &str) -> Value {
    segment(token, 1)
}

/// The protected header of a JWT, decoded without checking anything.
pub fn header_of(token: &str) -> Value {
    segment(token, 0)
}

fn segment(token: &str, index: usize) -> Value {
    let part = token
        .split('.')
        .nth(index)
        .unwrap_or_else(|| panic!("not a JWT: {token}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap_or_else(|e| panic!("not base64url ({e}): {token}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {token}"))
}

/// `application/x-www-form-urlencoded`.
fn form_encode(pairs: &[(&str, &str)]) -> String {
    fn encode(text: &str) -> String {
        text.bytes()
            .map(|byte| match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                    (byte as char).to_string()
                }
                b' ' => "+".to_owned(),
                _ => format!("%{byte:02X}"),
            })
            .collect()
    }
    pairs
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}
