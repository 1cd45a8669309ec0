//! Answers list requests from a per-server, per-principal cache when the server's lists do not
//! depend on the session (seed 004: list endpoints must not vary per connection). The matching
//! `*/list_changed` notification empties that list's entries; a response fetched before a
//! change never fills the cache after it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use serde_json::value::RawValue;

use crate::ids::Principal;

/// The cached methods, and the notification that invalidates each.
const LISTS: [(&str, &str); 4] = [
    ("tools/list", "notifications/tools/list_changed"),
    ("prompts/list", "notifications/prompts/list_changed"),
    ("resources/list", "notifications/resources/list_changed"),
    (
        "resources/templates/list",
        "notifications/resources/list_changed",
    ),
];

/// Where a cacheable request's answer goes: its key and the list's generation when asked.
#[derive(Debug, Clone)]
pub struct Ticket {
    key: (Principal, &'static str, String),
    generation: u64,
}

#[derive(Debug, Default)]
pub struct ListCache {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<(Principal, &'static str, String), Box<RawValue>>,
    generations: HashMap<&'static str, u64>,
}

/// What a lookup found.
pub enum Lookup {
    Hit(Box<RawValue>),
    Miss(Ticket),
    /// Not a cached method.
    Uncached,
}

impl ListCache {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks up `method` with these params (raw text: a cursor pages separately) for `principal`.
    pub fn lookup(&self, principal: &Principal, method: &str, params: Option<&RawValue>) -> Lookup {
        let Some((list, _)) = LISTS.iter().find(|(list, _)| *list == method) else {
            return Lookup::Uncached;
        };
        let key = (
            principal.clone(),
            *list,
            params.map(|p| p.get().to_owned()).unwrap_or_default(),
        );
        let state = self.lock();
        match state.entries.get(&key) {
            Some(result) => Lookup::Hit(result.clone()),
            None => Lookup::Miss(Ticket {
                generation: state.generations.get(list).copied().unwrap_or(0),
                key,
            }),
        }
    }

    /// Keeps a result, unless its list changed since it was asked for.
    pub fn store(&self, ticket: Ticket, result: &RawValue) {
        let mut state = self.lock();
        if state.generations.get(ticket.key.1).copied().unwrap_or(0) == ticket.generation {
            state.entries.insert(ticket.key, result.to_owned());
        }
    }

    /// Forgets the lists a `*/list_changed` notification names; true if it named any.
    pub fn invalidate(&self, notification: &str) -> bool {
        let lists: Vec<&'static str> = LISTS
            .iter()
            .filter(|(_, changed)| *changed == notification)
            .map(|(list, _)| *list)
            .collect();
        if lists.is_empty() {
            return false;
        }
        let mut state = self.lock();
        for list in &lists {
            *state.generations.entry(list).or_insert(0) += 1;
        }
        state
            .entries
            .retain(|(_, list, _), _| !lists.contains(list));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    fn hit(lookup: Lookup) -> Option<String> {
        match lookup {
            Lookup::Hit(result) => Some(result.get().to_owned()),
            _ => None,
        }
    }

    #[test]
    fn caches_per_principal_and_cursor_until_the_list_changes() {
        let cache = ListCache::default();
        let alice = Principal::from_credential(b"alice");
        let bob = Principal::from_credential(b"bob");
        let Lookup::Miss(ticket) = cache.lookup(&alice, "tools/list", None) else {
            panic!()
        };
        cache.store(ticket, &raw(r#"{"tools":[]}"#));
        assert_eq!(
            hit(cache.lookup(&alice, "tools/list", None)).as_deref(),
            Some(r#"{"tools":[]}"#)
        );
        assert!(
            hit(cache.lookup(&bob, "tools/list", None)).is_none(),
            "per principal"
        );
        let page = raw(r#"{"cursor":"2"}"#);
        assert!(
            hit(cache.lookup(&alice, "tools/list", Some(&page))).is_none(),
            "per cursor"
        );
        assert!(matches!(
            cache.lookup(&alice, "tools/call", None),
            Lookup::Uncached
        ));

        assert!(cache.invalidate("notifications/prompts/list_changed"));
        assert!(
            hit(cache.lookup(&alice, "tools/list", None)).is_some(),
            "another list changed"
        );
        assert!(cache.invalidate("notifications/tools/list_changed"));
        assert!(hit(cache.lookup(&alice, "tools/list", None)).is_none());
    }

    #[test]
    fn an_answer_from_before_a_change_is_not_kept() {
        let cache = ListCache::default();
        let anyone = Principal::anonymous();
        let Lookup::Miss(stale) = cache.lookup(&anyone, "resources/templates/list", None) else {
            panic!()
        };
        cache.invalidate("notifications/resources/list_changed");
        cache.store(stale, &raw("{}"));
        assert!(hit(cache.lookup(&anyone, "resources/templates/list", None)).is_none());
    }
}
