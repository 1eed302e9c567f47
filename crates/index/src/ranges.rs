//! Which of a numeric dimension's facet ranges hold a value, found by one binary search
//! over the ranges' bounds instead of testing every range: the bounds cut the line into
//! segments (each bound alone, and the open stretches between them) on which every
//! range's membership is constant, decided once per segment by `Interval::contains` on
//! a value of it.

use discern_dimensions::Interval;

pub(crate) struct RangeTable {
    /// Every finite bound of any range, ascending, distinct.
    bounds: Vec<f64>,
    /// Per segment (the stretch below `bounds[0]`, `bounds[0]`, the stretch between
    /// `bounds[0]` and `bounds[1]`, …, the stretch above the last), the ranges holding it.
    members: Vec<Vec<usize>>,
}

impl RangeTable {
    /// The table of a numeric dimension's facet ranges (its `<element>`s).
    pub(crate) fn of(spec: &discern_dimensions::NumericSpec) -> RangeTable {
        RangeTable::new(spec.ranges.iter().map(|r| &r.interval))
    }

    pub(crate) fn new<'a>(ranges: impl Iterator<Item = &'a Interval> + Clone) -> RangeTable {
        let mut bounds: Vec<f64> = ranges
            .clone()
            .flat_map(|r| [r.lo, r.hi])
            .flatten()
            .filter(|b| b.is_finite())
            .collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        // a value of each segment (`None`: the stretch holds no double)
        let mut samples: Vec<Option<f64>> = Vec::with_capacity(2 * bounds.len() + 1);
        for (k, &b) in bounds.iter().enumerate() {
            let below = match k {
                0 => Some(b.next_down()),
                _ => Some(bounds[k - 1].next_up()).filter(|x| *x < b),
            };
            samples.push(below);
            samples.push(Some(b));
        }
        samples.push(Some(bounds.last().map_or(0.0, |b| b.next_up())));
        let members = samples
            .iter()
            .map(|x| match x {
                Some(x) => ranges
                    .clone()
                    .enumerate()
                    .filter(|(_, r)| r.contains(*x))
                    .map(|(i, _)| i)
                    .collect(),
                None => Vec::new(),
            })
            .collect();
        RangeTable { bounds, members }
    }

    pub(crate) fn segments(&self) -> usize {
        self.members.len()
    }

    /// The segment of `x`, `None` for NaN (in no range).
    #[inline]
    pub(crate) fn segment(&self, x: f64) -> Option<usize> {
        if x.is_nan() {
            return None;
        }
        let p = self.bounds.partition_point(|b| *b < x);
        Some(if self.bounds.get(p) == Some(&x) {
            2 * p + 1
        } else {
            2 * p
        })
    }

    /// The ranges holding every value of segment `s`.
    pub(crate) fn ranges_of(&self, s: usize) -> &[usize] {
        &self.members[s]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn interval() -> impl Strategy<Value = Interval> {
        let bound = prop_oneof![
            Just(None),
            (-5i32..5).prop_map(|x| Some(x as f64)),
            (-5i32..5).prop_map(|x| Some((x as f64).next_up())),
        ];
        (bound.clone(), any::<bool>(), bound, any::<bool>()).prop_map(
            |(lo, lo_incl, hi, hi_incl)| Interval {
                lo,
                lo_incl,
                hi,
                hi_incl,
            },
        )
    }

    proptest! {
        /// The table's ranges for a value are exactly those that contain it: at the
        /// bounds, next to them (adjacent doubles), between and beyond them.
        #[test]
        fn ranges_of_a_value_are_those_containing_it(
            ranges in prop::collection::vec(interval(), 0..8),
            xs in prop::collection::vec((-7i32..7, 0usize..4), 1..20),
        ) {
            let table = RangeTable::new(ranges.iter());
            for (x, nudge) in xs {
                let x = x as f64;
                let x = [x, x.next_up(), x.next_down(), x + 0.5][nudge];
                let want: Vec<usize> = (0..ranges.len()).filter(|&i| ranges[i].contains(x)).collect();
                let got = table.segment(x).map(|s| table.ranges_of(s).to_vec()).unwrap_or_default();
                prop_assert_eq!(got, want, "x = {}", x);
            }
            prop_assert!(table.segment(f64::NAN).is_none());
        }
    }
}
