//! Column values in as few bytes as they need, read back exactly.
//!
//! * `NumValues` (`Col::Num`): `f32`s when every value the chunk holds is one exactly,
//!   else `f64`s. Prices, rents, bedroom and bathroom counts and floor areas are whole
//!   numbers or halves far below 2²⁴: at a million items each such column took 8 MB as
//!   doubles, 4 as floats.
//! * `ElemIds` (`Col::Elem`): element numbers (or side-list offsets) in one, two or four
//!   bytes, the fewest that hold the chunk's largest. A listing's type, style and
//!   condition are one of a few dozen elements, its region one of a few thousand: four
//!   bytes a document each, and a tree's deepest element beside them.

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

/// Per document, a `u32` (an element's number, an offset in the column's side list,
/// or a mark: `NO_ELEMENT`, `NOT_A_PATH`, the largest two) in the fewest bytes that hold
/// every one the chunk has; the marks are the narrow type's largest two.
#[derive(Clone, Debug)]
pub(crate) enum ElemIds {
    Narrow(Box<[u8]>),
    Mid(Box<[u16]>),
    Wide(Box<[u32]>),
}

/// The marks: the largest two numbers of each width stand for `u32::MAX` and one less.
const MARKS: u32 = 2;

/// Whether `x` is a mark (`NO_ELEMENT`, `NOT_A_PATH`).
#[inline]
fn mark(x: u32) -> bool {
    x > u32::MAX - MARKS
}

/// The width (1, 2 or 4 bytes) that holds `x`.
fn width(x: u32) -> u8 {
    if mark(x) || x <= u32::from(u8::MAX) - MARKS {
        1
    } else if x <= u32::from(u16::MAX) - MARKS {
        2
    } else {
        4
    }
}

impl ElemIds {
    /// `n` documents each holding `x`.
    pub(crate) fn filled(n: usize, x: u32) -> ElemIds {
        let mut out = ElemIds::Narrow(vec![0; n].into());
        (0..n).for_each(|i| out.set(i, x));
        out
    }

    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> u32 {
        // a mark: the top of the narrow type, moved to the top of `u32`
        match self {
            ElemIds::Narrow(v) => match u32::from(v[i]) {
                x if x > u32::from(u8::MAX) - MARKS => u32::MAX - (u32::from(u8::MAX) - x),
                x => x,
            },
            ElemIds::Mid(v) => match u32::from(v[i]) {
                x if x > u32::from(u16::MAX) - MARKS => u32::MAX - (u32::from(u16::MAX) - x),
                x => x,
            },
            ElemIds::Wide(v) => v[i],
        }
    }

    /// Sets document `i`'s number, widening the column when `x` does not fit it;
    /// `settle` afterwards narrows it again where every number fits a narrower one.
    pub(crate) fn set(&mut self, i: usize, x: u32) {
        let need = width(x);
        if need > self.width() {
            *self = self.widened(need);
        }
        self.put(i, x);
    }

    /// Sets document `i`'s number, which the width holds.
    fn put(&mut self, i: usize, x: u32) {
        let below_top = u32::MAX - x; // (of a mark: 0 or 1)
        match self {
            ElemIds::Narrow(v) if mark(x) => v[i] = u8::MAX - below_top as u8,
            ElemIds::Narrow(v) => v[i] = x as u8,
            ElemIds::Mid(v) if mark(x) => v[i] = u16::MAX - below_top as u16,
            ElemIds::Mid(v) => v[i] = x as u16,
            ElemIds::Wide(v) => v[i] = x,
        }
    }

    fn width(&self) -> u8 {
        match self {
            ElemIds::Narrow(_) => 1,
            ElemIds::Mid(_) => 2,
            ElemIds::Wide(_) => 4,
        }
    }

    /// A copy in `width` bytes a number (which holds every number it has).
    fn widened(&self, width: u8) -> ElemIds {
        let mut out = match width {
            1 => ElemIds::Narrow(vec![0; self.len()].into()),
            2 => ElemIds::Mid(vec![0; self.len()].into()),
            _ => ElemIds::Wide(vec![0; self.len()].into()),
        };
        (0..self.len()).for_each(|i| out.put(i, self.get(i)));
        out
    }

    /// The narrowest form that holds every number: one form for one content.
    pub(crate) fn settle(&mut self) {
        let need = (0..self.len())
            .map(|i| width(self.get(i)))
            .max()
            .unwrap_or(1);
        if need < self.width() {
            *self = self.widened(need);
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            ElemIds::Narrow(v) => v.len(),
            ElemIds::Mid(v) => v.len(),
            ElemIds::Wide(v) => v.len(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn bytes(&self) -> usize {
        self.len() * usize::from(self.width())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Numbers and marks read back through any sequence of sets, and the settled
        /// column is in the fewest bytes that hold them.
        #[test]
        fn element_numbers_read_back(
            sets in prop::collection::vec((0usize..30, prop_oneof![
                0u32..300,
                250u32..260,
                65_500u32..65_600,
                any::<u32>(),
                Just(u32::MAX),
                Just(u32::MAX - 1),
            ]), 0..60),
        ) {
            let mut want = [u32::MAX; 30];
            let mut v = ElemIds::filled(30, u32::MAX);
            for (i, x) in sets {
                want[i] = x;
                v.set(i, x);
                v.settle();
            }
            for (i, &x) in want.iter().enumerate() {
                prop_assert_eq!(v.get(i), x, "document {}", i);
            }
            let need = want.iter().map(|&x| match x {
                x if x >= u32::MAX - 1 => 1,
                x if x < 254 => 1,
                x if x < 65_534 => 2,
                _ => 4,
            }).max().unwrap_or(1);
            prop_assert_eq!(v.bytes(), 30 * need);
        }
    }

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
