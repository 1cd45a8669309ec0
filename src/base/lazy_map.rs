//! A hash map that costs one pointer and no allocation while it is empty, and gives its memory
//! back when it becomes empty again: for the maps of a session that are empty most of its
//! life (requests in flight, attached readers, progress tokens), of which a proxy holds one
//! per idle session.

use std::borrow::Borrow;
use std::collections::hash_map::{Entry, HashMap};
use std::hash::Hash;

/// The box is the point: an empty `HashMap` is 48 bytes inline, this is 8.
#[derive(Debug)]
#[allow(clippy::box_collection)]
pub struct LazyMap<K, V>(Option<Box<HashMap<K, V>>>);

impl<K, V> Default for LazyMap<K, V> {
    fn default() -> Self {
        LazyMap(None)
    }
}

impl<K: Eq + Hash, V> LazyMap<K, V> {
    pub fn new() -> Self {
        LazyMap(None)
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |map| map.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.as_ref()?.get(key)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.as_mut()?.get_mut(key)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.map().insert(key, value)
    }

    pub fn entry(&mut self, key: K) -> Entry<'_, K, V> {
        self.map().entry(key)
    }

    /// Removes `key`; the map's memory goes with its last entry.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let map = self.0.as_mut()?;
        let removed = map.remove(key);
        if map.is_empty() {
            self.0 = None;
        }
        removed
    }

    pub fn retain(&mut self, keep: impl FnMut(&K, &mut V) -> bool) {
        if let Some(map) = &mut self.0 {
            map.retain(keep);
            if map.is_empty() {
                self.0 = None;
            }
        }
    }

    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// Takes every entry out; the map is left empty, without memory.
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> {
        self.0.take().into_iter().flat_map(|map| map.into_iter())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0.iter().flat_map(|map| map.iter())
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.iter().map(|(key, _)| key)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, value)| value)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().flat_map(|map| map.values_mut())
    }

    pub fn shrink_to_fit(&mut self) {
        match &mut self.0 {
            Some(map) if map.is_empty() => self.0 = None,
            Some(map) => map.shrink_to_fit(),
            None => {}
        }
    }

    fn map(&mut self) -> &mut HashMap<K, V> {
        self.0.get_or_insert_with(Box::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_comes_with_the_first_entry_and_goes_with_the_last() {
        let mut map = LazyMap::new();
        assert!(map.0.is_none() && map.is_empty());
        map.insert(1u64, "one");
        map.insert(2, "two");
        assert_eq!((map.len(), map.get(&1)), (2, Some(&"one")));
        assert_eq!(map.remove(&1), Some("one"));
        assert!(map.0.is_some(), "one entry left");
        assert_eq!(map.remove(&2), Some("two"));
        assert!(map.0.is_none(), "the last entry took the memory with it");
        assert_eq!(map.remove(&2), None);

        *map.entry(3).or_insert("three") = "three!";
        map.retain(|key, _| *key != 3);
        assert!(map.0.is_none());

        map.insert(4, "four");
        assert_eq!(map.drain().collect::<Vec<_>>(), [(4, "four")]);
        assert!(map.0.is_none());
    }
}
