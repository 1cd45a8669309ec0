//! Requests of the 2026-07-28 revision as its clients send them: no session, `_meta` in the
//! body, and headers that mirror it.

use http::Method;
use serde_json::{json, Value};

use super::{Client, Reply};

/// The revision these requests speak.
pub const MODERN: &str = "2026-07-28";

/// The `_meta` of a 2026-07-28 request from a client declaring `capabilities`.
pub fn modern_meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": { "name": "modern-test", "version": "1" },
    })
}

/// A 2026-07-28 request: `method` with `params`, into whose `_meta` (kept where the test put
/// one) go the revision and `capabilities`.
pub fn modern_request(
    id: impl Into<Value>,
    method: &str,
    mut params: Value,
    capabilities: Value,
) -> Value {
    for (key, value) in modern_meta(capabilities).as_object().into_iter().flatten() {
        params["_meta"][key] = value.clone();
    }
    json!({ "jsonrpc": "2.0", "id": id.into(), "method": method, "params": params })
}

impl Client {
    /// POSTs a 2026-07-28 request with the headers that mirror its body (`Mcp-Method`, and
    /// `Mcp-Name` from its `name` or `uri`), then the client's credentials and extra headers,
    /// then `extra`; a mirrored header named in `extra` is sent as `extra` gives it.
    pub async fn post_modern(&self, body: &Value, extra: &[(&str, &str)]) -> Reply {
        let method = body["method"].as_str().unwrap_or_default();
        let params = &body["params"];
        let name = params["name"].as_str().or(params["uri"].as_str());
        let mirrored = [
            ("mcp-protocol-version", Some(MODERN)),
            ("mcp-method", Some(method)),
            ("mcp-name", name),
        ];
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        for (header, value) in mirrored {
            if let Some(value) = value.filter(|_| !extra.iter().any(|(n, _)| *n == header)) {
                headers.push((header, value));
            }
        }
        if let Some(authorization) = &self.authorization {
            headers.push(("authorization", authorization.as_str()));
        }
        for (header, value) in &self.extra_headers {
            headers.push((header.as_str(), value.as_str()));
        }
        headers.extend_from_slice(extra);
        self.send(Method::POST, &headers, Some(body.to_string().into()))
            .await
    }
}
