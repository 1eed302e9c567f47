//! Bootstrap images (docs/replication.md). With `bootstrap-images` on, a checkpoint's
//! state is written in the background to `images/<id>/`: the item store as of the
//! checkpoint (`discern_store::ImageSource`), the checkpoint's changeset file, the
//! dimensions document and the index as `index.saved` holds it. A new follower fetches
//! two parts at once — `GET /ws/changeset/<id>/image/store` (the changeset's file and
//! the item store), written to disk, and `.../image/index` (the dimensions and the
//! index), loaded into memory as it arrives — installs the item store into its empty
//! data dir and starts with that index, instead of applying the checkpoint's items one
//! by one.
//!
//! A part is a sequence of files, each `<name> <length>\n` and then its data extents,
//! each `<offset> <length>\n` and that many bytes, ended by `.\n`; `end\n` ends the
//! part. What lies between extents reads as zeros: the item store's file has a hole of
//! a few hundred MB at 1M items, which is neither sent nor written.

use std::fs;
use std::io::{BufRead, Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use discern_dimensions::Dimensions;
use discern_index::persist::{self, Encode, LoadError};
use discern_index::{IndexWriter, Snapshot};
use discern_model::{Error, Result};
use discern_store::{
    sync_dir, write_atomic, ChangesetMeta, DIMENSIONS_FILE, IMAGE_CHANGESET, IMAGE_ITEMS,
    ITEMS_FILE,
};

use crate::background_save::{lower_this_threads_priority, write_index_file, WRITING};
use crate::{process, saved, Config, Engine, WriterGuard};

/// Under the data dir: one directory per finished image, `<id>.tmp` while written.
const IMAGES: &str = "images";
const UNFINISHED: &str = "tmp";

/// The parts of an image, by name, and their files in the order they are sent.
pub const IMAGE_PARTS: [(&str, &[&str]); 2] = [
    ("store", &[IMAGE_CHANGESET, IMAGE_ITEMS]),
    ("index", &[DIMENSIONS_FILE, saved::FILE]),
];

/// Where a follower receives an image's store before installing it.
const RECEIVING: &str = "image.tmp";

/// Bytes read from a file per block sent.
const BLOCK: usize = 1 << 20;

/// One file of an image part, opened (a newer image replacing it meanwhile leaves it
/// readable), with its data extents.
struct PartFile {
    name: &'static str,
    file: fs::File,
    len: u64,
    extents: Vec<(u64, u64)>,
}

/// An image part, ready to send.
pub struct ImagePart {
    files: Vec<PartFile>,
}

impl ImagePart {
    fn heads(&self) -> impl Iterator<Item = (String, Vec<String>)> + '_ {
        self.files.iter().map(|f| {
            (
                format!("{} {}\n", f.name, f.len),
                f.extents
                    .iter()
                    .map(|(o, l)| format!("{o} {l}\n"))
                    .collect(),
            )
        })
    }

    /// The bytes `send` writes.
    pub fn bytes(&self) -> u64 {
        let framing: usize = self
            .heads()
            .map(|(h, e)| h.len() + e.iter().map(String::len).sum::<usize>() + 2)
            .sum();
        let data: u64 = self
            .files
            .iter()
            .flat_map(|f| &f.extents)
            .map(|e| e.1)
            .sum();
        framing as u64 + data + 4
    }

    /// Sends the part through `emit`, its data in blocks of up to 1 MiB.
    pub fn send(self, mut emit: impl FnMut(Vec<u8>) -> std::io::Result<()>) -> std::io::Result<()> {
        let heads: Vec<_> = self.heads().collect();
        for (f, (head, extents)) in self.files.into_iter().zip(heads) {
            emit(head.into_bytes())?;
            for (&(offset, len), line) in f.extents.iter().zip(extents) {
                emit(line.into_bytes())?;
                let mut file = &f.file;
                file.seek(std::io::SeekFrom::Start(offset))?;
                let mut left = len;
                while left > 0 {
                    let mut block = Vec::with_capacity(BLOCK);
                    let n = file.take(left.min(BLOCK as u64)).read_to_end(&mut block)?;
                    if n == 0 {
                        return Err(std::io::Error::other(format!("{} shrank", f.name)));
                    }
                    left -= n as u64;
                    emit(block)?;
                }
            }
            emit(b".\n".to_vec())?;
        }
        emit(b"end\n".to_vec())
    }
}

