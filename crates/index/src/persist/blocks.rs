//! The file's blocks: each a length, a checksum and its bytes, encoded little-endian
//! (`Enc`, `Dec`), written whole or streamed as it is encoded (`StreamedBlock`), and
//! read back without allocating more than the file still holds (`BlockReader`).

use std::io::{self, Read, Seek, SeekFrom, Write};

/// A damaged or foreign file: what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "saved index: {}", self.0)
    }
}

#[derive(Debug)]
pub enum LoadError {
    /// Written for another state (header) or by another format: not an error.
    Stale,
    Corrupt(Corrupt),
    Io(io::Error),
}

impl From<Corrupt> for LoadError {
    fn from(c: Corrupt) -> Self {
        LoadError::Corrupt(c)
    }
}

impl From<io::Error> for LoadError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            LoadError::Corrupt(Corrupt("truncated"))
        } else {
            LoadError::Io(e)
        }
    }
}

/// Little-endian encoder into a growing buffer.
#[derive(Default)]
pub(crate) struct Enc(pub(super) Vec<u8>);

impl Enc {
    pub(crate) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Length-prefixed bytes.
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
}

/// Decoder over one block; every read checks the bounds.
pub(crate) struct Dec<'a>(pub(super) &'a [u8]);

impl<'a> Dec<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        if n > self.0.len() {
            return Err(Corrupt("a length runs past its block"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, Corrupt> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32, Corrupt> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, Corrupt> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(w))
    }
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], Corrupt> {
        let n = self.u64()?;
        self.take(usize::try_from(n).map_err(|_| Corrupt("length"))?)
    }
    /// A count of items of at least `min_bytes` each, checked against what is left (so
    /// that a damaged count cannot ask for a huge allocation).
    pub(super) fn count(&mut self, min_bytes: usize) -> Result<usize, Corrupt> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_bytes.max(1)) > self.0.len() {
            return Err(Corrupt("a count runs past its block"));
        }
        Ok(n)
    }
    pub(super) fn done(&self) -> Result<(), Corrupt> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Corrupt("trailing bytes in a block"))
        }
    }
}

pub(super) fn write_block(w: &mut impl Write, b: &[u8]) -> io::Result<()> {
    w.write_all(&(b.len() as u64).to_le_bytes())?;
    w.write_all(&crc32fast::hash(b).to_le_bytes())?;
    w.write_all(b)
}

/// What a streamed block has encoded is written once it is this long; byte strings this
/// long are written from where they are.
pub(super) const SPILL_AT: usize = 1 << 20;

/// A block written while it is encoded, for the blocks that would otherwise be held
/// whole in memory (a text dimension's postings are ~90 MB at 1M items). Its length and
/// checksum lead it and are known only at its end, so their place is left zeroed and
/// written last (the file is a temp file until it is complete): the bytes are those
/// `write_block` writes.
pub(crate) struct StreamedBlock<'w, W: Write + Seek> {
    w: &'w mut W,
    /// Where the block's length goes.
    at: u64,
    written: u64,
    crc: crc32fast::Hasher,
    spill_at: usize,
    /// Encoded, not yet written.
    pub(crate) e: Enc,
}

impl<'w, W: Write + Seek> StreamedBlock<'w, W> {
    pub(super) fn begin(w: &'w mut W, spill_at: usize) -> io::Result<Self> {
        let at = w.stream_position()?;
        w.write_all(&[0; 12])?;
        Ok(StreamedBlock {
            w,
            at,
            written: 0,
            crc: crc32fast::Hasher::new(),
            spill_at,
            e: Enc::default(),
        })
    }

    /// Writes what is encoded so far once there is enough of it to be worth a write.
    pub(crate) fn spill(&mut self) -> io::Result<()> {
        if self.e.0.len() >= self.spill_at {
            self.write_encoded()?;
        }
        Ok(())
    }

    fn write_encoded(&mut self) -> io::Result<()> {
        self.crc.update(&self.e.0);
        self.written += self.e.0.len() as u64;
        self.w.write_all(&self.e.0)?;
        self.e.0.clear();
        Ok(())
    }

    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.crc.update(b);
        self.written += b.len() as u64;
        self.w.write_all(b)
    }

    /// Length-prefixed bytes (`Enc::bytes`), long ones written without a copy.
    pub(crate) fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        if b.len() < self.spill_at {
            self.e.bytes(b);
            return self.spill();
        }
        self.e.u64(b.len() as u64);
        self.write_encoded()?;
        self.put(b)
    }

    pub(super) fn end(mut self) -> io::Result<()> {
        self.write_encoded()?;
        self.w.seek(SeekFrom::Start(self.at))?;
        self.w.write_all(&self.written.to_le_bytes())?;
        self.w
            .write_all(&self.crc.clone().finalize().to_le_bytes())?;
        self.w.seek(SeekFrom::Start(self.at + 12 + self.written))?;
        Ok(())
    }
}

/// Reads blocks, never allocating more than the file can still hold.
pub(super) struct BlockReader<R> {
    pub(super) r: R,
    pub(super) left: u64,
}

impl<R: Read> BlockReader<R> {
    pub(super) fn block(&mut self) -> Result<Vec<u8>, LoadError> {
        let mut b = Vec::new();
        self.block_into(&mut b)?;
        Ok(b)
    }

    /// `block` into a reused buffer: the chunks' blocks add up to gigabytes, and fresh
    /// buffers would cost a page fault per 4 KiB each time.
    pub(super) fn block_into(&mut self, b: &mut Vec<u8>) -> Result<(), LoadError> {
        let mut head = [0u8; 12];
        self.r.read_exact(&mut head)?;
        let mut len = [0u8; 8];
        len.copy_from_slice(&head[..8]);
        let len = u64::from_le_bytes(len);
        let crc = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        self.left = self.left.saturating_sub(12);
        if len > self.left {
            return Err(Corrupt("a block runs past the end of the file").into());
        }
        self.left -= len;
        b.clear();
        b.resize(len as usize, 0);
        self.r.read_exact(b)?;
        if crc32fast::hash(b) != crc {
            return Err(Corrupt("checksum mismatch").into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_block_is_the_block_written_whole() {
        let long = [9u8; 20];
        let mut whole = Enc::default();
        whole.u8(1);
        whole.bytes(b"abc");
        whole.u32(7);
        whole.bytes(&long);
        whole.u64(5);
        let mut expected = b"before".to_vec();
        write_block(&mut expected, &whole.0).unwrap();
        expected.extend_from_slice(b"after");
        for spill_at in [1, 3, 8, 21, SPILL_AT] {
            let mut file = io::Cursor::new(b"before".to_vec());
            file.seek(SeekFrom::End(0)).unwrap();
            let mut out = StreamedBlock::begin(&mut file, spill_at).unwrap();
            out.e.u8(1);
            out.bytes(b"abc").unwrap();
            out.e.u32(7);
            out.spill().unwrap();
            out.bytes(&long).unwrap();
            out.e.u64(5);
            out.end().unwrap();
            file.write_all(b"after").unwrap();
            assert_eq!(file.into_inner(), expected, "spilling at {spill_at}");
        }
    }
}
