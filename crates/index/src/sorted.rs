//! Sorted lists compared: what an apply records when a document's value changes.

use std::cmp::Ordering;

/// Calls `change(item, added)` for each item of one sorted, distinct sequence that the
/// other lacks: `old`'s as removed (`false`), `new`'s as added (`true`), in order.
pub(crate) fn each_difference<T: Ord>(
    old: impl IntoIterator<Item = T>,
    new: impl IntoIterator<Item = T>,
    mut change: impl FnMut(T, bool),
) {
    let (mut old, mut new) = (old.into_iter().peekable(), new.into_iter().peekable());
    loop {
        let ord = match (old.peek(), new.peek()) {
            (Some(a), Some(b)) => a.cmp(b),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => return,
        };
        match ord {
            Ordering::Less => change(old.next().expect("peeked"), false),
            Ordering::Greater => change(new.next().expect("peeked"), true),
            Ordering::Equal => {
                old.next();
                new.next();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The changes are the two sets' differences, each once, in order.
        #[test]
        fn differences_are_the_set_differences(
            old in prop::collection::btree_set(0u8..40, 0..30),
            new in prop::collection::btree_set(0u8..40, 0..30),
        ) {
            let mut removed = Vec::new();
            let mut added = Vec::new();
            each_difference(old.iter(), new.iter(), |x, add| {
                if add { added.push(*x) } else { removed.push(*x) }
            });
            let want_removed: Vec<u8> = old.difference(&new).copied().collect();
            let want_added: Vec<u8> = new.difference(&old).copied().collect();
            prop_assert_eq!(removed, want_removed);
            prop_assert_eq!(added, want_added);
        }
    }
}
