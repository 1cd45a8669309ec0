//! Sessions a client names in its messages rather than its transport: data-layer sessions (seed
//! `002`) and state handles (SEP-2567). Each is a session like any other, with an idle TTL and a
//! lifetime of its own (its `Layer`, here); a data-layer session's results tell the client its
//! metadata (`_meta["io.modelcontextprotocol/session"]`: `sessionId`, `state`, `expiresAt`).
//! `table` opens, finds (bound to their principal by a signed `state`), counts and closes them;
//! `handles` is how a call names a handle. The front keeps the wire: how a request carries a
//! cookie, and each era's answers (`front::data_layer`, `front::modern::named`).

pub mod handles;
pub mod table;

pub use table::{DataLayerSettings, NamedBy, NamedSession, NamedSessions};

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::wire::jsonrpc::Message;

pub use crate::wire::era::SESSION_META_KEY as META_KEY;

pub use crate::wire::methods::{
    MESSAGES_LISTEN as LISTEN, SESSIONS_CREATE as CREATE, SESSIONS_DELETE as DELETE,
};

/// Adds the data-layer capability to an `initialize` or `server/discover` result's
/// capabilities: `sessions` (seed `002`), and under `experimental.sessions` for clients that
/// look there.
pub fn advertise(capabilities: &mut Map<String, Value>) {
    capabilities.insert("sessions".into(), Value::Object(Map::new()));
    let experimental = capabilities
        .entry("experimental")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(experimental) = experimental {
        let sessions = experimental
            .entry("sessions")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(sessions) = sessions {
            sessions.insert(
                "dataLayer".into(),
                serde_json::json!({ "methods": [CREATE, DELETE, LISTEN], "meta": META_KEY }),
            );
        }
    }
}

/// What names the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayerKind {
    /// A data-layer session: `sessions/create`, then a cookie in `_meta`.
    Session,
    /// A state handle: opened by a tool, passed as a tool argument.
    Handle,
}

/// A session named in messages: its kind, the `state` its client echoes, and how long it lives.
#[derive(Debug, Clone)]
pub struct Layer {
    pub kind: LayerKind,
    /// The opaque token the client echoes (the proxy's own; see the front's `data_layer`).
    pub state: String,
    /// It ends after this long without use.
    pub idle_ttl: Duration,
    /// It ends at this moment however much it is used.
    pub deadline: Instant,
}

/// A layer as the shared store holds it: the deadline in Unix milliseconds, so another replica
/// keeps it.
#[derive(Serialize, Deserialize)]
struct Recorded {
    kind: LayerKind,
    state: String,
    idle_ttl_ms: u64,
    deadline_ms: u64,
}

impl Layer {
    /// The record field that carries it.
    pub(crate) fn to_record(&self) -> String {
        let left = self.deadline.saturating_duration_since(Instant::now());
        let recorded = Recorded {
            kind: self.kind,
            state: self.state.clone(),
            idle_ttl_ms: self.idle_ttl.as_millis() as u64,
            deadline_ms: unix_ms(SystemTime::now() + left),
        };
        serde_json::to_string(&recorded).unwrap_or_default()
    }

    /// The layer a record field describes.
    pub(crate) fn from_record(field: &str) -> Option<Layer> {
        let recorded: Recorded = serde_json::from_str(field).ok()?;
        let left = recorded
            .deadline_ms
            .saturating_sub(unix_ms(SystemTime::now()));
        Some(Layer {
            kind: recorded.kind,
            state: recorded.state,
            idle_ttl: Duration::from_millis(recorded.idle_ttl_ms),
            deadline: crate::base::clock::from_now(Duration::from_millis(left)),
        })
    }

    /// When it will expire if nothing uses it after `now`, as an ISO 8601 UTC timestamp.
    pub fn expires_at(&self, now: Instant) -> String {
        let left = self
            .idle_ttl
            .min(self.deadline.saturating_duration_since(now));
        iso8601(unix_ms(SystemTime::now() + left))
    }
}

