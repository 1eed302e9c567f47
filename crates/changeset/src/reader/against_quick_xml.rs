//! The tokenizer against quick-xml (`events::QuickXml`), which the reader used before
//! it: on every fixture and on generated documents, whole and damaged, both accept the
//! same documents with the same actions, and reject the same ones at the same line
//! (but for bad UTF-8 in text, newlines in end tags, which quick-xml did not count, and
//! attributes without a name, which it skipped).

use super::events::QuickXml;
use super::*;
use proptest::prelude::*;

fn read_from<S: Events>(source: S) -> Result<Vec<Action>, ParseError> {
    let mut out = Vec::new();
    super::read_from(source, |a| {
        out.push(a);
        Ok::<(), ParseError>(())
    })?;
    Ok(out)
}

/// Both readers' results on `doc`, the tokenizer's buffer starting at `buffer` bytes.
fn both(
    doc: &[u8],
    buffer: usize,
) -> (
    Result<Vec<Action>, ParseError>,
    Result<Vec<Action>, ParseError>,
) {
    (
        read_from(Lexer::with_buffer(doc, buffer)),
        read_from(QuickXml::new(doc)),
    )
}

fn check(doc: &[u8], buffer: usize) -> Result<(), TestCaseError> {
    match both(doc, buffer) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
        // (bad UTF-8 is placed at its byte, not at its text's start; and quick-xml
        // did not count the newlines inside end tags)
        (Err(a), Err(_))
            if a.message.starts_with("invalid text encoding") || newline_in_end_tag(doc) => {}
        // (quick-xml skipped an attribute without a name — `<entry name='e'=x='a'>` —
        // and went on, failing later or not at all; it is not XML, and the tokenizer
        // rejects it where it stands: `unnamed_attributes_are_rejected`)
        (Err(a), _) if a.message.ends_with("an attribute has no name") => {}
        (Err(a), Err(b)) => prop_assert_eq!(a.line, b.line, "{} / {}", a, b),
        (a, b) => prop_assert!(
            false,
            "tokenizer {:?}, quick-xml {:?} on {:?}",
            a.map(|v| v.len()),
            b.map(|v| v.len()),
            String::from_utf8_lossy(doc)
        ),
    }
    Ok(())
}

fn newline_in_end_tag(doc: &[u8]) -> bool {
    memchr::memmem::find_iter(doc, b"</").any(|i| {
        let tag = &doc[i..];
        let end = memchr::memchr(b'>', tag).unwrap_or(tag.len());
        tag[..end].contains(&b'\n')
    })
}

/// An attribute without a name is an error where it stands, even after a named one
/// (quick-xml skipped it: a damaged document it read as whole).
#[test]
fn unnamed_attributes_are_rejected() {
    for doc in [
        &b"<changeset><set-item id='a'><properties><struct><entry name='e'=name='a'/></struct></properties></set-item></changeset>"[..],
        &b"<changeset>\n<set-item ='a'/></changeset>"[..],
    ] {
        let e = read_from(Lexer::new(doc)).unwrap_err();
        assert!(e.message.ends_with("an attribute has no name"), "{e}");
        // (on the line of the tag holding it)
        assert_eq!(e.line, 1 + doc.iter().filter(|&&c| c == b'\n').count() as u64, "{e}");
    }
}

/// Newlines inside end tags count: an error after one is on the next line.
#[test]
fn newlines_in_end_tags_count() {
    let doc = b"<changeset><set-item id='a'><properties><struct><entry name='n'><int>1</int\n></entry><bogus/></struct></properties></set-item></changeset>";
    let e = read_from(Lexer::new(&doc[..])).unwrap_err();
    assert_eq!((e.line, e.column), (2, 10), "{e}");
}

#[test]
fn fixtures() {
    let shared = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/changesets"
    );
    let mut docs: Vec<Vec<u8>> = vec![include_bytes!("../../testdata/spec-example.xml").to_vec()];
    if let Ok(dir) = std::fs::read_dir(shared) {
        for e in dir.flatten() {
            if e.path().extension().is_some_and(|x| x == "xml") {
                docs.push(std::fs::read(e.path()).unwrap());
            }
        }
    }
    for doc in &docs {
        for buffer in [1, 7, 64, 4096, 1 << 20] {
            let (a, b) = both(doc, buffer);
            assert_eq!(a.unwrap(), b.unwrap());
        }
    }
}

