//! The ids an adapter handed out lately, so that what a platform delivers twice (a Slack
//! redelivery, a Discord replay after resume) is handed out once. Bounded: the oldest id
//! is forgotten first.

use std::collections::{HashSet, VecDeque};

pub(crate) struct Seen {
    limit: usize,
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl Seen {
    pub(crate) fn new(limit: usize) -> Seen {
        Seen {
            limit: limit.max(1),
            order: VecDeque::new(),
            set: HashSet::new(),
        }
    }

    pub(crate) fn contains_any(&self, keys: &[String]) -> bool {
        keys.iter().any(|k| self.set.contains(k))
    }

    /// Whether `key` is new (and now remembered).
    pub(crate) fn insert(&mut self, key: String) -> bool {
        if !self.set.insert(key.clone()) {
            return false;
        }
        self.order.push_back(key);
        while self.order.len() > self.limit {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_new_once_and_the_oldest_is_forgotten_first() {
        let mut s = Seen::new(2);
        assert!(s.insert("a".into()));
        assert!(!s.insert("a".into()));
        assert!(s.insert("b".into()) && s.insert("c".into()));
        assert!(!s.contains_any(&["a".into()]));
        assert!(s.contains_any(&["x".into(), "c".into()]));
        assert!(s.insert("a".into()));
    }
}
