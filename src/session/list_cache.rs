//! Answers list requests from a per-server, per-principal cache when the server's lists do not
//! depend on the session (seed 004: list endpoints must not vary per connection). The matching
//! `*/list_changed` notification empties that list's entries; a response fetched before a
//! change never fills the cache after it. Entries are keyed by their params without `_meta`
//! (per-request metadata, such as a trace context, never changes a list) and bounded in count
//! and bytes: the least recently used go first.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use serde_json::value::RawValue;

use crate::base::ids::Principal;
use crate::wire::methods;

/// Entries kept at most.
pub const DEFAULT_ENTRIES: usize = 4096;
/// Bytes of params and results kept at most; one entry may take a quarter of it.
pub const DEFAULT_BYTES: usize = 16 << 20;

/// Who asked for which list, with which params (as `params_key` writes them).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    principal: Principal,
    list: &'static str,
    params: String,
}

/// Where a cacheable request's answer goes: its key and the list's generation when asked.
#[derive(Debug, Clone)]
pub struct Ticket {
    key: Key,
    generation: u64,
}

#[derive(Debug)]
pub struct ListCache {
    state: Mutex<State>,
    max_entries: usize,
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Key, Entry>,
    /// The keys by last use, least recent first: the order of eviction.
    by_use: BTreeMap<u64, Key>,
    next_use: u64,
    /// The bytes of every entry's params and result.
    bytes: usize,
    generations: HashMap<&'static str, u64>,
}

#[derive(Debug)]
struct Entry {
    result: Box<RawValue>,
    used: u64,
}

/// What a lookup found.
pub enum Lookup {
    Hit(Box<RawValue>),
    Miss(Ticket),
    /// Not a cached method.
    Uncached,
}

impl Default for ListCache {
    fn default() -> ListCache {
        ListCache::new(DEFAULT_ENTRIES, DEFAULT_BYTES)
    }
}