/// A changeset's pieces, valid and not, joined into documents.
const PIECES: &[&str] = &[
    "<changeset>",
    "</changeset>",
    "<changeset/>",
    "<set-item id='a'>",
    "</set-item>",
    "<add-item id=\"b\"/>",
    "<remove-item id='c'/>",
    "<add-to-item id='d'>",
    "</add-to-item>",
    "<remove-from-item id='e'>",
    "</remove-from-item>",
    "<all/>",
    "<set-item locator='l' provider='p' kind='k'>",
    "<properties>",
    "</properties>",
    "<struct>",
    "</struct>",
    "<entry name='n'>",
    "<entry name=\"m\" x='1'>",
    "</entry>",
    "<entry name='n'/>",
    "<string>",
    "</string>",
    "<int>",
    "</int>",
    "<real>",
    "</real>",
    "<bool>",
    "</bool>",
    "<long>",
    "</long>",
    "<array>",
    "</array>",
    "<element>",
    "</element>",
    "text",
    " ",
    "\n",
    "\t",
    "1",
    "2.5",
    "true",
    "é",
    "中",
    "&amp;",
    "&lt;",
    "&#233;",
    "&#x4E2D;",
    "&#0;",
    "&bogus;",
    "&",
    ";",
    "<![CDATA[x<y]]>",
    "<!-- c\n -->",
    "<?pi x?>",
    "<?xml version='1.0'?>",
    "<!DOCTYPE changeset [<!ENTITY x 'y'>]>",
    "<",
    ">",
    "/>",
    "</",
    "'",
    "\"",
    "=",
    "<bogus>",
    "</bogus>",
    "<entry name='n' name='o'>",
    "<entry name = 'n' >",
    "<entry name='a&amp;b'>",
    "<entry name=n>",
    "<entry name='n'x='y'>",
    "]]>",
    "<!-->",
    "<!x>",
    "</entry >",
    "<string >",
    // (the forms `Events::string_entry` takes whole, and pieces of them)
    "<entry name=\"n\"><string>",
    "<entry name='n'><string>t</string></entry>",
    "<entry name=\"m\"><string> a\nb </string></entry>",
    "<entry name=\"\"><string>t</string></entry>",
    "<entry name=\"a b\"><string>t</string></entry>",
    "<element><string>",
    "<element><string>t</string></element>",
    "</string></entry>",
    "</string></element>",
    "\u{feff}",
];

fn document(picks: &[(usize, bool)]) -> Vec<u8> {
    let mut doc = Vec::new();
    for &(i, raw) in picks {
        if raw {
            // (a byte that is not UTF-8 on its own)
            doc.push(0x80 | (i as u8 & 0x3f));
        } else {
            doc.extend_from_slice(PIECES[i % PIECES.len()].as_bytes());
        }
    }
    doc
}

/// A well-formed changeset of `n` items, each with a value of every kind.
fn well_formed(n: usize, seed: u64) -> String {
    let mut doc = String::from("<?xml version='1.0' encoding='UTF-8'?>\n<changeset>\n");
    for i in 0..n {
        let v = seed.wrapping_mul(i as u64 + 1) % 1000;
        doc.push_str(&format!(
            "<set-item id='i{i}'><properties><struct>\
             <entry name='s'><string>v{v} &amp; &#233; <![CDATA[<c>]]></string></entry>\n\
             <entry name=\"t\"><string> w{v}\nand é </string></entry> \n <entry name='u'><string></string></entry>\
             <entry name='n'><int>{v}</int></entry><entry name='r'><real>{v}.5</real></entry>\
             <entry name='b'><bool>{}</bool></entry><entry name='e'/>\
             <entry name='a'><array><element><string>x</string></element> <element><string>\ny</string></element>\
             <element><struct><entry name='k'><long>-{v}</long></entry></struct></element>\
             </array></entry></struct></properties></set-item>\n<!-- {i} -->\n",
            v % 2
        ));
        if v.is_multiple_of(3) {
            doc.push_str(&format!("<remove-from-item id='i{i}'><properties><struct><entry name='s'/></struct></properties></remove-from-item>\n"));
        }
    }
    doc.push_str("</changeset>\n");
    doc
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_pieces(picks in prop::collection::vec((0usize..200, prop::bool::weighted(0.03)), 0..40), buffer in 1usize..40) {
        check(&document(&picks), buffer)?;
    }

    #[test]
    fn damaged_changesets(n in 1usize..6, seed in any::<u64>(), at in any::<prop::sample::Index>(), cut in 0usize..12, piece in 0usize..200, buffer in 1usize..300) {
        let doc = well_formed(n, seed).into_bytes();
        check(&doc, buffer)?;
        // a piece inserted, a few bytes cut out
        let i = at.index(doc.len());
        let mut damaged = doc[..i].to_vec();
        damaged.extend_from_slice(PIECES[piece % PIECES.len()].as_bytes());
        damaged.extend_from_slice(&doc[(i + cut).min(doc.len())..]);
        check(&damaged, buffer)?;
    }
}
