//! Any bytes as a changeset body: the reader returns actions or a ParseError, never
//! panics, and every action it returns carries a valid id; and quick-xml's reading,
//! which the tokenizer replaced, accepts the same bodies with the same actions and
//! rejects the same ones.
#![no_main]

use discern_changeset::{read_changeset, read_changeset_quick_xml, ParseError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut ours = Vec::new();
    let tokenized = read_changeset::<_, ParseError>(data, |action| {
        assert!(discern_model::validate_id(action.id()).is_ok());
        ours.push(action);
        Ok(())
    });
    let mut theirs = Vec::new();
    let oracle = read_changeset_quick_xml::<_, ParseError>(data, |action| {
        theirs.push(action);
        Ok(())
    });
    match (tokenized, oracle) {
        (Ok(_), Ok(_)) => assert_eq!(ours, theirs),
        (Err(_), Err(_)) => {}
        (a, b) => panic!(
            "tokenizer {a:?}, quick-xml {b:?} on {:?}",
            String::from_utf8_lossy(data)
        ),
    }
});
