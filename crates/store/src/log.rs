use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use md5::{Digest, Md5};

/// Receives a changeset body: compresses it into `<id>.tmp` while hashing and counting
/// the uncompressed bytes. Nothing is visible until the apply commits.
pub struct LogWriter {
    pub(crate) id: String,
    pub(crate) tmp: PathBuf,
    enc: Option<zstd::stream::write::Encoder<'static, BufWriter<File>>>,
    md5: Md5,
    pub(crate) length: u64,
}

pub(crate) struct Staged {
    pub id: String,
    pub tmp: PathBuf,
    pub md5: String,
    pub length: u64,
    pub raw_length: u64,
}

impl LogWriter {
    pub(crate) fn create(dir: &std::path::Path) -> io::Result<LogWriter> {
        let id = new_id();
        let tmp = dir.join(format!("{id}.tmp"));
        let file = File::create(&tmp)?;
        let enc = zstd::stream::write::Encoder::new(BufWriter::with_capacity(256 * 1024, file), 1)?;
        Ok(LogWriter {
            id,
            tmp,
            enc: Some(enc),
            md5: Md5::new(),
            length: 0,
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Compresses, flushes and fsyncs the file.
    pub(crate) fn finish(mut self) -> io::Result<Staged> {
        let enc = self
            .enc
            .take()
            .ok_or_else(|| io::Error::other("log writer already finished"))?;
        let buf = enc.finish()?;
        let file = buf.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        let raw_length = file.metadata()?.len();
        Ok(Staged {
            id: std::mem::take(&mut self.id),
            tmp: std::mem::take(&mut self.tmp),
            md5: hex::encode(self.md5.clone().finalize()),
            length: self.length,
            raw_length,
        })
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let enc = self
            .enc
            .as_mut()
            .ok_or_else(|| io::Error::other("log writer finished"))?;
        enc.write_all(buf)?;
        self.md5.update(buf);
        self.length += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LogWriter {
    /// An unfinished writer (rejected changeset) leaves no file behind.
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            self.enc.take();
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// 32 lowercase hex characters, random (SPEC §5.1).
fn new_id() -> String {
    let v: u128 = rand::random();
    format!("{v:032x}")
}
