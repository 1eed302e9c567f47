//! Values, item records, ids and the error type shared by every discern crate.

mod codec;
mod error;
mod value;

pub use codec::{
    decode_record, encode_record, write_json_string, write_props_json, write_record_json,
    CodecError,
};
pub use error::{Error, Result};
pub use value::{Record, RecordWithId, Value};

/// Longest item id accepted, in bytes (SPEC §2).
pub const MAX_ID_BYTES: usize = 1024;

/// Checks an item id against SPEC §2: non-empty, at most 1024 bytes.
pub fn validate_id(id: &str) -> std::result::Result<(), String> {
    if id.is_empty() {
        return Err("item id is empty".into());
    }
    if id.len() > MAX_ID_BYTES {
        return Err(format!(
            "item id is {} bytes long (at most {MAX_ID_BYTES})",
            id.len()
        ));
    }
    Ok(())
}
