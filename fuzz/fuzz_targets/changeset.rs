//! Any bytes as a changeset body: the reader returns actions or a ParseError, never
//! panics, and every action it returns carries a valid id.
#![no_main]

use discern_changeset::{read_changeset, ParseError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = read_changeset::<_, ParseError>(data, |action| {
        assert!(discern_model::validate_id(action.id()).is_ok());
        Ok(())
    });
});
