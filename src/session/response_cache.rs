//! Results that say they may be reused — `ttlMs` fresh, `cacheScope` `public` (any principal)
//! or `private` (the same principal) — answered again without the server while fresh, to
//! 2026-07-28 clients of any replica's sessions of this server. A `*/list_changed` drops that
//! list's results and a `resources/updated` the reads of its URI; bounded in entries and bytes.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::time::Instant;

use crate::base::ids::Principal;
use crate::wire::methods;

/// Entries kept at most (expired ones are swept first when it is reached).
pub const DEFAULT_ENTRIES: usize = 4096;
/// A result longer than this is not kept.
const LARGEST_RESULT: usize = 1 << 20;
/// The bytes of results kept at most (expired ones are swept first when it is reached).
const BYTE_BUDGET: usize = 64 << 20;

#[derive(Debug)]
pub struct ResponseCache {
    entries: Mutex<HashMap<Key, Entry>>,
    limit: usize,
    /// Counts invalidations: a result asked for before one is not kept after it.
    generation: AtomicU64,
}

/// A method, its params as sent (without `_meta`), and the principal of a private result.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    method: String,
    params: String,
    private_to: Option<Principal>,
}

#[derive(Debug)]
struct Entry {
    result: Box<RawValue>,
    expires: Instant,
    /// The resource a `resources/read` result is of.
    uri: Option<String>,
}

impl Default for ResponseCache {
    fn default() -> ResponseCache {
        ResponseCache::new(DEFAULT_ENTRIES)
    }
}