impl ListCache {
    /// A cache of at most `max_entries` entries and `max_bytes` bytes of params and results.
    pub fn new(max_entries: usize, max_bytes: usize) -> ListCache {
        ListCache {
            state: Mutex::default(),
            max_entries: max_entries.max(1),
            max_bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks up `method` with these params (a cursor, or any other member but `_meta`, pages
    /// separately) for `principal`.
    pub fn lookup(&self, principal: &Principal, method: &str, params: Option<&RawValue>) -> Lookup {
        let Some((list, _)) = methods::cached_lists().find(|(list, _)| *list == method) else {
            return Lookup::Uncached;
        };
        let key = Key {
            principal: principal.clone(),
            list,
            params: params_key(params),
        };
        let mut state = self.lock();
        match state.touch(&key) {
            Some(result) => Lookup::Hit(result),
            None => Lookup::Miss(Ticket {
                generation: state.generations.get(list).copied().unwrap_or(0),
                key,
            }),
        }
    }

    /// Keeps a result, unless its list changed since it was asked for or it would take more
    /// than a quarter of the byte budget; the least recently used entries make room for it.
    /// Returns how many were evicted.
    pub fn store(&self, ticket: Ticket, result: &RawValue) -> usize {
        let size = ticket.key.params.len() + result.get().len();
        if size > self.max_bytes / 4 {
            return 0;
        }
        let mut state = self.lock();
        if state.generations.get(ticket.key.list).copied().unwrap_or(0) != ticket.generation {
            return 0;
        }
        state.remove(&ticket.key);
        let mut evicted = 0;
        while state.entries.len() >= self.max_entries || state.bytes + size > self.max_bytes {
            if !state.evict_least_recent() {
                break;
            }
            evicted += 1;
        }
        state.insert(ticket.key, result.to_owned());
        evicted
    }

    /// Forgets the lists a `*/list_changed` notification names; true if it named any.
    pub fn invalidate(&self, notification: &str) -> bool {
        let lists: Vec<&'static str> = methods::lists_changed_by(notification).collect();
        if lists.is_empty() {
            return false;
        }
        let mut state = self.lock();
        for list in &lists {
            *state.generations.entry(list).or_insert(0) += 1;
        }
        let stale: Vec<Key> = state
            .entries
            .keys()
            .filter(|key| lists.contains(&key.list))
            .cloned()
            .collect();
        for key in &stale {
            state.remove(key);
        }
        true
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl State {
    /// The result kept under `key`, now its most recently used.
    fn touch(&mut self, key: &Key) -> Option<Box<RawValue>> {
        let now = self.next_use;
        let entry = self.entries.get_mut(key)?;
        let before = std::mem::replace(&mut entry.used, now);
        let result = entry.result.clone();
        self.next_use += 1;
        if let Some(key) = self.by_use.remove(&before) {
            self.by_use.insert(now, key);
        }
        Some(result)
    }

    fn insert(&mut self, key: Key, result: Box<RawValue>) {
        let used = self.next_use;
        self.next_use += 1;
        self.bytes += key.params.len() + result.get().len();
        self.by_use.insert(used, key.clone());
        self.entries.insert(key, Entry { result, used });
    }

    fn remove(&mut self, key: &Key) {
        if let Some(entry) = self.entries.remove(key) {
            self.by_use.remove(&entry.used);
            self.bytes -= key.params.len() + entry.result.get().len();
        }
    }

    /// Drops the least recently used entry; false when there is none.
    fn evict_least_recent(&mut self) -> bool {
        let Some((_, key)) = self.by_use.pop_first() else {
            return false;
        };
        if let Some(entry) = self.entries.remove(&key) {
            self.bytes -= key.params.len() + entry.result.get().len();
        }
        true
    }
}

/// The params a list is cached under: every member as sent but `_meta`, in name order; none
/// (or only `_meta`) is the empty string. Params that are not an object are kept as sent.
fn params_key(params: Option<&RawValue>) -> String {
    let Some(params) = params else {
        return String::new();
    };
    match serde_json::from_str::<BTreeMap<String, &RawValue>>(params.get()) {
        Ok(mut members) => {
            members.remove("_meta");
            match members.is_empty() {
                true => String::new(),
                false => serde_json::to_string(&members).unwrap_or_default(),
            }
        }
        Err(_) => params.get().to_owned(),
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

    fn miss(lookup: Lookup) -> Ticket {
        match lookup {
            Lookup::Miss(ticket) => ticket,
            _ => panic!("a miss was expected"),
        }
    }

    #[test]
    fn per_request_metadata_does_not_change_the_key_and_other_params_do() {
        let cache = ListCache::default();
        let anyone = Principal::anonymous();
        let traced = raw(
            r#"{"_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}"#,
        );
        let ticket = miss(cache.lookup(&anyone, "tools/list", Some(&traced)));
        cache.store(ticket, &raw(r#"{"tools":[]}"#));
        for same in [
            None,
            Some(raw("{}")),
            Some(raw(r#"{"_meta":{"progressToken":7}}"#)),
        ] {
            assert!(
                hit(cache.lookup(&anyone, "tools/list", same.as_deref())).is_some(),
                "{same:?}"
            );
        }
        let page = raw(r#"{"cursor":"2","_meta":{"traceparent":"x"}}"#);
        let ticket = miss(cache.lookup(&anyone, "tools/list", Some(&page)));
        cache.store(ticket, &raw(r#"{"tools":[],"nextCursor":"3"}"#));
        let same_page = raw(r#"{ "_meta": {}, "cursor": "2" }"#);
        assert_eq!(
            hit(cache.lookup(&anyone, "tools/list", Some(&same_page))).as_deref(),
            Some(r#"{"tools":[],"nextCursor":"3"}"#),
            "the cursor is kept, in any order and spacing of members"
        );
        let other = raw(r#"{"cursor":"2","filter":"a"}"#);
        assert!(hit(cache.lookup(&anyone, "tools/list", Some(&other))).is_none());
        assert_eq!(cache.len(), 2);
    }

    /// Keeps `result` as the answer to page `n` of the tools.
    fn keep(cache: &ListCache, n: u32, result: &str) -> usize {
        let params = raw(&format!(r#"{{"cursor":"{n}"}}"#));
        let ticket = miss(cache.lookup(&Principal::anonymous(), "tools/list", Some(&params)));
        cache.store(ticket, &raw(result))
    }

    fn kept(cache: &ListCache, n: u32) -> bool {
        let params = raw(&format!(r#"{{"cursor":"{n}"}}"#));
        hit(cache.lookup(&Principal::anonymous(), "tools/list", Some(&params))).is_some()
    }

    #[test]
    fn the_least_recently_used_entry_makes_room_for_a_new_one() {
        let cache = ListCache::new(2, 1000);
        assert_eq!(keep(&cache, 1, "{}"), 0);
        assert_eq!(keep(&cache, 2, "{}"), 0);
        assert!(kept(&cache, 1));
        assert_eq!(keep(&cache, 3, "{}"), 1, "two entries at most");
        assert!(!kept(&cache, 2), "the least recently used went");
        assert!(kept(&cache, 1) && kept(&cache, 3));
    }

    #[test]
    fn the_bytes_kept_are_bounded_and_a_result_too_large_is_not_kept() {
        let cache = ListCache::new(100, 1000);
        // 14 bytes of params and 219 of result: four fit in 1000.
        let result = format!(r#"{{"tools":[],"x":"{}"}}"#, "a".repeat(200));
        for n in 1..=4 {
            assert_eq!(keep(&cache, n, &result), 0);
        }
        assert_eq!(keep(&cache, 5, &result), 1);
        assert!(!kept(&cache, 1) && kept(&cache, 5));
        let too_large = format!(r#"{{"x":"{}"}}"#, "a".repeat(300));
        assert_eq!(
            keep(&cache, 6, &too_large),
            0,
            "over a quarter of the budget"
        );
        assert!(!kept(&cache, 6));
        assert_eq!(cache.len(), 4);
    }

    #[test]
    fn invalidated_entries_give_their_bytes_back() {
        // Three results of 98 bytes, then two of 112 with their cursor: 518 bytes in all.
        let cache = ListCache::new(10, 450);
        let anyone = Principal::anonymous();
        let result = raw(&format!(r#"{{"x":"{}"}}"#, "a".repeat(90)));
        for list in ["tools/list", "prompts/list", "resources/list"] {
            let ticket = miss(cache.lookup(&anyone, list, None));
            assert_eq!(cache.store(ticket, &result), 0);
        }
        cache.invalidate("notifications/tools/list_changed");
        cache.invalidate("notifications/prompts/list_changed");
        for n in 0..2 {
            let params = raw(&format!(r#"{{"cursor":"{n}"}}"#));
            let ticket = miss(cache.lookup(&anyone, "tools/list", Some(&params)));
            assert_eq!(
                cache.store(ticket, &result),
                0,
                "room was made by the changes"
            );
        }
        assert_eq!(cache.len(), 3);
    }
}
