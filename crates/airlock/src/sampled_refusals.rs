//! Refusals that anyone may cause (a stranger's guesses, connections past a limit) are
//! counted, and only the 1st, 2nd, 4th, 8th … of each kind become an audit record, with
//! the count so far: a record is written and synced, so one per refusal would let a flood
//! cost the host a disk write per request, and a few dozen records still show the flood.

use std::collections::HashMap;
use std::hash::Hash;

/// Counts of refusals by kind.
#[derive(Debug)]
pub struct SampledRefusals<K> {
    counts: HashMap<K, u64>,
}

impl<K> Default for SampledRefusals<K> {
    fn default() -> Self {
        SampledRefusals {
            counts: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq> SampledRefusals<K> {
    /// Count one refusal of kind `why`: `Some(count so far)` when it is to be recorded.
    pub fn count(&mut self, why: K) -> Option<u64> {
        let n = self.counts.entry(why).or_default();
        *n = n.saturating_add(1);
        n.is_power_of_two().then_some(*n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_powers_of_two_are_recorded_and_kinds_count_apart() {
        let mut r = SampledRefusals::default();
        let recorded: Vec<u64> = (0..40).filter_map(|_| r.count("a")).collect();
        assert_eq!(recorded, [1, 2, 4, 8, 16, 32]);
        assert_eq!(r.count("b"), Some(1));
        assert_eq!(r.count("a"), None);
    }
}
