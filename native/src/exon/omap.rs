//! A map that iterates in insertion order, as a Python dict does: a key inserted again after
//! its removal goes to the end; an update keeps its place. O(log n) insert and remove.

use std::collections::BTreeMap;

use super::Map as HashMap;
use std::hash::Hash;

#[derive(Debug, Clone)]
pub struct OMap<K: Eq + Hash + Clone, V> {
    items: HashMap<K, (u64, V)>,
    order: BTreeMap<u64, K>,
    next: u64,
}

impl<K: Eq + Hash + Clone, V> Default for OMap<K, V> {
    fn default() -> Self {
        OMap { items: HashMap::default(), order: BTreeMap::new(), next: 0 }
    }
}

impl<K: Eq + Hash + Clone, V> OMap<K, V> {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn len(&self) -> usize {
        self.items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    pub fn contains_key(&self, k: &K) -> bool {
        self.items.contains_key(k)
    }
    pub fn get(&self, k: &K) -> Option<&V> {
        self.items.get(k).map(|(_, v)| v)
    }
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.items.get_mut(k).map(|(_, v)| v)
    }
    /// Insert or update (an update keeps the key's place).
    pub fn insert(&mut self, k: K, v: V) {
        if let Some(slot) = self.items.get_mut(&k) {
            slot.1 = v;
            return;
        }
        let seq = self.next;
        self.next += 1;
        self.order.insert(seq, k.clone());
        self.items.insert(k, (seq, v));
    }
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let (seq, v) = self.items.remove(k)?;
        self.order.remove(&seq);
        Some(v)
    }
    pub fn clear(&mut self) {
        self.items.clear();
        self.order.clear();
    }
    /// Keys in insertion order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.order.values()
    }
    /// (key, value) in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.order.values().map(move |k| (k, &self.items[k].1))
    }
    /// The first key in insertion order.
    pub fn first_key(&self) -> Option<&K> {
        self.order.values().next()
    }
    /// Keys in insertion order, owned (to mutate the map while walking them).
    pub fn key_list(&self) -> Vec<K> {
        self.order.values().cloned().collect()
    }
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.items.values_mut().map(|(_, v)| v)
    }
}
