//! A numeric column's values (`Col::Num`): as `f32`s when every value the chunk holds is
//! one exactly, else as `f64`s. Prices, rents, bedroom and bathroom counts and floor
//! areas are whole numbers or halves far below 2²⁴: at a million items each such column
//! took 8 MB as doubles, 4 as floats. A value reads back bit for bit either way.

/// NaN: no value (or several: the column's `multi` says which).
#[derive(Clone, Debug)]
pub(crate) enum NumValues {
    Narrow(Box<[f32]>),
    Wide(Box<[f64]>),
}

/// Whether `x` is held as an `f32` exactly (NaN, the mark for no value, included).
#[inline]
fn fits(x: f64) -> bool {
    x.is_nan() || f64::from(x as f32).to_bits() == x.to_bits()
}

impl NumValues {
    /// `n` documents without a value.
    pub(crate) fn empty(n: usize) -> NumValues {
        NumValues::Narrow(vec![f32::NAN; n].into())
    }

    #[cfg(test)]
    pub(crate) fn of(v: &[f64]) -> NumValues {
        let mut out = NumValues::Wide(v.into());
        out.settle();
        out
    }

    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> f64 {
        match self {
            NumValues::Narrow(v) => f64::from(v[i]),
            NumValues::Wide(v) => v[i],
        }
    }

    /// Sets document `i`'s value, widening the column if `x` is not an `f32`; `settle`
    /// afterwards narrows it again where every value is one.
    pub(crate) fn set(&mut self, i: usize, x: f64) {
        match self {
            NumValues::Narrow(v) if fits(x) => v[i] = x as f32,
            NumValues::Narrow(v) => {
                let mut wide: Box<[f64]> = v.iter().map(|&y| f64::from(y)).collect();
                wide[i] = x;
                *self = NumValues::Wide(wide);
            }
            NumValues::Wide(v) => v[i] = x,
        }
    }

    /// The narrow form when every value fits it: one form for one content, however the
    /// column was made (patched columns are compared with columns built whole).
    pub(crate) fn settle(&mut self) {
        if let NumValues::Wide(v) = self {
            if v.iter().all(|&x| fits(x)) {
                *self = NumValues::Narrow(v.iter().map(|&x| x as f32).collect());
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            NumValues::Narrow(v) => v.len(),
            NumValues::Wide(v) => v.len(),
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        match self {
            NumValues::Narrow(v) => 4 * v.len(),
            NumValues::Wide(v) => 8 * v.len(),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = f64> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Values read back bit for bit through any sequence of sets, and the settled
        /// column is narrow exactly when every value is an `f32`.
        #[test]
        fn values_read_back_bit_for_bit(
            start in prop::collection::vec(any::<f64>(), 1..40),
            sets in prop::collection::vec((0usize..40, prop_oneof![
                any::<f64>(),
                (-1000i32..1000).prop_map(|x| f64::from(x) / 2.0),
                Just(f64::NAN),
                Just(-0.0),
                Just(f64::from(f32::MAX)),
                Just(f64::from(f32::MIN_POSITIVE) / 2.0),
            ]), 0..40),
        ) {
            let mut want = start.clone();
            let mut v = NumValues::of(&start);
            for (i, x) in sets {
                let i = i % want.len();
                want[i] = x;
                v.set(i, x);
                v.settle();
            }
            prop_assert_eq!(v.len(), want.len());
            for (i, &x) in want.iter().enumerate() {
                if x.is_nan() {
                    prop_assert!(v.get(i).is_nan());
                } else {
                    prop_assert_eq!(v.get(i).to_bits(), x.to_bits(), "document {}", i);
                }
            }
            let narrow = want.iter().all(|&x| x.is_nan() || f64::from(x as f32).to_bits() == x.to_bits());
            prop_assert_eq!(matches!(v, NumValues::Narrow(_)), narrow);
        }
    }

    #[test]
    fn halves_and_whole_numbers_are_narrow_and_a_fraction_widens() {
        let mut v = NumValues::of(&[1.0, 2.5, 330000.0, f64::NAN, -0.0]);
        assert!(matches!(v, NumValues::Narrow(_)));
        assert_eq!(v.bytes(), 20);
        v.set(1, 0.17);
        assert!(matches!(v, NumValues::Wide(_)));
        assert_eq!(v.get(1), 0.17);
        assert_eq!(v.get(2), 330000.0);
        assert_eq!(v.get(4).to_bits(), (-0.0f64).to_bits());
        v.set(1, 3.0);
        v.settle();
        assert!(matches!(v, NumValues::Narrow(_)));
        // past 2^24, an odd whole number is not an f32
        v.set(0, 16_777_217.0);
        v.settle();
        assert!(matches!(v, NumValues::Wide(_)));
        assert_eq!(v.get(0), 16_777_217.0);
    }
}