/// The data extents of `file` (`len` bytes): where its holes are not. The whole file
/// where the file system does not tell.
fn data_extents(file: &fs::File, len: u64) -> Vec<(u64, u64)> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let mut out = Vec::new();
    let mut at = 0u64;
    while at < len {
        // SAFETY: lseek with SEEK_DATA / SEEK_HOLE only moves the offset of `fd`, which
        // `file` keeps open for this call; it reads no memory of ours. (The offset is
        // set again before every read: `ImagePart::send` seeks first.)
        let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            let unsupported = std::io::Error::last_os_error().raw_os_error() != Some(libc::ENXIO);
            if unsupported && out.is_empty() {
                return vec![(0, len)];
            }
            break; // ENXIO: no data after `at`
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return vec![(0, len)];
        }
        let (data, hole) = (data as u64, (hole as u64).min(len));
        if hole > data {
            out.push((data, hole - data));
        }
        at = hole.max(data + 1);
    }
    out
}

impl Engine {
    fn images_dir(&self) -> PathBuf {
        self.store.dir().join(IMAGES)
    }

    /// A follower that installed its primary's image at start: `populate` takes the
    /// image's index, and queries are answered once the first poll has applied what the
    /// primary stored since the image's checkpoint.
    pub fn started_from_image(&self, preloaded: Preloaded) {
        *self.preloaded.lock() = Some(preloaded);
        self.feed.started_from_image();
    }

