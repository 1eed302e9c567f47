//! The dimensions document (SPEC §6.2): parsing and validation, value extraction per
//! dimension type, text analysis (§6.3), time formats, and the bundled ZIP table.

pub mod analysis;
mod doc;
pub mod extract;
pub mod interval;
pub mod many;
pub mod slot;
pub mod strlist;
pub mod termlist;
pub mod time;
pub mod zip;

pub use analysis::{Analyzer, Word};
pub use doc::{
    Dimension, DimensionKind, Dimensions, Element, ElementSet, GeoSpec, NumericKind, NumericSpec,
    RangeElement, TextField, TextSpec,
};
pub use doc::{MAX_TEXT_FIELDS, TYPE_NAMES};
pub use extract::{extract, for_each_key_value, text_tokens, to_json, Extracted, IndexedValue};
pub use interval::Interval;
pub use many::Many;
pub use slot::{Slot, ValueRef};
pub use strlist::{StrList, StrListBuilder};
pub use termlist::{TermList, TermListBuilder};
