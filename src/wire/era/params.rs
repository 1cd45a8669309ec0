//! A 2026-07-28 request's params, read once: the members as sent (nothing below them parsed)
//! and `_meta` parsed. The checks, the call and the request as a legacy server takes it are
//! all cut from this one reading.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{DRAFT_SESSION_META_KEY, PER_REQUEST_META};
use crate::wire::jsonrpc::Message;

/// The params of one modern request.
pub struct Params<'a> {
    /// The members as sent (none when params is absent or not an object).
    members: BTreeMap<String, &'a RawValue>,
    /// `_meta`, when it is an object.
    pub meta: Option<Map<String, Value>>,
}

impl<'a> Params<'a> {
    pub fn read(message: &'a Message) -> Params<'a> {
        let members: BTreeMap<String, &RawValue> = message
            .params()
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or_default();
        let meta = members
            .get("_meta")
            .and_then(|raw| serde_json::from_str(raw.get()).ok());
        Params { members, meta }
    }

    /// Member `name` when it is a string.
    pub fn str(&self, name: &str) -> Option<String> {
        self.members
            .get(name)
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
    }

    /// Member `name`, read.
    pub fn value(&self, name: &str) -> Option<Value> {
        self.members
            .get(name)
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
    }

    /// The params as a cached result is keyed by: every member as sent but `_meta`.
    pub fn cache_key(&self) -> String {
        let members: BTreeMap<&str, &RawValue> = self
            .members
            .iter()
            .filter(|(name, _)| *name != "_meta")
            .map(|(name, raw)| (name.as_str(), *raw))
            .collect();
        serde_json::to_string(&members).unwrap_or_default()
    }

    pub fn has(&self, name: &str) -> bool {
        self.members.contains_key(name)
    }

    /// What the call names: the tool or prompt, or the resource.
    pub fn name(&self) -> String {
        self.str("name")
            .or_else(|| self.str("uri"))
            .unwrap_or_default()
    }

    /// The request as the legacy server takes it: the per-request fields of `_meta` and the
    /// answers to the front's own questions (`inputResponses`, `requestState`) left out, every
    /// other member copied as sent.
    pub fn legacy_request(&self, request: &Message) -> Result<Message, serde_json::Error> {
        let kept_meta = match &self.meta {
            None => None,
            Some(meta) => {
                let kept: Map<String, Value> = meta
                    .iter()
                    .filter(|(key, _)| {
                        !key.starts_with(PER_REQUEST_META) && key.as_str() != DRAFT_SESSION_META_KEY
                    })
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect();
                match kept.is_empty() {
                    true => None,
                    false => Some(serde_json::value::to_raw_value(&kept)?),
                }
            }
        };
        let mut members = self.members.clone();
        let answers = members.remove("inputResponses").is_some();
        let state = members.remove("requestState").is_some();
        match &kept_meta {
            Some(kept) => drop(members.insert("_meta".to_owned(), kept)),
            None if self.meta.is_some() => drop(members.remove("_meta")),
            None if !answers && !state => return Ok(request.clone()),
            None => {}
        }
        let mut forwarded = request.clone();
        forwarded.set_params(serde_json::value::to_raw_value(&members)?);
        Ok(forwarded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use serde_json::json;

    fn message(body: Value) -> Message {
        Message::parse(Bytes::from(body.to_string())).unwrap()
    }

    #[test]
    fn the_legacy_request_keeps_everything_but_the_per_request_meta() {
        let request = message(json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": { "name": "echo", "arguments": { "text": "a\u{2028}b", "n": [1, 2.5] },
                "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                           "io.modelcontextprotocol/clientCapabilities": {},
                           "progressToken": 7 } } }));
        let params = Params::read(&request);
        assert_eq!(params.name(), "echo");
        let forwarded = params.legacy_request(&request).unwrap();
        let sent: Value = serde_json::from_slice(&forwarded.to_bytes()).unwrap();
        assert_eq!(
            sent,
            json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/call",
                "params": { "name": "echo", "arguments": { "text": "a\u{2028}b", "n": [1, 2.5] },
                    "_meta": { "progressToken": 7 } } })
        );
        let bare = message(json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/list",
            "params": { "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28" } } }));
        let sent: Value = serde_json::from_slice(
            &Params::read(&bare)
                .legacy_request(&bare)
                .unwrap()
                .to_bytes(),
        )
        .unwrap();
        assert_eq!(sent["params"], json!({}));
    }

    #[test]
    fn params_that_are_not_an_object_read_as_empty() {
        let odd = message(json!({ "jsonrpc": "2.0", "id": 1, "method": "x", "params": [1] }));
        let params = Params::read(&odd);
        assert!(params.meta.is_none() && !params.has("name"));
    }
}