    /// Removes what image writes a crash cut short left (at open).
    pub(crate) fn remove_unfinished_images(&self) {
        let Ok(entries) = fs::read_dir(self.images_dir()) else {
            return;
        };
        for e in entries.flatten() {
            if e.path().extension().is_some_and(|x| x == UNFINISHED) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }

    /// Right after the checkpoint `meta` was stored, with the writer still held: starts
    /// writing its image in the background, when `bootstrap-images` is on.
    pub(crate) fn start_image(&self, guard: &WriterGuard, meta: &ChangesetMeta) {
        if !self.config.bootstrap_images
            || !self.indexing
            || !self.queryable.load(Ordering::Acquire)
        {
            return;
        }
        let images = self.images_dir();
        let tmp = images.join(format!("{}.{UNFINISHED}", meta.id));
        let done = images.join(&meta.id);
        let started = (|| -> Result<_> {
            let _ = fs::remove_dir_all(&tmp);
            let source = self.store.image_source(&tmp)?;
            if source.meta() != meta {
                return Err(Error::Internal(
                    "the item store's newest changeset is not the checkpoint".into(),
                ));
            }
            let dims = self.dims_doc.load_full();
            let header = self.saved_header(&dims)?;
            Ok((source, dims, header))
        })();
        let (source, dims, header) = match started {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the checkpoint's image");
                let _ = fs::remove_dir_all(&tmp);
                return;
            }
        };
        let snap = self.snapshot.load_full();
        let counts = guard.index.counts();
        let id = meta.id.clone();
        let spawned = std::thread::Builder::new()
            .name("image".into())
            .spawn(move || {
                process::thread_started();
                lower_this_threads_priority();
                // one large file written at a time: an index save waits, or this does
                let _one_at_a_time = WRITING.lock();
                let t0 = Instant::now();
                let written = (|| -> Result<u64> {
                    write_atomic(&tmp.join(DIMENSIONS_FILE), &dims)?;
                    let path = tmp.join(saved::FILE);
                    write_index_file(&path, snap, &counts, &header, Encode::OnThisThread, &|| true)?;
                    let items = source.write_items(&tmp)?;
                    fs::rename(&tmp, &done)?;
                    sync_dir(&images)?;
                    Ok(items)
                })();
                match written {
                    Ok(items) => {
                        tracing::info!(%id, items, ms = t0.elapsed().as_millis() as u64, "bootstrap image written");
                        remove_older_images(&images, &id);
                    }
                    Err(e) => {
                        tracing::warn!(%id, error = %e, "writing the checkpoint's image failed");
                        let _ = fs::remove_dir_all(&tmp);
                    }
                }
                process::release_free_memory();
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the image's thread");
        }
    }

    /// Part `part` (`IMAGE_PARTS`) of the finished image of changeset `id`.
    pub fn image_part(&self, id: &str, part: &str) -> Result<Option<ImagePart>> {
        let Some((_, names)) = IMAGE_PARTS.iter().find(|(p, _)| *p == part) else {
            return Ok(None);
        };
        // (the id names a directory: only an id as engines make them)
        if !discern_store::is_engine_id(id) {
            return Ok(None);
        }
        open_part(&self.images_dir().join(id), names)
    }
}

/// The files `names` in `dir`, opened as a part to send; `None` if one is missing.
fn open_part(dir: &Path, names: &[&'static str]) -> Result<Option<ImagePart>> {
    let mut files = Vec::new();
    for &name in names {
        let file = match fs::File::open(dir.join(name)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let len = file.metadata()?.len();
        let extents = data_extents(&file, len);
        files.push(PartFile {
            name,
            file,
            len,
            extents,
        });
    }
    Ok(Some(ImagePart { files }))
}

/// Removes every finished image but `keep` (images being written are left alone).
fn remove_older_images(images: &Path, keep: &str) {
    let Ok(entries) = fs::read_dir(images) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name();
        if name != keep && path.extension().is_none() {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// The index a follower loaded from its primary's image, for `Engine::populate`.
pub struct Preloaded {
    pub(crate) snap: Snapshot,
    pub(crate) writer: IndexWriter,
    /// The saved index's header: the item store's state and the dimensions document.
    pub(crate) header: Vec<u8>,
}

/// Start-up of a new follower: when `feed` names an engine and the data dir has no item
/// store yet, installs the item store of the primary's image of its newest complete
/// state, if it has one, and returns the image's index. `Ok(None)`: there was nothing to
/// do, or the primary has no such image (the feed then applies that changeset as
/// usual). A failure leaves the data dir without an item store, as it found it.
pub fn bootstrap(config: &Config) -> Result<Option<Preloaded>> {
    let Some(url) = config.feed.as_deref() else {
        return Ok(None);
    };
    let data_dir = &config.data_dir;
    if !crate::feed::names_an_engine(url) || data_dir.join(ITEMS_FILE).exists() {
        return Ok(None);
    }
    let base = url.trim_end_matches('/');
    fs::create_dir_all(data_dir)?;
    let receiving = data_dir.join(RECEIVING);
    let _ = fs::remove_dir_all(&receiving);
    let t0 = Instant::now();
    let r = (|| -> Result<Option<Preloaded>> {
        let client = reqwest::blocking::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(3600))
            .build()
            .map_err(crate::feed::http_err)?;
        let listing = crate::feed::get(&client, &format!("{base}/ws/changeset?full"))?
            .text()
            .map_err(crate::feed::http_err)?;
        let listed = crate::feed::parse_listing(&listing)?;
        // what the feed would start from
        let Some(newest) = listed.iter().rev().find(|l| l.snapshot) else {
            return Ok(None);
        };
        fs::create_dir_all(&receiving)?;
        let part = |name: &str| -> Result<Option<reqwest::blocking::Response>> {
            let url = format!("{base}/ws/changeset/{}/image/{name}", newest.id);
            let resp = client.get(&url).send().map_err(crate::feed::http_err)?;
            if resp.status() == reqwest::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            if !resp.status().is_success() {
                return Err(Error::Unavailable(format!(
                    "feed: GET {url} answered {}",
                    resp.status()
                )));
            }
            Ok(Some(resp))
        };
        // the item store to disk and the index into memory, at once
        let (stored, loaded) = std::thread::scope(|s| {
            let index = s.spawn(|| -> Result<Option<(Vec<u8>, Preloaded)>> {
                match part("index")? {
                    Some(resp) => load_index(resp).map(Some),
                    None => Ok(None),
                }
            });
            let stored = part("store").and_then(|resp| match resp {
                Some(resp) => receive_store(resp, &receiving).map(Some),
                None => Ok(None),
            });
            let loaded = index.join().unwrap_or_else(|_| {
                Err(Error::Internal("loading the image's index panicked".into()))
            });
            (stored, loaded)
        });
        let (Some(bytes), Some((dims_doc, preloaded))) = (stored?, loaded?) else {
            tracing::info!(id = %newest.id, "the primary has no image of its newest complete state: applying it instead");
            return Ok(None);
        };
        let received_ms = t0.elapsed().as_millis() as u64;
        let (meta, items) = discern_store::image_meta(&receiving)?;
        let file_len = fs::metadata(receiving.join(IMAGE_CHANGESET))?.len();
        if meta.id != newest.id
            || meta.md5 != newest.md5
            || meta.length != newest.length
            || file_len != meta.raw_length
            || items != preloaded.snap.len() as u64
        {
            return Err(Error::Unavailable(format!(
                "feed: the image of {} does not hold what the listing says",
                newest.id
            )));
        }
        discern_store::install_image(&receiving, data_dir, &meta, &dims_doc)?;
        tracing::info!(
            id = %meta.id,
            items,
            store_mb = bytes >> 20,
            received_ms,
            ms = t0.elapsed().as_millis() as u64,
            "bootstrapped from the primary's image"
        );
        Ok(Some(preloaded))
    })();
    let _ = fs::remove_dir_all(&receiving);
    r
}

/// The image's dimensions document and its index, loaded as the part arrives.
fn load_index(body: impl Read + Send) -> Result<(Vec<u8>, Preloaded)> {
    let mut r = std::io::BufReader::with_capacity(BLOCK, body);
    let len = expect_file(&mut r, DIMENSIONS_FILE)?;
    let mut dims_doc = Vec::new();
    let mut reader = ExtentReader::new(&mut r, len);
    reader.read_to_end(&mut dims_doc)?;
    reader.finish()?;
    let dims = Dimensions::parse(&dims_doc)
        .map_err(|e| Error::Unavailable(format!("feed: the image's dimensions: {e}")))?;
    let len = expect_file(&mut r, saved::FILE)?;
    let mut header = Vec::new();
    // (the state its header names is the item store's, or `populate` rebuilds: the one
    // place that compares them; here only the dimensions sent with it must match)
    let accept = |h: &[u8]| {
        header = h.to_vec();
        h.iter()
            .position(|&b| b == b'\n')
            .is_some_and(|nl| h[nl + 1..] == dims_doc[..])
    };
    let mut reader = ExtentReader::new(&mut r, len);
    let loaded = persist::load_if(Arc::new(dims), accept, &mut reader, len);
    let (snap, writer) = match loaded {
        Ok(l) => l,
        Err(LoadError::Stale) => {
            return Err(Error::Unavailable(
                "feed: the image's index is not of the dimensions sent with it".into(),
            ))
        }
        Err(LoadError::Corrupt(c)) => {
            return Err(Error::Unavailable(format!("feed: the image's index: {c}")))
        }
        Err(LoadError::Io(e)) => return Err(e.into()),
    };
    reader.finish()?;
    expect_end(&mut r)?;
    Ok((
        dims_doc,
        Preloaded {
            snap,
            writer,
            header,
        },
    ))
}

/// Writes the store part's files into `dir` (holes left as holes), each synced; returns
/// their data's bytes.
fn receive_store(body: impl Read, dir: &Path) -> Result<u64> {
    let mut r = std::io::BufReader::with_capacity(BLOCK, body);
    let mut bytes = 0;
    for name in [IMAGE_CHANGESET, IMAGE_ITEMS] {
        let len = expect_file(&mut r, name)?;
        let mut f = fs::File::create(dir.join(name))?;
        let mut at = 0;
        while let Some((offset, n)) = extent_head(&mut r, at, len)? {
            f.seek(std::io::SeekFrom::Start(offset))?;
            if std::io::copy(&mut (&mut r).take(n), &mut f)? != n {
                return Err(cut(name));
            }
            at = offset + n;
            bytes += n;
        }
        f.set_len(len)?;
        f.sync_all()?;
    }
    expect_end(&mut r)?;
    Ok(bytes)
}

fn cut(what: &str) -> Error {
    Error::Unavailable(format!("feed: the image is cut short or malformed: {what}"))
}

fn line(r: &mut impl BufRead) -> Result<String> {
    let mut line = String::new();
    r.take(64).read_line(&mut line)?;
    match line.strip_suffix('\n') {
        Some(l) => Ok(l.to_string()),
        None => Err(cut("a line")),
    }
}

/// Reads a file's head, which must name `name`; returns its length.
fn expect_file(r: &mut impl BufRead, name: &str) -> Result<u64> {
    let l = line(r)?;
    match l.split_once(' ') {
        Some((n, len)) if n == name => len.parse().map_err(|_| cut(&l)),
        _ => Err(cut(&format!("{l:?} where {name} was due"))),
    }
}

fn expect_end(r: &mut impl BufRead) -> Result<()> {
    match line(r)?.as_str() {
        "end" => Ok(()),
        l => Err(cut(&format!("{l:?} where the end was due"))),
    }
}

/// The next extent's head of a file of `len` bytes read up to `at`, or `None` at its
/// end. Extents come in order and within the file.
fn extent_head(r: &mut impl BufRead, at: u64, len: u64) -> Result<Option<(u64, u64)>> {
    let l = line(r)?;
    if l == "." {
        return Ok(None);
    }
    let parsed = l
        .split_once(' ')
        .and_then(|(o, n)| Some((o.parse::<u64>().ok()?, n.parse::<u64>().ok()?)));
    match parsed {
        Some((o, n)) if o >= at && o.checked_add(n).is_some_and(|end| end <= len) => {
            Ok(Some((o, n)))
        }
        _ => Err(cut(&format!("extent {l:?}"))),
    }
}

/// A file's content as sent in extents, its holes read as zeros.
struct ExtentReader<'a, R> {
    r: &'a mut R,
    len: u64,
    at: u64,
    /// The current extent: where it starts and ends.
    extent: Option<(u64, u64)>,
    ended: bool,
}

impl<'a, R: BufRead> ExtentReader<'a, R> {
    fn new(r: &'a mut R, len: u64) -> Self {
        ExtentReader {
            r,
            len,
            at: 0,
            extent: None,
            ended: false,
        }
    }

    /// Reads what is left of the file's extents; the reader must have read it all.
    fn finish(mut self) -> Result<()> {
        let mut rest = Vec::new();
        self.read_to_end(&mut rest)?;
        if rest.iter().any(|&b| b != 0) || !self.ended {
            return Err(cut("a file is longer than what was read of it"));
        }
        Ok(())
    }
}

impl<R: BufRead> Read for ExtentReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let to_io = |e: Error| std::io::Error::other(e.to_string());
        loop {
            if self.extent.is_none() && !self.ended {
                match extent_head(self.r, self.at, self.len).map_err(to_io)? {
                    Some((o, n)) => self.extent = Some((o, o + n)),
                    None => self.ended = true,
                }
            }
            let (start, end) = match self.extent {
                Some(e) => e,
                None => (self.len, self.len),
            };
            if self.at < start {
                // a hole
                let n = ((start - self.at) as usize).min(buf.len());
                buf[..n].fill(0);
                self.at += n as u64;
                return Ok(n);
            }
            if self.at == end {
                if self.extent.take().is_none() {
                    return Ok(0);
                }
                continue;
            }
            let want = ((end - self.at) as usize).min(buf.len());
            let n = self.r.read(&mut buf[..want])?;
            if n == 0 {
                return Err(std::io::Error::other(cut("an extent").to_string()));
            }
            self.at += n as u64;
            return Ok(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(part: ImagePart) -> Vec<u8> {
        let bytes = part.bytes();
        let mut out = Vec::new();
        part.send(|b| {
            out.extend_from_slice(&b);
            Ok(())
        })
        .unwrap();
        assert_eq!(out.len() as u64, bytes, "Content-Length");
        out
    }

    /// A store part with a sparse item store: what is received reads the same, byte for
    /// byte, keeps its hole, and every part of it cut short, or an extent out of order
    /// or past the file's end, is an error.
    #[test]
    fn a_store_part_round_trips_with_its_holes() {
        let from = tempfile::tempdir().unwrap();
        fs::write(from.path().join(IMAGE_CHANGESET), b"changeset bytes").unwrap();
        let items = fs::File::create(from.path().join(IMAGE_ITEMS)).unwrap();
        let len = 64 << 20;
        items.set_len(len).unwrap();
        for (at, what) in [
            (0u64, &b"head"[..]),
            (40 << 20, b"middle"),
            (len - 4, b"tail"),
        ] {
            use std::os::unix::fs::FileExt;
            items.write_all_at(what, at).unwrap();
        }
        let part = open_part(from.path(), IMAGE_PARTS[0].1).unwrap().unwrap();
        let extents = part.files[1].extents.clone();
        assert!(extents.len() >= 2, "no hole found: {extents:?}");
        let wire = sent(part);
        assert!(
            wire.len() < 1 << 20,
            "a hole was sent: {} bytes",
            wire.len()
        );

        let to = tempfile::tempdir().unwrap();
        receive_store(&wire[..], to.path()).unwrap();
        for name in [IMAGE_CHANGESET, IMAGE_ITEMS] {
            assert!(
                fs::read(from.path().join(name)).unwrap()
                    == fs::read(to.path().join(name)).unwrap(),
                "{name} differs"
            );
        }
        use std::os::unix::fs::MetadataExt;
        let received = fs::metadata(to.path().join(IMAGE_ITEMS)).unwrap();
        assert!(received.blocks() * 512 < 4 << 20, "the hole was written");

        for end in (0..wire.len()).step_by(7) {
            let dir = tempfile::tempdir().unwrap();
            assert!(
                receive_store(&wire[..end], dir.path()).is_err(),
                "cut at {end}"
            );
        }
        let text = String::from_utf8_lossy(&wire).into_owned();
        let (o, n) = extents[1];
        for bad in [format!("0 {n}\n"), format!("{o} {}\n", len)] {
            let wrong = text.replacen(&format!("{o} {n}\n"), &bad, 1);
            let dir = tempfile::tempdir().unwrap();
            assert!(
                receive_store(wrong.as_bytes(), dir.path()).is_err(),
                "{bad:?}"
            );
        }
    }

    /// A file read through its extents is its bytes, holes as zeros, and must be read to
    /// its end.
    #[test]
    fn extents_read_as_the_file() {
        let wire = b"dims 12\n1 2\nab7 3\ncde.\nend\n".to_vec();
        let mut r = &wire[..];
        let len = expect_file(&mut r, "dims").unwrap();
        let mut got = Vec::new();
        let mut reader = ExtentReader::new(&mut r, len);
        reader.read_to_end(&mut got).unwrap();
        reader.finish().unwrap();
        assert_eq!(got, b"\0ab\0\0\0\0cde\0\0");
        expect_end(&mut r).unwrap();

        let mut r = &wire[..];
        let len = expect_file(&mut r, "dims").unwrap();
        let mut five = [0u8; 5];
        let mut reader = ExtentReader::new(&mut r, len);
        reader.read_exact(&mut five).unwrap();
        assert_eq!(&five, b"\0ab\0\0");
        assert!(reader.finish().is_err(), "data left unread");
        for cut_at in 0..wire.len() - 5 {
            let mut r = &wire[..cut_at];
            let read = expect_file(&mut r, "dims").and_then(|len| {
                let mut v = Vec::new();
                let mut reader = ExtentReader::new(&mut r, len);
                reader.read_to_end(&mut v)?;
                reader.finish()
            });
            assert!(read.is_err(), "cut at {cut_at}");
        }
    }

    /// A finished image is served under any id engines make — a replicated id has
    /// dashes — and under nothing that could name a directory elsewhere.
    #[test]
    fn image_parts_are_found_by_engine_ids_only() {
        let d = tempfile::tempdir().unwrap();
        let e = crate::tests::engine(d.path());
        let id = "0a1b2c3d-4e5f";
        let dir = e.images_dir().join(id);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(IMAGE_CHANGESET), b"changeset").unwrap();
        fs::write(dir.join(IMAGE_ITEMS), b"items").unwrap();
        let store = IMAGE_PARTS[0].0;
        assert!(e.image_part(id, store).unwrap().is_some());
        assert!(e.image_part(id, "no such part").unwrap().is_none());
        // a directory an id could reach outside the images: not served
        fs::write(e.images_dir().join(IMAGE_CHANGESET), b"changeset").unwrap();
        fs::write(e.images_dir().join(IMAGE_ITEMS), b"items").unwrap();
        for bad in [".", "..", "", "0a1b/../0a1b2c3d-4e5f"] {
            assert!(e.image_part(bad, store).unwrap().is_none(), "{bad:?}");
        }
    }
}
