//! Contiguous offset runs: operations visit records in offset order and log or answer one
//! range per run instead of one entry per record.

/// Collects ascending offsets (each with a key, e.g. a delivery count) into runs of
/// consecutive offsets with the same key.
#[derive(Debug)]
pub(crate) struct Runs<K: PartialEq + Copy> {
    runs: Vec<(i64, i64, K)>,
}

impl<K: PartialEq + Copy> Default for Runs<K> {
    fn default() -> Self {
        Runs { runs: Vec::new() }
    }
}

impl<K: PartialEq + Copy> Runs<K> {
    pub(crate) fn push(&mut self, offset: i64, key: K) {
        if let Some((_, last, k)) = self.runs.last_mut() {
            if *k == key && last.checked_add(1) == Some(offset) {
                *last = offset;
                return;
            }
        }
        self.runs.push((offset, offset, key));
    }

    pub(crate) fn into_vec(self) -> Vec<(i64, i64, K)> {
        self.runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_offsets_with_one_key_make_one_run() {
        let mut runs = Runs::default();
        for (offset, key) in [(1, 'a'), (2, 'a'), (3, 'b'), (5, 'b'), (6, 'b')] {
            runs.push(offset, key);
        }
        assert_eq!(runs.into_vec(), vec![(1, 2, 'a'), (3, 3, 'b'), (5, 6, 'b')]);
    }
}
