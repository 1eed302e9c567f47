//! `Slot`: one dimension's indexed value in one word, for the rows the index keeps per
//! document. An `IndexedValue` takes two words (a tag beside a pointer or a number);
//! at a million documents and 21 dimensions the row's slots alone were 336 MB.
//!
//! A slot is either a number held in place or a pointer to a list's shared allocation,
//! told apart by its low three bits (an allocation's address is a multiple of 8: it
//! starts with its reference count):
//!
//! * `INLINE` (`..001`): bit 3 tells an integer (the other 60 bits, two's complement)
//!   from a double — one of magnitude 2⁻⁶³ to 2⁶⁴, or zero: its sign, its 52-bit
//!   fraction and its exponent in 7 bits, bit for bit as it came (`double_word`);
//!   anything else is a list;
//! * any other tag: the address of a list — `Terms`, `Strings`, `Text`, `Points`,
//!   `Elements`, `Ints`, `Doubles`. A number that does not fit in place is a one-item
//!   `Ints` or `Doubles` list and reads back as `Int` or `Double`.
//!
//! `Option<Slot>` is one word too: no slot is zero (a pointer is never null, and an
//! inline number has its tag).

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::num::NonZeroU64;
use std::ops::Deref;

use crate::extract::IndexedValue;
use crate::many::Many;
use crate::strlist::StrList;
use crate::termlist::TermList;

pub struct Slot(NonZeroU64);

const TAG: u64 = 0b111;
const TERMS: u64 = 0;
const INLINE: u64 = 1;
const STRINGS: u64 = 2;
const TEXT: u64 = 3;
const POINTS: u64 = 4;
const ELEMENTS: u64 = 5;
const INTS: u64 = 6;
const DOUBLES: u64 = 7;
/// Beside `INLINE`: the number is a double.
const DOUBLE_BIT: u64 = 0b1000;
const INLINE_BITS: u32 = 4;

// (`Send` and `Sync` as a plain number is: right, since what a slot points to — one
// count of an immutable `Many` of numbers or bytes — is both.)

fn pointer<T>(tag: u64, list: Many<T>) -> Slot {
    let raw = list.into_raw() as u64;
    debug_assert!(
        raw & TAG == 0 && raw != 0,
        "a list's address is a multiple of 8"
    );
    Slot(NonZeroU64::new(raw | tag).expect("a list's address is not null"))
}

/// A double's exponent field (biased) for the smallest magnitude held in place, less
/// one: `double_word` keeps the exponent as its distance from this, in 7 bits, `0`
/// standing for zero. (Its own bits, as earlier kept, held only doubles whose lowest
/// four bits were zero: 2.5 but not 0.17, and half of a generated dataset's
/// `lot_acres` took a list of 24 bytes each.)
const EXPONENT_BASE: u64 = 1023 - 64;
const FRACTION: u64 = (1 << 52) - 1;

/// `x` as the 60 bits a slot holds it in (sign, exponent less `EXPONENT_BASE`,
/// fraction), if it is zero or of magnitude 2⁻⁶³ to just under 2⁶⁴ (a subnormal, an
/// infinity, a NaN and any other are lists).
fn double_word(x: f64) -> Option<u64> {
    let bits = x.to_bits();
    let (sign, exponent, fraction) = (bits >> 63, bits >> 52 & 0x7ff, bits & FRACTION);
    let code = match exponent {
        0 if fraction == 0 => 0,
        e if e > EXPONENT_BASE && e - EXPONENT_BASE <= 0x7f => e - EXPONENT_BASE,
        _ => return None,
    };
    Some(sign << 59 | code << 52 | fraction)
}

/// The double `double_word` made `word` of.
fn word_double(word: u64) -> f64 {
    let (sign, code, fraction) = (word >> 59 & 1, word >> 52 & 0x7f, word & FRACTION);
    let exponent = if code == 0 { 0 } else { code + EXPONENT_BASE };
    f64::from_bits(sign << 63 | exponent << 52 | fraction)
}

/// The slot word holding a lone number in place, if it fits: an integer of 60 bits, a
/// double `double_word` keeps.
fn inline_word(value: &IndexedValue) -> Option<u64> {
    match *value {
        IndexedValue::Int(x) => {
            ((x << INLINE_BITS) >> INLINE_BITS == x).then_some((x << INLINE_BITS) as u64 | INLINE)
        }
        IndexedValue::Double(x) => double_word(x).map(|w| w << INLINE_BITS | DOUBLE_BIT | INLINE),
        _ => None,
    }
}

