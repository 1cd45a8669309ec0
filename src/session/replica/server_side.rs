//! What the shared store holds of the server's side of a session: the session a Streamable
//! HTTP server keeps for it (written when the server initializes it, cleared when the server
//! forgets it) and the lists the server said it may change, so that a replica taking the
//! session over goes on in the server's session, where the server's state is.

use crate::wire::methods;

/// The lists a server said it may change, as the record holds them.
pub(in crate::session) fn lists_to_record(lists: &[&'static str]) -> String {
    serde_json::to_string(lists).unwrap_or_default()
}

/// The lists a record says its server may change (those this proxy knows of).
pub(in crate::session) fn lists_from_record(text: Option<&str>) -> Vec<&'static str> {
    let named: Vec<String> = text
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
    methods::announced_lists()
        .map(|(_, method)| method)
        .filter(|method| named.iter().any(|name| name == method))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_a_server_may_change_survive_the_record() {
        let lists: Vec<&'static str> = methods::announced_lists().map(|(_, m)| m).collect();
        assert!(!lists.is_empty());
        assert_eq!(
            lists_from_record(Some(&lists_to_record(&lists))),
            lists,
            "every list"
        );
        assert!(lists_from_record(Some("[\"notifications/unknown\"]")).is_empty());
        assert!(lists_from_record(None).is_empty());
    }
}
