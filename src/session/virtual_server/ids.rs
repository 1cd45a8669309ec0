//! The ids requests go under between a virtual server and its members: the virtual server's
//! own requests (`virtual-server/<n>`), and a member's requests as the session's client sees
//! them, tagged with the member (`<index>~<id>`), so that the client's answer finds its way back.

use serde_json::Value;

use crate::wire::jsonrpc::id_key;

/// Before the ids of the virtual server's own requests to its members (not the bridge's own
/// prefix, `mcp-session-proxy/`: a 2026-07-28 member's bridge passes these on).
pub const OWN: &str = "virtual-server/";
/// Between a member's index and its request's id, as the session's client sees that id.
const TAG: char = '~';

/// Member `index`'s request id, as the session's client sees it.
pub fn tag(index: usize, id: &Value) -> Value {
    Value::from(format!("{index}{TAG}{}", id_key(id)))
}

/// The member and its own id of an id [`tag`] made.
pub fn untag(id: &Value) -> Option<(usize, Value)> {
    let (index, id) = id.as_str()?.split_once(TAG)?;
    Some((index.parse().ok()?, serde_json::from_str(id).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_members_request_id_is_tagged_and_untagged_whatever_its_type() {
        for id in [json!(7), json!("abc"), json!("a~b"), json!(-1.5)] {
            let tagged = tag(3, &id);
            assert!(tagged.is_string());
            assert_eq!(untag(&tagged), Some((3, id)));
        }
        assert_eq!(untag(&json!(7)), None);
        assert_eq!(untag(&json!("no tag")), None);
    }
}
