//! The commit journal: what makes an apply durable. The item store commits each apply
//! without an fsync of its own (redb `Durability::None`: the pages reach the OS, its
//! header does not move on disk); instead the changeset's catalog entry is appended here
//! and fdatasynced — a few hundred bytes rather than every page the apply dirtied. Now
//! and then (`Store::sync`) the item store commits durably and the journal is emptied.
//!
//! After a crash the item store opens in its last durable state, and every entry here
//! it does not list yet is applied again from its changeset file, in order — those
//! files were fsynced and renamed into place before their entry was written.
//!
//! One line per entry: the CRC-32 of the JSON (8 hex digits), a space, the JSON, `\n`.
//! A torn last line (a crash mid-append, never acknowledged) fails its check and ends
//! the journal.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::meta::{ChangesetMeta, ChangesetType};

/// A changeset listed by a commit the item store may not hold durably yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub meta: ChangesetMeta,
    /// The item-set semantics it was applied with (a replicated changeset's may differ
    /// from the type it is listed under); `None`: it changed no item (a checkpoint).
    pub semantics: Option<ChangesetType>,
}

pub(crate) struct Journal {
    file: File,
    /// Entries appended since the journal was last emptied.
    entries: u64,
}

impl Journal {
    /// Opens the journal in `dir`, returning it with the entries it holds (up to the
    /// first damaged line).
    pub fn open(dir: &Path) -> io::Result<(Journal, Vec<Entry>)> {
        let path = dir.join("journal");
        let (entries, valid, len) = match fs::read(&path) {
            Ok(bytes) => {
                let (entries, valid) = parse(&bytes);
                (entries, valid, bytes.len())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (Vec::new(), 0, 0),
            Err(e) => return Err(e),
        };
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        if len > valid {
            // a torn or damaged tail goes, or an entry appended after it would be lost
            // with it at the next open
            file.set_len(valid as u64)?;
            file.sync_all()?;
        }
        let journal = Journal {
            file,
            entries: entries.len() as u64,
        };
        Ok((journal, entries))
    }

    /// Appends `entry` and waits until it is on disk.
    pub fn append(&mut self, entry: &Entry) -> io::Result<()> {
        let line = encode(entry);
        let before = self.file.metadata()?.len();
        let written = self
            .file
            .write_all(&line)
            .and_then(|_| self.file.sync_data());
        if let Err(e) = written {
            // leave no partial line for a later append to follow
            let _ = self.file.set_len(before);
            return Err(e);
        }
        self.entries += 1;
        Ok(())
    }

    /// Whether entries were appended since the journal was last emptied.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Empties the journal (once the item store holds every entry durably).
    pub fn clear(&mut self) -> io::Result<()> {
        if self.entries == 0 && self.file.metadata()?.len() == 0 {
            return Ok(());
        }
        self.file.set_len(0)?;
        self.file.sync_all()?;
        self.entries = 0;
        Ok(())
    }
}

fn encode(entry: &Entry) -> Vec<u8> {
    let json = serde_json::to_vec(entry).unwrap_or_default();
    let mut line = format!("{:08x} ", crc32fast::hash(&json)).into_bytes();
    line.extend_from_slice(&json);
    line.push(b'\n');
    line
}

/// The entries of a journal file, up to the first line that is torn or damaged, and
/// the length of the bytes they take.
fn parse(bytes: &[u8]) -> (Vec<Entry>, usize) {
    let mut out = Vec::new();
    let mut valid = 0;
    let mut rest = bytes;
    while let Some(end) = rest.iter().position(|&b| b == b'\n') {
        let line = &rest[..end];
        rest = &rest[end + 1..];
        let Some(entry) = decode(line) else {
            tracing::warn!(
                "the commit journal ends in a damaged line; ignoring it and what follows"
            );
            break;
        };
        out.push(entry);
        valid += end + 1;
    }
    (out, valid)
}

fn decode(line: &[u8]) -> Option<Entry> {
    let (crc, json) = (line.get(..8)?, line.get(9..)?);
    let crc = u32::from_str_radix(std::str::from_utf8(crc).ok()?, 16).ok()?;
    if line.get(8) != Some(&b' ') || crc32fast::hash(json) != crc {
        return None;
    }
    serde_json::from_slice(json).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, semantics: Option<ChangesetType>) -> Entry {
        Entry {
            meta: ChangesetMeta {
                seq,
                id: format!("{seq:032x}"),
                ty: ChangesetType::Delta,
                date: 1_700_000_000 + seq,
                md5: "d41d8cd98f00b204e9800998ecf8427e".into(),
                length: 10 * seq,
                raw_length: 7 * seq,
            },
            semantics,
        }
    }

    #[test]
    fn entries_come_back_in_order_and_clear_empties() {
        let d = tempfile::tempdir().unwrap();
        let (mut j, old) = Journal::open(d.path()).unwrap();
        assert!(old.is_empty() && j.is_empty());
        let written = [
            entry(1, Some(ChangesetType::Delta)),
            entry(2, None),
            entry(3, Some(ChangesetType::Reset)),
        ];
        for e in &written {
            j.append(e).unwrap();
        }
        assert!(!j.is_empty());
        drop(j);
        let (mut j, read) = Journal::open(d.path()).unwrap();
        assert_eq!(read, written);
        j.clear().unwrap();
        assert!(j.is_empty());
        drop(j);
        assert!(Journal::open(d.path()).unwrap().1.is_empty());
    }

    /// A torn or altered line ends the journal there: the entries before it are read,
    /// none after.
    #[test]
    fn a_damaged_line_ends_the_journal() {
        let d = tempfile::tempdir().unwrap();
        let (mut j, _) = Journal::open(d.path()).unwrap();
        for seq in 1..=3 {
            j.append(&entry(seq, Some(ChangesetType::Delta))).unwrap();
        }
        drop(j);
        let path = d.path().join("journal");
        let whole = fs::read(&path).unwrap();
        let lines: Vec<usize> = whole
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'\n')
            .map(|(i, _)| i)
            .collect();
        // torn: the last line cut short
        fs::write(&path, &whole[..whole.len() - 5]).unwrap();
        assert_eq!(Journal::open(d.path()).unwrap().1.len(), 2);
        // altered: one byte of the second line's JSON changed
        let mut bad = whole.clone();
        bad[lines[0] + 20] ^= 1;
        fs::write(&path, &bad).unwrap();
        assert_eq!(Journal::open(d.path()).unwrap().1.len(), 1);
        // an entry appended after a torn tail is read back: the open cut the tail
        fs::write(&path, &whole[..whole.len() - 5]).unwrap();
        let (mut j, read) = Journal::open(d.path()).unwrap();
        assert_eq!(read.len(), 2);
        j.append(&entry(9, None)).unwrap();
        drop(j);
        let read = Journal::open(d.path()).unwrap().1;
        assert_eq!(read.len(), 3);
        assert_eq!(read[2], entry(9, None));
    }
}
