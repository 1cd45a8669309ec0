//! What any replica reads of a session: its record, subscriptions, logged messages and
//! requests in flight.

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use redis::Value;

use super::RedisStore;
use crate::base::event::{EventId, Logged};
use crate::store::{Record, StoreResult};

impl RedisStore {
    /// The record of session `id`, if any replica holds it; without its subscriptions
    /// (`subscriptions` reads those).
    pub async fn record(&self, server: &str, id: &str) -> StoreResult<Option<Record>> {
        let mut connection = self.timed();
        let fields: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.session_key(server, id))
            .query_async(&mut connection)
            .await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let number = |name: &str| fields.get(name).and_then(|v| v.parse().ok()).unwrap_or(0);
        Ok(Some(Record {
            owner: fields.get("owner").cloned().unwrap_or_default(),
            handed_by: fields.get("handed_by").cloned(),
            principal: fields.get("principal").cloned().unwrap_or_default(),
            shape: fields.get("shape").cloned().unwrap_or_default(),
            numbered: fields.get("numbered").is_some_and(|v| v == "1"),
            version: fields.get("version").cloned(),
            init: fields.get("init").cloned(),
            subs: None,
            next_stream: number("next_stream"),
            evicted: number("evicted"),
            upstream_ids: number("upstream_ids"),
            upstream: fields.get("upstream").cloned(),
            layer: fields.get("layer").cloned(),
            upstream_session: fields
                .get("upstream_session")
                .filter(|v| !v.is_empty())
                .cloned(),
            lists: fields.get("lists").cloned(),
            epoch: number("epoch"),
            confirmed: number("confirmed"),
        }))
    }

    /// The resources session `id` is subscribed to (a record written by an earlier version of
    /// the proxy holds them in its `subs` field, read too).
    pub async fn subscriptions(&self, server: &str, id: &str) -> StoreResult<BTreeSet<String>> {
        let mut connection = self.timed();
        let (mut uris, earlier): (BTreeSet<String>, Option<String>) = redis::pipe()
            .cmd("SMEMBERS")
            .arg(self.subs_key(server, id))
            .cmd("HGET")
            .arg(self.session_key(server, id))
            .arg("subs")
            .query_async(&mut connection)
            .await?;
        if let Some(earlier) = earlier {
            uris.extend(serde_json::from_str::<Vec<String>>(&earlier).unwrap_or_default());
        }
        Ok(uris)
    }

    /// The logged messages of session `id` after `after`, oldest first.
    pub async fn read_log(&self, server: &str, id: &str, after: u64) -> StoreResult<Vec<Logged>> {
        let mut connection = self.timed();
        let reply: Value = redis::cmd("XRANGE")
            .arg(self.log_key(server, id))
            .arg(format!("{}-0", after + 1))
            .arg("+")
            .query_async(&mut connection)
            .await?;
        Ok(parse_entries(&reply))
    }

    /// Requests in flight at the owner: request stream → the client's request id (JSON).
    pub async fn inflight(&self, server: &str, id: &str) -> StoreResult<HashMap<u64, String>> {
        let mut connection = self.timed();
        let fields: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.inflight_key(server, id))
            .query_async(&mut connection)
            .await?;
        Ok(fields
            .into_iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, v)))
            .collect())
    }
}

/// XRANGE / XREAD entries: `[[id, [field, value, …]], …]`.
pub(super) fn parse_entries(reply: &Value) -> Vec<Logged> {
    let Value::Array(entries) = reply else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            let Value::Array(parts) = entry else {
                return None;
            };
            let id = text(parts.first()?)?;
            let seq = id.split('-').next()?.parse().ok()?;
            let Value::Array(fields) = parts.get(1)? else {
                return None;
            };
            let mut stream = None;
            let mut terminal = false;
            let mut coalesce = None;
            let mut payload = Bytes::new();
            for pair in fields.chunks(2) {
                let [name, value] = pair else { continue };
                match text(name)?.as_str() {
                    "k" => {
                        stream = format!("{}.0", text(value)?)
                            .parse::<EventId>()
                            .ok()
                            .map(|id| id.stream)
                    }
                    "t" => terminal = text(value)? == "1",
                    "c" => coalesce = text(value),
                    "p" => {
                        if let Value::BulkString(bytes) = value {
                            payload = Bytes::copy_from_slice(bytes);
                        }
                    }
                    _ => {}
                }
            }
            Some(Logged {
                seq,
                stream: stream?,
                terminal,
                coalesce,
                payload,
            })
        })
        .collect()
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}