impl ResponseCache {
    pub fn new(limit: usize) -> ResponseCache {
        ResponseCache {
            entries: Mutex::default(),
            limit,
            generation: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh result for `method` with `params` (as `Params::cache_key` writes them) that
    /// `principal` may reuse: its own private one, else a public one; `ttlMs` says what is left.
    pub fn lookup(&self, method: &str, params: &str, principal: &Principal) -> Option<Vec<u8>> {
        let now = Instant::now();
        let mut key = Key {
            method: method.to_owned(),
            params: params.to_owned(),
            private_to: private_to(principal),
        };
        let entries = self.lock();
        let found = match key.private_to.is_some() {
            true => entries.get(&key).filter(|e| e.expires > now),
            false => None,
        };
        let entry = match found {
            Some(entry) => entry,
            None => {
                key.private_to = None;
                entries.get(&key).filter(|e| e.expires > now)?
            }
        };
        with_ttl(&entry.result, entry.expires - now)
    }

    /// Where invalidations stand: taken when a request goes to the server, given to `store`.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Keeps `result` (a complete result as the client got it) for as long as its `ttlMs` says
    /// and for whom its `cacheScope` says, unless something was invalidated since `asked` (the
    /// generation when it was asked for); anything else is not kept.
    pub fn store(
        &self,
        method: &str,
        params: &str,
        principal: &Principal,
        result: &RawValue,
        asked: u64,
    ) {
        if result.get().len() > LARGEST_RESULT {
            return;
        }
        let Ok(fields) = serde_json::from_str::<Hints>(result.get()) else {
            return;
        };
        let complete = fields
            .result_type
            .as_deref()
            .is_none_or(|t| t == "complete");
        let Some(ttl) = fields.ttl_ms.filter(|ttl| *ttl > 0 && complete) else {
            return;
        };
        let private_to = match fields.cache_scope.as_deref() {
            Some("public") => None,
            // Anonymous requests are strangers: nothing private is shared between them.
            Some("private") => match private_to(principal) {
                Some(principal) => Some(principal),
                None => return,
            },
            _ => return,
        };
        let now = Instant::now();
        let mut entries = self.lock();
        // Read under the lock `invalidate` takes: no invalidation slips between check and insert.
        if self.generation() != asked {
            return;
        }
        let size = result.get().len();
        let full = |entries: &HashMap<Key, Entry>| {
            let bytes: usize = entries.values().map(|e| e.result.get().len()).sum();
            entries.len() >= self.limit || bytes + size > BYTE_BUDGET
        };
        if full(&entries) {
            entries.retain(|_, entry| entry.expires > now);
            if full(&entries) {
                return;
            }
        }
        let key = Key {
            method: method.to_owned(),
            params: params.to_owned(),
            private_to,
        };
        let uri = (method == methods::RESOURCES_READ)
            .then(|| serde_json::from_str::<UriOf>(params).ok()?.uri)
            .flatten();
        entries.insert(
            key,
            Entry {
                result: result.to_owned(),
                expires: now + Duration::from_millis(ttl),
                uri,
            },
        );
    }

    /// Drops what a server notification makes stale: a list on its `*/list_changed`, the reads
    /// of a resource on its `resources/updated`.
    pub fn invalidate(&self, notification: &str, params: Option<&RawValue>) {
        let lists: Vec<&str> = methods::lists_changed_by(notification).collect();
        if lists.is_empty() && notification != methods::RESOURCES_UPDATED {
            return;
        }
        let uri = match lists.is_empty() {
            true => params
                .and_then(|p| serde_json::from_str::<UriOf>(p.get()).ok())
                .and_then(|p| p.uri),
            false => None,
        };
        let mut entries = self.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        match lists.is_empty() {
            true => entries.retain(|_, entry| uri.is_none() || entry.uri != uri),
            false => entries.retain(|key, _| !lists.contains(&key.method.as_str())),
        }
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn private_to(principal: &Principal) -> Option<Principal> {
    (*principal != Principal::anonymous()).then(|| principal.clone())
}

#[derive(serde::Deserialize)]
struct Hints {
    #[serde(rename = "ttlMs", default)]
    ttl_ms: Option<u64>,
    #[serde(rename = "cacheScope", default)]
    cache_scope: Option<String>,
    #[serde(rename = "resultType", default)]
    result_type: Option<String>,
}

#[derive(serde::Deserialize)]
struct UriOf {
    #[serde(default)]
    uri: Option<String>,
}

/// The result with `ttlMs` set to what is left of its freshness.
fn with_ttl(result: &RawValue, left: Duration) -> Option<Vec<u8>> {
    let mut fields: BTreeMap<&str, &RawValue> = serde_json::from_str(result.get()).ok()?;
    let ttl = RawValue::from_string(left.as_millis().max(1).to_string()).ok()?;
    fields.insert("ttlMs", &ttl);
    serde_json::to_vec(&fields).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    fn ttl_of(found: Option<Vec<u8>>) -> Option<u64> {
        let found: serde_json::Value = serde_json::from_slice(&found?).unwrap();
        found["ttlMs"].as_u64()
    }

    #[tokio::test(start_paused = true)]
    async fn public_results_serve_everyone_and_private_ones_their_principal_until_stale() {
        let cache = ResponseCache::default();
        let alice = Principal::from_credential(b"alice");
        let bob = Principal::from_credential(b"bob");
        let anonymous = Principal::anonymous();
        let public = raw(r#"{"tools":[],"ttlMs":1000,"cacheScope":"public"}"#);
        cache.store("tools/list", "{}", &alice, &public, 0);
        for who in [&alice, &bob, &anonymous] {
            assert_eq!(ttl_of(cache.lookup("tools/list", "{}", who)), Some(1000));
        }
        let private = raw(r#"{"contents":[],"ttlMs":5000,"cacheScope":"private"}"#);
        let read = r#"{"uri":"demo://a"}"#;
        cache.store("resources/read", read, &alice, &private, 0);
        cache.store("resources/read", read, &anonymous, &private, 0);
        assert!(cache.lookup("resources/read", read, &alice).is_some());
        assert!(cache.lookup("resources/read", read, &bob).is_none());
        assert!(cache.lookup("resources/read", read, &anonymous).is_none());

        tokio::time::advance(Duration::from_millis(400)).await;
        assert_eq!(ttl_of(cache.lookup("tools/list", "{}", &bob)), Some(600));
        tokio::time::advance(Duration::from_millis(600)).await;
        assert!(cache.lookup("tools/list", "{}", &bob).is_none(), "stale");
        assert!(cache.lookup("resources/read", read, &alice).is_some());
    }

    #[test]
    fn only_complete_results_with_a_ttl_and_a_scope_are_kept() {
        let cache = ResponseCache::default();
        let alice = Principal::from_credential(b"alice");
        for result in [
            r#"{"tools":[]}"#,
            r#"{"tools":[],"ttlMs":0,"cacheScope":"public"}"#,
            r#"{"tools":[],"ttlMs":100}"#,
            r#"{"tools":[],"ttlMs":100,"cacheScope":"shared"}"#,
            r#"{"resultType":"input_required","ttlMs":100,"cacheScope":"public"}"#,
        ] {
            cache.store("tools/list", "{}", &alice, &raw(result), 0);
        }
        assert!(cache.is_empty());
    }

    #[test]
    fn notifications_drop_what_they_make_stale_and_the_size_is_bounded() {
        let cache = ResponseCache::new(3);
        let alice = Principal::from_credential(b"alice");
        let hinted = raw(r#"{"x":1,"ttlMs":60000,"cacheScope":"public"}"#);
        cache.store("tools/list", "{}", &alice, &hinted, 0);
        cache.store("resources/read", r#"{"uri":"a"}"#, &alice, &hinted, 0);
        cache.store("resources/read", r#"{"uri":"b"}"#, &alice, &hinted, 0);
        cache.store("prompts/list", "{}", &alice, &hinted, 0);
        assert_eq!(cache.len(), 3, "bounded");
        let updated = raw(r#"{"uri":"a"}"#);
        cache.invalidate("notifications/resources/updated", Some(&updated));
        assert!(cache
            .lookup("resources/read", r#"{"uri":"a"}"#, &alice)
            .is_none());
        assert!(cache
            .lookup("resources/read", r#"{"uri":"b"}"#, &alice)
            .is_some());
        cache.invalidate("notifications/tools/list_changed", None);
        assert!(cache.lookup("tools/list", "{}", &alice).is_none());
        // A list asked for before the change is not kept after it.
        cache.store("tools/list", "{}", &alice, &hinted, 0);
        assert!(cache.lookup("tools/list", "{}", &alice).is_none());
        assert_eq!(cache.len(), 1);
    }
}
