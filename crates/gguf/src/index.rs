//! A sorted permutation of entry indices: name lookup in O(log n) and
//! duplicate detection in O(n log n), at 8 bytes per entry.

/// Indices of named entries, sorted by name (ties by index).
#[derive(Clone, Debug, Default)]
pub(crate) struct NameIndex {
    order: Vec<usize>,
}

impl NameIndex {
    /// Builds the index over `n` entries. On duplicate names returns
    /// `Err((first, second))` for the pair whose second occurrence comes
    /// first in entry order.
    pub(crate) fn build<'a>(
        n: usize,
        name: impl Fn(usize) -> &'a str,
    ) -> Result<NameIndex, (usize, usize)> {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_unstable_by(|&a, &b| name(a).cmp(name(b)).then(a.cmp(&b)));
        let dup = order
            .windows(2)
            .filter(|w| name(w[0]) == name(w[1]))
            .map(|w| (w[0], w[1]))
            .min_by_key(|&(_, second)| second);
        match dup {
            Some(pair) => Err(pair),
            None => Ok(NameIndex { order }),
        }
    }

    /// Position in `order` where `key` is or would be.
    fn search<'a>(&self, key: &str, name: &impl Fn(usize) -> &'a str) -> Result<usize, usize> {
        self.order.binary_search_by(|&i| name(i).cmp(key))
    }

    /// The entry named `key`.
    pub(crate) fn find<'a>(&self, key: &str, name: impl Fn(usize) -> &'a str) -> Option<usize> {
        self.search(key, &name).ok().map(|p| self.order[p])
    }

    /// Adds entry `idx` (the newest, largest index) named `key`, which must
    /// not be present yet.
    pub(crate) fn insert<'a>(&mut self, idx: usize, key: &str, name: impl Fn(usize) -> &'a str) {
        let p = match self.search(key, &name) {
            Ok(p) | Err(p) => p,
        };
        self.order.insert(p, idx);
    }

    /// Removes entry `idx`; entries after it move down by one.
    pub(crate) fn remove(&mut self, idx: usize) {
        self.order.retain(|&i| i != idx);
        for i in &mut self.order {
            if *i > idx {
                *i -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_find_insert_remove() {
        let mut names = vec!["b", "a", "c"];
        let mut ix = NameIndex::build(names.len(), |i| names[i]).unwrap();
        assert_eq!(ix.find("a", |i| names[i]), Some(1));
        assert_eq!(ix.find("z", |i| names[i]), None);
        names.push("aa");
        ix.insert(3, "aa", |i| names[i]);
        assert_eq!(ix.find("aa", |i| names[i]), Some(3));
        names.remove(0);
        ix.remove(0);
        assert_eq!(ix.find("b", |i| names[i]), None);
        assert_eq!(ix.find("c", |i| names[i]), Some(1));
        assert_eq!(ix.find("aa", |i| names[i]), Some(2));
    }

    #[test]
    fn duplicates_report_earliest_second() {
        let names = ["x", "y", "x", "y", "y"];
        let err = NameIndex::build(names.len(), |i| names[i]).unwrap_err();
        assert_eq!(err, (0, 2));
        let names = ["y", "x", "y", "x"];
        assert_eq!(
            NameIndex::build(names.len(), |i| names[i]).unwrap_err(),
            (0, 2)
        );
    }
}