impl IndexedValue {
    /// The value with a lone number that a slot cannot hold in place already in the
    /// one-item list `Slot::from` would put it in, so that the list is allocated by the
    /// thread calling this. (The index's writer extracts values on every core but makes
    /// the rows on one thread, where these 24-byte lists sat between the apply's
    /// short-lived allocations of that size, and kept their pages when those were
    /// freed.)
    pub fn boxed_for_slot(self) -> IndexedValue {
        match self {
            IndexedValue::Int(x) if inline_word(&self).is_none() => {
                IndexedValue::Ints(Many::from([x]))
            }
            IndexedValue::Double(x) if inline_word(&self).is_none() => {
                IndexedValue::Doubles(Many::from([x]))
            }
            v => v,
        }
    }
}

impl From<IndexedValue> for Slot {
    fn from(value: IndexedValue) -> Slot {
        match value {
            // (a number that does not fit: a one-item list, which `boxed_for_slot` is the
            // one place to make)
            number @ (IndexedValue::Int(_) | IndexedValue::Double(_)) => {
                match inline_word(&number) {
                    Some(word) => Slot::inline(word),
                    None => Slot::from(number.boxed_for_slot()),
                }
            }
            IndexedValue::Ints(xs) => pointer(INTS, xs),
            IndexedValue::Doubles(xs) => pointer(DOUBLES, xs),
            IndexedValue::Terms(t) => pointer(TERMS, t.into_many()),
            IndexedValue::Strings(s) => pointer(STRINGS, s.into_many()),
            IndexedValue::Text(s) => pointer(TEXT, s.into_many()),
            IndexedValue::Points(p) => pointer(POINTS, p),
            IndexedValue::Elements(e) => pointer(ELEMENTS, e),
        }
    }
}

/// A list of numbers as its value: `one` of a lone number (the list itself then stays
/// the slot's, uncounted), else `many`.
fn one_or_many<T: Copy>(
    xs: Many<T>,
    one: fn(T) -> IndexedValue,
    many: fn(Many<T>) -> IndexedValue,
) -> IndexedValue {
    match xs[..] {
        [x] => {
            let _ = ManuallyDrop::new(xs);
            one(x)
        }
        _ => many(xs),
    }
}

impl Slot {
    fn inline(word: u64) -> Slot {
        Slot(NonZeroU64::new(word).expect("an inline number has its tag"))
    }

    fn raw(&self) -> *const c_void {
        (self.0.get() & !TAG) as *const c_void
    }

    /// The value, borrowed from the slot: no count changes (clone it to keep it).
    #[inline]
    pub fn get(&self) -> ValueRef<'_> {
        // SAFETY: every `from_raw` below reads the list this slot's tag names, stored by
        // `pointer` with the same item type, and its value is never dropped
        // (`ValueRef` holds it in `ManuallyDrop`) while this slot, which owns the
        // count, outlives the borrow.
        let value = unsafe { self.decode() };
        ValueRef {
            value: ManuallyDrop::new(value),
            slot: PhantomData,
        }
    }

    /// The value as it was stored (a lone number in a one-item list as `Int` or
    /// `Double`), sharing the slot's count.
    ///
    /// # Safety
    /// The result shares the count this slot owns: it must be dropped only if the slot
    /// is not (see `Drop`), else never.
    unsafe fn decode(&self) -> IndexedValue {
        let word = self.0.get();
        let raw = self.raw();
        // SAFETY (every arm): the tag names the item type `pointer` stored `raw` with.
        unsafe {
            match word & TAG {
                INLINE if word & DOUBLE_BIT == 0 => IndexedValue::Int(word as i64 >> INLINE_BITS),
                INLINE => IndexedValue::Double(word_double(word >> INLINE_BITS)),
                TERMS => IndexedValue::Terms(TermList::from_many(Many::from_raw(raw))),
                STRINGS => IndexedValue::Strings(StrList::from_many(Many::from_raw(raw))),
                TEXT => IndexedValue::Text(StrList::from_many(Many::from_raw(raw))),
                POINTS => IndexedValue::Points(Many::from_raw(raw)),
                ELEMENTS => IndexedValue::Elements(Many::from_raw(raw)),
                INTS => one_or_many(Many::from_raw(raw), IndexedValue::Int, IndexedValue::Ints),
                _ => one_or_many(
                    Many::from_raw(raw),
                    IndexedValue::Double,
                    IndexedValue::Doubles,
                ),
            }
        }
    }
}