/// A response with the session's metadata in its result's `_meta` (replacing any the server
/// wrote there). Anything but a result object is left as it is. Only the top level of the result
/// and of its `_meta` is read: the rest is copied as the server wrote it.
pub(crate) fn stamp(message: &mut Message, session_id: &str, layer: &Layer) {
    type Members<'a> = BTreeMap<String, &'a RawValue>;
    let Some(result) = message.result() else {
        return;
    };
    let Ok(mut fields) = serde_json::from_str::<Members>(result.get()) else {
        return;
    };
    let metadata = serde_json::json!({
        "sessionId": session_id,
        "state": layer.state,
        "expiresAt": layer.expires_at(Instant::now()),
    });
    let Ok(metadata) = serde_json::value::to_raw_value(&metadata) else {
        return;
    };
    let mut meta: Members = fields
        .get("_meta")
        .and_then(|meta| serde_json::from_str(meta.get()).ok())
        .unwrap_or_default();
    meta.insert(META_KEY.to_owned(), &metadata);
    let Ok(meta) = serde_json::value::to_raw_value(&meta) else {
        return;
    };
    fields.insert("_meta".to_owned(), &meta);
    if let Ok(raw) = serde_json::value::to_raw_value(&fields) {
        message.set_result(raw);
    }
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// Unix milliseconds as `YYYY-MM-DDThh:mm:ssZ` (seconds precision, UTC).
pub fn iso8601(unix_ms: u64) -> String {
    let seconds = unix_ms / 1000;
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (hour, minute, second) = (rest / 3600, rest % 3600 / 60, rest % 60);
    // Days to a civil date (Howard Hinnant's algorithm), for dates from 1970 on.
    let z = days as i64 + 719_468;
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_iso_8601_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601(1_772_323_200_000), "2026-03-01T00:00:00Z");
        assert_eq!(iso8601(1_798_761_599_999), "2026-12-31T23:59:59Z");
    }

    #[test]
    fn results_get_the_metadata_and_keep_the_rest_as_written() {
        let layer = Layer {
            kind: LayerKind::Session,
            state: "tag".into(),
            idle_ttl: Duration::from_secs(60),
            deadline: Instant::now() + Duration::from_secs(3600),
        };
        let stamped = |result: &str| {
            let text = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{result}}}"#);
            let mut message = Message::parse(bytes::Bytes::from(text)).unwrap();
            stamp(&mut message, "s1", &layer);
            serde_json::from_str::<Value>(message.result().unwrap().get()).unwrap()
        };
        let result = stamped(
            r#"{"content":[{"type":"text","text":"a b"}],"_meta":{"x":1,"io.modelcontextprotocol/session":{"sessionId":"other"}}}"#,
        );
        assert_eq!(result["content"][0]["text"], "a\u{2028}b");
        assert_eq!(result["_meta"]["x"], 1);
        assert_eq!(result["_meta"][META_KEY]["sessionId"], "s1");
        assert_eq!(result["_meta"][META_KEY]["state"], "tag");
        let bare = stamped(r#"{"_meta":7}"#);
        assert_eq!(bare["_meta"][META_KEY]["sessionId"], "s1");
        let text = r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#;
        let mut error = Message::parse(bytes::Bytes::from(text)).unwrap();
        stamp(&mut error, "s1", &layer);
        assert_eq!(error.to_bytes(), bytes::Bytes::from(text));
    }

    #[test]
    fn a_layer_keeps_its_deadline_through_the_store() {
        let layer = Layer {
            kind: LayerKind::Handle,
            state: "s".into(),
            idle_ttl: Duration::from_secs(60),
            deadline: Instant::now() + Duration::from_secs(3600),
        };
        let back = Layer::from_record(&layer.to_record()).unwrap();
        assert_eq!(back.kind, LayerKind::Handle);
        assert_eq!(back.idle_ttl, layer.idle_ttl);
        let drift = back.deadline.max(layer.deadline) - back.deadline.min(layer.deadline);
        assert!(drift < Duration::from_secs(2), "{drift:?}");
    }
}