impl Slot {
    /// This slot's share of the heap bytes it holds: its list's allocation divided
    /// among the values sharing it (a number that did not fit in place has one too);
    /// 0 for a number in place.
    pub fn heap_bytes_share(&self) -> usize {
        fn share<T>(raw: *const c_void) -> usize {
            // SAFETY: `raw` is the slot's list of `T`s (its tag says so); the value is
            // never dropped, so the slot's count stays the slot's.
            ManuallyDrop::new(unsafe { Many::<T>::from_raw(raw) }).heap_bytes_share()
        }
        let raw = self.raw();
        match self.0.get() & TAG {
            INLINE => 0,
            TERMS | STRINGS | TEXT => share::<u8>(raw),
            POINTS => share::<(f64, f64)>(raw),
            ELEMENTS => share::<u32>(raw),
            INTS => share::<i64>(raw),
            _ => share::<f64>(raw),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let word = self.0.get();
        let raw = self.raw();
        // SAFETY: the slot owns one count of the list its tag names (or holds a number);
        // this is the one place that count is given back, once.
        unsafe {
            match word & TAG {
                INLINE => {}
                TERMS | STRINGS | TEXT => drop(Many::<u8>::from_raw(raw)),
                POINTS => drop(Many::<(f64, f64)>::from_raw(raw)),
                ELEMENTS => drop(Many::<u32>::from_raw(raw)),
                INTS => drop(Many::<i64>::from_raw(raw)),
                _ => drop(Many::<f64>::from_raw(raw)),
            }
        }
    }
}

impl Clone for Slot {
    fn clone(&self) -> Slot {
        Slot::from(self.get().clone())
    }
}

impl PartialEq for Slot {
    fn eq(&self, other: &Slot) -> bool {
        *self.get() == *other.get()
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

/// A slot's value, borrowed: reads as an `IndexedValue` for as long as the slot lives.
pub struct ValueRef<'a> {
    value: ManuallyDrop<IndexedValue>,
    slot: PhantomData<&'a Slot>,
}

impl<'a> ValueRef<'a> {
    /// The strings of a `Strings` or `Text` value (else none), each borrowed for as
    /// long as the slot lives, not only this `ValueRef`.
    pub fn each_str(&self, mut f: impl FnMut(&'a str)) {
        if let IndexedValue::Strings(list) | IndexedValue::Text(list) = &*self.value {
            for s in list.iter() {
                // SAFETY: `s` points into the list's allocation, not into this
                // `ValueRef`: the slot, borrowed for 'a, keeps that allocation alive and
                // nothing changes a list once made.
                f(unsafe { &*(s as *const str) })
            }
        }
    }
}

impl Deref for ValueRef<'_> {
    type Target = IndexedValue;
    #[inline]
    fn deref(&self) -> &IndexedValue {
        &self.value
    }
}

impl PartialEq for ValueRef<'_> {
    fn eq(&self, other: &ValueRef<'_>) -> bool {
        *self.value == *other.value
    }
}

impl fmt::Debug for ValueRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_optional_slot_is_one_word() {
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 8);
    }

    fn value() -> impl Strategy<Value = IndexedValue> {
        let int = prop_oneof![
            any::<i64>(),
            -1000i64..1000,
            Just(i64::MIN),
            Just(i64::MAX),
            Just(1 << 59),
            Just(-(1 << 59)),
            Just((1 << 59) - 1),
        ];
        let double = prop_oneof![
            any::<f64>().prop_filter("a number", |x| !x.is_nan()),
            (-100i32..100).prop_map(|x| x as f64 / 2.0),
            Just(0.37),
            Just(-0.0),
            Just(0.0),
            // the magnitudes held in place, at and past their ends
            Just(f64::from_bits(960 << 52)),
            Just(-f64::from_bits((960 << 52) - 1)),
            Just(f64::from_bits((1087 << 52) - 1)),
            Just(f64::from_bits(1087 << 52)),
            Just(f64::MIN_POSITIVE),
            Just(f64::INFINITY),
            Just(-f64::INFINITY),
            Just(5e-324),
        ];
        prop_oneof![
            prop::collection::vec(int, 1..4).prop_map(IndexedValue::from_ints),
            prop::collection::vec(double, 1..4).prop_map(IndexedValue::from_doubles),
            prop::collection::vec("[a-z]{0,6}", 0..4)
                .prop_map(|s| IndexedValue::Strings(StrList::from_strs(&s))),
            prop::collection::vec("[a-z]{0,6}", 0..4)
                .prop_map(|s| IndexedValue::Text(StrList::from_strs(&s))),
            prop::collection::vec(0u32..1000, 0..6).prop_map(|ns| {
                let mut b = crate::termlist::TermListBuilder::default();
                ns.iter().for_each(|&n| b.push(n));
                b.end_group();
                IndexedValue::Terms(b.finish())
            }),
            prop::collection::vec((-90.0..90.0f64, -180.0..180.0f64), 0..3)
                .prop_map(|p| IndexedValue::Points(p.into())),
            prop::collection::vec(0u32..50, 0..4).prop_map(|e| IndexedValue::Elements(e.into())),
        ]
    }

    proptest! {
        /// A value reads back from its slot as it went in, bit for bit (doubles too),
        /// as do the slot's clones; and no list's count is left changed.
        #[test]
        fn a_value_reads_back(v in value()) {
            let kept = v.clone();
            let slot = Slot::from(v);
            let same = |a: &IndexedValue, b: &IndexedValue| match (a, b) {
                (IndexedValue::Double(x), IndexedValue::Double(y)) => x.to_bits() == y.to_bits(),
                (IndexedValue::Doubles(x), IndexedValue::Doubles(y)) => {
                    x.iter().map(|x| x.to_bits()).eq(y.iter().map(|y| y.to_bits()))
                }
                _ => a == b,
            };
            prop_assert!(same(&slot.get(), &kept), "{:?} vs {:?}", slot.get(), kept);
            let copy = slot.clone();
            prop_assert!(same(&copy.get(), &kept));
            prop_assert_eq!(&slot, &copy);
            drop(slot);
            prop_assert!(same(&copy.get(), &kept));
            let count = match &kept {
                IndexedValue::Strings(s) | IndexedValue::Text(s) => Some(s.clone().into_many().share_count() - 1),
                IndexedValue::Terms(t) => Some(t.clone().into_many().share_count() - 1),
                IndexedValue::Points(p) => Some(p.share_count()),
                IndexedValue::Elements(e) => Some(e.share_count()),
                IndexedValue::Ints(x) => Some(x.share_count()),
                IndexedValue::Doubles(x) => Some(x.share_count()),
                IndexedValue::Int(_) | IndexedValue::Double(_) => None,
            };
            // a list: `kept` and `copy` share it (the slot gave its count back)
            prop_assert!(count.is_none() || count == Some(2), "{count:?}");
        }
    }

    /// A number a slot cannot hold in place is boxed by `boxed_for_slot`, and the slot
    /// takes that very list (allocating nothing on the writer's thread); one it holds
    /// in place stays a number.
    #[test]
    fn a_boxed_number_is_the_slots_own_list() {
        for (v, in_place) in [
            (IndexedValue::Int(i64::MAX), false),
            (IndexedValue::Int(-(1 << 60)), false),
            (IndexedValue::Double(1e300), false),
            (IndexedValue::Double(-1e-30), false),
            (IndexedValue::Double(f64::INFINITY), false),
            (IndexedValue::Int(-5), true),
            (IndexedValue::Double(2.5), true),
            (IndexedValue::Double(0.37), true),
            (IndexedValue::Double(-0.0), true),
        ] {
            let boxed = v.clone().boxed_for_slot();
            let list = match &boxed {
                IndexedValue::Ints(x) => Some(x.clone().into_raw()),
                IndexedValue::Doubles(x) => Some(x.clone().into_raw()),
                IndexedValue::Int(_) | IndexedValue::Double(_) => None,
                other => panic!("{other:?}"),
            };
            assert_eq!(list.is_none(), in_place, "{v:?}");
            let slot = Slot::from(boxed);
            assert_eq!(*slot.get(), v);
            if let Some(raw) = list {
                assert_eq!(slot.raw(), raw, "{v:?}: the slot holds the boxed list");
                // SAFETY: `raw` came from `into_raw` on a clone of a list of this item
                // type just above; its count is given back here, once.
                unsafe {
                    match v {
                        IndexedValue::Int(_) => drop(Many::<i64>::from_raw(raw)),
                        _ => drop(Many::<f64>::from_raw(raw)),
                    }
                }
            }
        }
    }

    #[test]
    fn numbers_that_do_not_fit_in_place_read_back_as_one_number() {
        for v in [
            IndexedValue::Int(i64::MAX),
            IndexedValue::Int(-(1 << 60)),
            IndexedValue::Double(1e300),
            IndexedValue::Double(1e-30),
            IndexedValue::Double(f64::NAN),
            IndexedValue::Double(f64::from_bits(1087 << 52)), // 2⁶⁴
            IndexedValue::Double(f64::from_bits((960 << 52) - 1)), // just under 2⁻⁶³
        ] {
            let slot = Slot::from(v.clone());
            assert_ne!(slot.0.get() & TAG, INLINE, "{v:?} is a list");
            match (&*slot.get(), &v) {
                (IndexedValue::Double(a), IndexedValue::Double(b)) => {
                    assert_eq!(a.to_bits(), b.to_bits())
                }
                (got, _) => assert_eq!(*got, v),
            }
        }
        for v in [
            IndexedValue::Int(-5),
            IndexedValue::Double(2.5),
            IndexedValue::Double(0.37),
            IndexedValue::Double(0.1),
            IndexedValue::Double(-123456.789),
            IndexedValue::Double(0.0),
            IndexedValue::Double(f64::from_bits(960 << 52)), // 2⁻⁶³
            IndexedValue::Double(f64::from_bits((1087 << 52) - 1)), // just under 2⁶⁴
        ] {
            assert_eq!(
                Slot::from(v.clone()).0.get() & TAG,
                INLINE,
                "{v:?} in place"
            );
        }
    }
}
