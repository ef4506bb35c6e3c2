//! Checkpoints in object stores as interop stores (issue 15): the dispatcher that opens whatever a URL names
//! ([`dispatch`], [`open_location`]; [`crate::interop::open_any`] sends URLs there): a native
//! file, a safetensors file, a TensorFlow checkpoint (by its prefix or its `.index`), or a
//! sharded paramdex checkpoint, detected by name where the name says, else by content, with as
//! few requests as the formats allow (docs/remote.md gives each format's request pattern).

use std::ops::Range;
use std::sync::Arc;

use crate::error::{Error, RemoteProblem, Result};
use crate::interop::safetensors::{self, RemoteSafetensors, RemoteSafetensorsOptions};
use crate::interop::store::TensorStore;
use crate::remote::{
    object_data_opener, ObjectLocation, ObjectRange, RangeRead, ReadAt, RemoteOptions,
    RemoteReader, RemoteSharded, RequestStats,
};

/// How [`open_location`] opens what a URL names.
#[derive(Clone, Debug)]
pub struct UrlOptions {
    /// How a native file is read; its [`RemoteOptions::tail_bytes`] is also the size of the
    /// first read of an object whose name does not say what it is, and of a `.index`.
    pub native: RemoteOptions,
    /// How a safetensors file is read (the size of its first read).
    pub safetensors: RemoteSafetensorsOptions,
    /// Most bytes of a TensorFlow checkpoint's `.index` read into memory (the whole index is
    /// read at open): a larger one is refused before it is read.
    pub max_tf_index_bytes: u64,
    /// Most bytes of an object read whole into memory to be parsed by a reader that needs all
    /// of it (a `torch.save` zip, a Paddle `.pdparams`/`.pdopt` pickle, a torch DCP
    /// `.metadata` or `.distcp`): a larger one is refused before it is read.
    pub max_whole_object_bytes: u64,
}

impl Default for UrlOptions {
    fn default() -> Self {
        UrlOptions {
            native: RemoteOptions::default(),
            safetensors: RemoteSafetensorsOptions::default(),
            max_tf_index_bytes: 1 << 30,
            max_whole_object_bytes: MAX_WHOLE_OBJECT_BYTES,
        }
    }
}

/// The default [`UrlOptions::max_whole_object_bytes`]: 4 GiB.
pub const MAX_WHOLE_OBJECT_BYTES: u64 = 4 << 30;

/// Opens what `url` names (`s3://bucket/key`, `file:///path`), resolved with
/// [`crate::remote::resolve`] (the `AWS_*` environment and the [`crate::remote::S3Settings`]
/// in force), with default [`UrlOptions`]. See [`open_location`].
pub(crate) fn dispatch(url: &str) -> Result<Box<dyn TensorStore>> {
    let config = crate::remote::RemoteConfig::from_env()?;
    let opts = UrlOptions {
        native: RemoteOptions::with_config(&config),
        ..UrlOptions::default()
    };
    open_location(crate::remote::resolve_with(url, &config)?, &opts)
}

/// The "subdirectories" of the directory URL `url` (the common prefixes one `/` below it, in
/// name order; hidden ones, starting with `.`, left aside), as URLs: what an input that names
/// no object nor checkpoint is looked into, one level down, as a local directory is.
pub(crate) fn subdirectories(url: &str) -> Result<Vec<String>> {
    let dir = url.trim_end_matches('/');
    let loc = crate::remote::resolve(dir)?;
    let listed = loc
        .runtime
        .block_on(loc.store.list_with_delimiter(Some(&loc.path)))
        .map_err(|e| crate::remote::remote_error(dir, e))?;
    let mut subdirs: Vec<String> = listed
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename())
        .filter(|n| !n.starts_with('.'))
        .map(|n| format!("{dir}/{n}"))
        .collect();
    subdirs.sort();
    Ok(subdirs)
}

/// The bytes an open read of an object brought (from `start`), served again without a request:
/// the first read of an object decides its format, and the reader of that format finds what it
/// needs (a footer, a header) already there.
#[derive(Debug)]
struct FirstRead {
    inner: Arc<ObjectRange>,
    start: u64,
    bytes: Vec<u8>,
    /// The object's first bytes, kept from the first read that started at 0 when the held
    /// bytes are its tail: the native open's probe of a file without a footer (does it start
    /// with a paramdex record?) reads them, and the next format's test of the start (is it
    /// safetensors?) is then served without a request more.
    front: std::sync::OnceLock<Vec<u8>>,
}

impl FirstRead {
    /// The object's first bytes, if held.
    fn head(&self) -> Option<&[u8]> {
        (self.start == 0).then_some(&self.bytes[..])
    }
}

impl ReadAt for FirstRead {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn location(&self) -> &str {
        self.inner.location()
    }

    fn read(&self, range: Range<u64>) -> Result<Vec<u8>> {
        let end = self.start + self.bytes.len() as u64;
        if range.start >= self.start && range.end <= end && range.start <= range.end {
            let a = usize::try_from(range.start - self.start).expect("inside the held bytes");
            let b = usize::try_from(range.end - self.start).expect("inside the held bytes");
            return Ok(self.bytes[a..b].to_vec());
        }
        if let Some(front) = self.front.get() {
            if range.start <= range.end && range.end <= front.len() as u64 {
                let a = usize::try_from(range.start).expect("inside the first bytes");
                let b = usize::try_from(range.end).expect("inside the first bytes");
                return Ok(front[a..b].to_vec());
            }
        }
        let bytes = self.inner.read(range.clone())?;
        // Only a probe's few hundred KiB are kept, the first time (a whole-object read of a
        // load is not copied again).
        if range.start == 0 && bytes.len() as u64 == range.end && bytes.len() <= 1 << 20 {
            let _ = self.front.set(bytes.clone());
        }
        Ok(bytes)
    }
}

impl RangeRead for FirstRead {
    fn stats(&self) -> RequestStats {
        self.inner.stats()
    }

    // Parallel loads go to the object's own concurrent reads (the held bytes are a few
    // hundred KiB of index: a load asks for records).
    fn read_parts(
        &self,
        parts: &mut dyn Iterator<Item = crate::remote::ReadPart>,
        how: crate::remote::Parallelism,
        done: &mut dyn FnMut(crate::remote::ReadPart) -> Result<()>,
    ) -> Result<()> {
        self.inner.read_parts(parts, how, done)
    }
}

/// The first read of `loc`: its last `n` bytes.
fn open_tail(loc: &ObjectLocation, n: u64) -> Result<FirstRead> {
    let obj = ObjectRange::open(
        loc.store.clone(),
        loc.path.clone(),
        loc.url.clone(),
        loc.runtime.clone(),
        n,
    )?;
    // Served from the open's own read: no request.
    let bytes = obj.tail(n)?;
    Ok(FirstRead {
        start: obj.len() - bytes.len() as u64,
        inner: Arc::new(obj),
        bytes,
        front: std::sync::OnceLock::new(),
    })
}

/// The first read of `loc`: its first `n` bytes (all of them, if it is shorter).
fn open_head(loc: &ObjectLocation, n: u64) -> Result<FirstRead> {
    let (obj, bytes) = ObjectRange::open_range(
        loc.store.clone(),
        loc.path.clone(),
        loc.url.clone(),
        loc.runtime.clone(),
        0..n.max(9),
    )?;
    Ok(FirstRead {
        inner: Arc::new(obj),
        start: 0,
        bytes,
        front: std::sync::OnceLock::new(),
    })
}

/// Opens what `loc` names, by its name where the name says, else by content:
///
/// * `KEY.index`: the index of a checkpoint at prefix `KEY`: a TensorFlow checkpoint, or a
///   sharded paramdex checkpoint (a paramdex header in the index); a native single file so
///   named is read as one. `KEY.data-SSSSS-of-NNNNN`: the data object of a checkpoint at
///   prefix `KEY` (opened by its `.index`).
/// * any other key naming an object: a native paramdex file (the table magic ends it and its
///   header is a paramdex one), or a safetensors file (an 8-byte little-endian header length,
///   then `{`). A key ending in `.safetensors` is read from its start first (one request holds
///   the header length and, usually, the header), any other from its end (one request holds a
///   native file's footer and, usually, its index block), and the other end only when the
///   first read did not decide.
/// * a key naming no object, where `KEY.index` is one: the checkpoint at prefix `KEY`, as
///   above. Neither is [`RemoteProblem::NotFound`] naming both URLs, unless `KEY/.metadata` is
///   a pickle: then `KEY` is a torch DCP checkpoint, read as a local directory is (so is
///   `KEY/.metadata` named itself); or `KEY` holds a Hugging Face layout.
/// * an object that is none of these is [`Error::UnrecognizedFormat`], saying what it looks
///   like where it is recognised (a `torch.save` zip, a pickle, a DCP `.distcp`), as a local
///   file would.
pub fn open_location(loc: ObjectLocation, opts: &UrlOptions) -> Result<Box<dyn TensorStore>> {
    let key = loc.path.as_ref().to_string();
    let name = key.rsplit('/').next().unwrap_or_default().to_string();
    // A torch DCP checkpoint's `.metadata`: the checkpoint under its prefix, as a local
    // `.metadata` file opens its directory.
    if name == super::torch::dcp::METADATA_FILE {
        if let Some(dir) = loc.without_suffix(&format!("/{name}")) {
            let held = open_head(&loc, 2)?;
            if held
                .head()
                .is_some_and(|h| super::foreign::pickle_protocol(h).is_some())
            {
                return open_dcp(&dir, held, opts);
            }
        }
    }
    if super::hf::is_index_name(&name) {
        return open_hf_index(&loc, &name, opts).map(|s| Box::new(s) as Box<dyn TensorStore>);
    }
    if let Some(prefix) = loc.without_suffix(".index") {
        return open_checkpoint(&prefix, loc, opts, true);
    }
    if let Some(prefix) = data_object_prefix(&loc) {
        let index = prefix.with_suffix(".index");
        return open_checkpoint(&prefix, index, opts, false);
    }
    let by_name = loc.path.as_ref().ends_with(".safetensors");
    let first = if by_name {
        open_head(&loc, opts.safetensors.head_bytes)
    } else {
        open_tail(&loc, opts.native.tail_bytes)
    };
    let held = match first {
        Ok(h) => h,
        Err(Error::Remote {
            problem: RemoteProblem::NotFound,
            ..
        }) if !by_name => {
            let index = loc.with_suffix(".index");
            return match open_checkpoint(&loc, index, opts, false) {
                Err(Error::Remote {
                    problem: RemoteProblem::NotFound,
                    url,
                    source,
                    ..
                }) if url == format!("{}.index", loc.url) => match dcp_at(&loc, opts) {
                    Some(r) => r,
                    None => match hf_at(&loc, opts)
                        .or_else(|| paddle_at(&loc, opts))
                        .or_else(|| paddle_dir_at(&loc, opts))
                    {
                        Some(r) => r,
                        None => Err(Error::Remote {
                            problem: RemoteProblem::NotFound,
                            detail: format!(
                            "no such object, and no checkpoint with this prefix ({url} does not \
                         exist either)"
                        ),
                            url: loc.url,
                            source,
                        }),
                    },
                },
                r => r,
            };
        }
        Err(e) => return Err(e),
    };
    open_object(&loc, held, opts)
}

/// The torch DCP checkpoint at `loc`, a key that names no object nor checkpoint prefix, when
/// its "directory" holds `.metadata` starting like a pickle, as `FileSystemWriter` writes it
/// (one request to see, made only on the way to a not-found error). `None`: it does not.
fn dcp_at(loc: &ObjectLocation, opts: &UrlOptions) -> Option<Result<Box<dyn TensorStore>>> {
    let mut dir = loc.clone();
    dir.url = dir.url.trim_end_matches('/').to_string();
    let held = open_head(&dir.with_suffix("/.metadata"), 2).ok()?;
    super::foreign::pickle_protocol(held.head()?)?;
    Some(open_dcp(&dir, held, opts))
}

/// The torch DCP checkpoint under the prefix `dir` whose `.metadata` object `meta` is, parsed
/// and checked by the local reader ([`super::torch::dcp::DcpStore`]): `.metadata` read whole
/// (at most [`super::torch::dcp::MAX_METADATA_BYTES`]), each data file's length asked for
/// once at open (a HEAD), its bytes read whole when first needed (at most
/// [`UrlOptions::max_whole_object_bytes`], checked before the read).
fn open_dcp(
    dir: &ObjectLocation,
    meta: FirstRead,
    opts: &UrlOptions,
) -> Result<Box<dyn TensorStore>> {
    use super::torch::dcp::{DcpStore, MAX_METADATA_BYTES};
    let bytes = whole(&meta, MAX_METADATA_BYTES)?;
    // A failure other than "no such object" while asking for a length is the error, not a
    // missing data file.
    let failed = std::cell::RefCell::new(None);
    let len = |name: &str| {
        let file = dir.with_suffix(&format!("/{name}"));
        match dir
            .runtime
            .block_on(object_store::ObjectStoreExt::head(&*dir.store, &file.path))
        {
            Ok(m) => Some(m.size),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => {
                failed
                    .borrow_mut()
                    .get_or_insert(crate::remote::remote_error(&file.url, e));
                None
            }
        }
    };
    let (at, max) = (dir.clone(), opts.max_whole_object_bytes);
    let fetch = Box::new(move |name: &str| {
        let held = open_head(&at.with_suffix(&format!("/{name}")), 9)?;
        Ok(crate::native::Source::Memory(whole(&held, max)?.into()))
    });
    let store = DcpStore::from_fetched(&bytes, std::path::PathBuf::from(&dir.url), &len, fetch);
    if let Some(e) = failed.into_inner() {
        return Err(e);
    }
    Ok(Box::new(store?))
}

/// The Hugging Face sharded checkpoint whose index is the object `loc` (named `name`): the
/// index read whole (one request, at most [`super::hf::MAX_INDEX_BYTES`]), each shard the
/// weight map names opened beside it by [`open_location`] (the same detection as any URL).
fn open_hf_index(
    loc: &ObjectLocation,
    name: &str,
    opts: &UrlOptions,
) -> Result<super::hf::ShardedStore> {
    let held = open_head(loc, super::hf::MAX_INDEX_BYTES)?;
    crate::error::ensure_within(
        "bytes of a Hugging Face index",
        held.len(),
        super::hf::MAX_INDEX_BYTES,
        None,
    )?;
    let bytes = held.head().unwrap_or_default();
    let index = super::hf::parse_index(bytes, &loc.url)?;
    // The shards beside the index: its key with the last component replaced.
    let dir = loc.without_suffix(&format!("/{name}"));
    super::hf::ShardedStore::new(&loc.url, index, &|shard| match &dir {
        Some(d) => open_location(d.with_suffix(&format!("/{shard}")), opts),
        None => Err(Error::Unsupported(format!(
            "{}: an index at the root of a bucket; put the checkpoint under a prefix",
            loc.url
        ))),
    })
}

/// The Hugging Face layout under `loc`, a key naming no object nor checkpoint prefix: the
/// sharded checkpoint of `KEY/model.safetensors.index.json` (or `pytorch_model.bin.index.json`),
/// else `KEY/model.safetensors` or `KEY/pytorch_model.bin` (made only on the way to a not-found error: one request per
/// name tried). `None` when there is none.
fn hf_at(loc: &ObjectLocation, opts: &UrlOptions) -> Option<Result<Box<dyn TensorStore>>> {
    let found = |r: &Result<Box<dyn TensorStore>>| {
        !matches!(
            r,
            Err(Error::Remote {
                problem: RemoteProblem::NotFound,
                ..
            })
        )
    };
    for n in super::hf::INDEX_FILES {
        let child = loc.with_suffix(&format!("/{n}"));
        let r = open_hf_index(&child, n, opts).map(|s| Box::new(s) as Box<dyn TensorStore>);
        if found(&r) {
            return Some(r);
        }
    }
    // A single model file: model.safetensors, else pytorch_model.bin.
    for n in super::hf::MODEL_FILES {
        let child = loc.with_suffix(&format!("/{n}"));
        // The object itself, never its prefix fallbacks (which would come back here).
        let r = if n.ends_with(".safetensors") {
            open_head(&child, opts.safetensors.head_bytes)
        } else {
            open_tail(&child, opts.native.tail_bytes)
        }
        .and_then(|held| open_object(&child, held, opts));
        if found(&r) {
            return Some(r);
        }
    }
    None
}

/// The prefix of a checkpoint's data object `PREFIX.data-SSSSS-of-NNNNN`, if `loc` names one.
fn data_object_prefix(loc: &ObjectLocation) -> Option<ObjectLocation> {
    let key = loc.path.as_ref();
    match crate::native::split_data_name(key.as_bytes())? {
        // The prefix ends where `.data-` starts: an ASCII boundary of `key`.
        (prefix, crate::native::Sibling::Data { pending: false, .. }) => {
            loc.without_suffix(key.get(prefix.len()..)?)
        }
        _ => None,
    }
}

/// What the object at `loc` is, from its first read `held`: a native file, a safetensors file,
/// a `torch.save` zip or Paddle dygraph pickle, or a Paddle model's file, merged file or
/// tensor file.
fn open_object(
    loc: &ObjectLocation,
    held: FirstRead,
    opts: &UrlOptions,
) -> Result<Box<dyn TensorStore>> {
    let len = held.len();
    let url = held.location().to_string();
    if let Some(head) = held.head().filter(|h| safetensors::starts_like(h)) {
        let head = head.to_vec();
        return Ok(Box::new(RemoteSafetensors::open_with_head(
            Arc::new(held),
            head,
            opts.safetensors,
        )?));
    }
    let held = Arc::new(held);
    // The tail is held (read first), or the head was read and is not safetensors: the native
    // reader reads the tail if it must.
    let native = RemoteReader::open(held.clone(), opts.native.clone());
    let not_native = match native {
        Ok(r) => return Ok(Box::new(r)),
        Err(Error::UnrecognizedFormat { detail, .. }) => detail,
        Err(e) => return Err(e),
    };
    let head = match held.head() {
        Some(head) => head.to_vec(),
        None => {
            // Read from the end first, and not a native file: its start says whether it is a
            // safetensors file.
            let head = held.read(0..opts.safetensors.head_bytes.max(9).min(len))?;
            if safetensors::starts_like(&head) {
                return Ok(Box::new(RemoteSafetensors::open_with_head(
                    held,
                    head,
                    opts.safetensors,
                )?));
            }
            head
        }
    };
    // A torch.save zip or a Paddle dygraph pickle: read whole, then detected and opened by the
    // local readers' own tests (one more request; none when the first read held it all).
    if let Some(store) = open_whole(&held, &head, opts)? {
        return Ok(store);
    }
    // A Paddle model's parameters or program, a merged file or a tensor file: the files it
    // needs read whole, detected by the local rules (`paddle::fetched`).
    let name = url.rsplit('/').next().unwrap_or_default();
    let this = || whole_source(&held, opts);
    let sibling = siblings(loc, opts);
    if let Some(store) = super::paddle::fetched::open_file(&url, name, &head, &this, &sibling)? {
        return Ok(store);
    }
    // Something paramdex does not read: say what it looks like, as for a local file.
    let name = url.rsplit('/').next().unwrap_or_default();
    let head = &head[..head.len().min(super::foreign::HEAD_LEN)];
    if let Some(kind) = super::foreign::looks_like(name, head) {
        return Err(super::foreign::not_recognized(url, kind, head));
    }
    Err(Error::UnrecognizedFormat {
        path: url.clone(),
        looks_like: None,
        detail: format!(
            "neither a native paramdex file ({not_native}) nor a safetensors file; a TensorFlow \
             or sharded checkpoint is named by its prefix (PREFIX, with PREFIX.index beside it) \
             or by {url}.index"
        ),
    })
}

/// The Paddle model at prefix `loc`, a key naming no object nor checkpoint (`KEY.pdiparams`
/// with `KEY.json` or `KEY.pdmodel`, or a program alone), made only on the way to a not-found
/// error (one request per name tried). `None` when there is none.
fn paddle_at(loc: &ObjectLocation, opts: &UrlOptions) -> Option<Result<Box<dyn TensorStore>>> {
    let name = loc.path.as_ref().rsplit('/').next().unwrap_or_default();
    if name.is_empty() {
        return None;
    }
    super::paddle::fetched::open_prefix(&loc.url, name, &siblings(loc, opts)).transpose()
}

/// The Paddle input under the prefix `KEY/` of `loc`, a key naming no object nor checkpoint:
/// its one model, or its per-variable files (`paddle::fetched::open_dir`), made only on the way
/// to a not-found error (one listing; then each file read whole, at most
/// [`UrlOptions::max_whole_object_bytes`] in all, checked before the reads). `None` when
/// nothing is under it, or nothing Paddle reads.
fn paddle_dir_at(loc: &ObjectLocation, opts: &UrlOptions) -> Option<Result<Box<dyn TensorStore>>> {
    use futures_util::TryStreamExt;
    let key = loc.path.as_ref();
    if key.is_empty() {
        return None;
    }
    let prefix = crate::remote::object_path(key);
    // A probe on the way to a not-found error: a listing the store refuses (a key allowed
    // to be read but not its bucket listed) leaves that error as the answer.
    let listed: Vec<object_store::ObjectMeta> = loc
        .runtime
        .block_on(loc.store.list(Some(&prefix)).try_collect())
        .ok()?;
    let strip = format!("{key}/");
    let mut files: Vec<(String, u64)> = listed
        .iter()
        .filter_map(|m| {
            let n = m.location.as_ref().strip_prefix(&strip)?;
            Some((n.to_string(), m.size))
        })
        .collect();
    if files.is_empty() {
        return None;
    }
    files.sort();
    let total = files.iter().fold(0u64, |t, (_, l)| t.saturating_add(*l));
    if let Err(e) = crate::error::ensure_within(
        "bytes of the objects under a prefix read whole into memory (UrlOptions::max_whole_object_bytes)",
        total,
        opts.max_whole_object_bytes,
        None,
    ) {
        return Some(Err(e));
    }
    let dir = loc.url.trim_end_matches('/').to_string();
    let read = |n: &str| {
        let held = open_head(&loc.with_suffix(&format!("/{n}")), opts.native.tail_bytes)?;
        whole_source(&held, opts)
    };
    super::paddle::fetched::open_dir(&dir, &files, &read).transpose()
}

/// Reads an object beside `loc` (the same "directory") by its name, whole (at most
/// [`UrlOptions::max_whole_object_bytes`], checked before the read): `None` when there is no
/// such object.
fn siblings<'a>(
    loc: &'a ObjectLocation,
    opts: &'a UrlOptions,
) -> impl Fn(&str) -> Result<Option<crate::native::Source>> + 'a {
    move |other| match open_head(&loc.sibling(other), opts.native.tail_bytes) {
        Ok(held) => whole_source(&held, opts).map(Some),
        Err(Error::Remote {
            problem: RemoteProblem::NotFound,
            ..
        }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The whole object of `held` (its first read, of a native tail's size: a small object is
/// held by it, a larger one read in one more request) as bytes in memory, at most
/// [`UrlOptions::max_whole_object_bytes`] (checked before the read).
fn whole_source(held: &FirstRead, opts: &UrlOptions) -> Result<crate::native::Source> {
    Ok(crate::native::Source::Memory(
        whole(held, opts.max_whole_object_bytes)?.into(),
    ))
}

/// The object of `held` (whose first bytes are `head`) opened as a `torch.save` zip or a
/// Paddle dygraph pickle when its first bytes say it may be one: read whole (at most
/// [`UrlOptions::max_whole_object_bytes`], checked before the read) and handed to the same
/// detection as a local file's ([`super::torch::open_source`],
/// [`super::paddle::dygraph::open_source`]). `None`: neither claims it, or it is a DCP
/// `.distcp` (its checkpoint is the input).
fn open_whole(
    held: &FirstRead,
    head: &[u8],
    opts: &UrlOptions,
) -> Result<Option<Box<dyn TensorStore>>> {
    let url = held.location().to_string();
    // A DCP data file alone is read through its checkpoint (its `.metadata`), as locally.
    if url.ends_with(".distcp") {
        return Ok(None);
    }
    let zip = super::torch::zip::starts_like(&head[..head.len().min(4)]);
    let pickle = super::foreign::pickle_protocol(head).is_some();
    if !zip && !pickle {
        return Ok(None);
    }
    let bytes = whole(held, opts.max_whole_object_bytes)?;
    let source = crate::native::Source::Memory(bytes.into());
    let path = std::path::PathBuf::from(&url);
    if zip {
        super::torch::open_source(source, path)
    } else {
        super::paddle::dygraph::open_source(source, path)
    }
}

/// All the bytes of the object `obj` in one read (served from memory when its first read held
/// them), refused before the read when it is longer than `max` bytes.
fn whole(obj: &dyn ReadAt, max: u64) -> Result<Vec<u8>> {
    let len = obj.len();
    crate::error::ensure_within(
        "bytes of an object read whole into memory (UrlOptions::max_whole_object_bytes)",
        len,
        max,
        None,
    )?;
    obj.read(0..len)
}

/// The largest `.index` read whole at once when its first read did not hold it all: a
/// TensorFlow checkpoint's reader needs all of it, and the index of a sharded paramdex
/// checkpoint this small costs no more read whole than block by block.
const WHOLE_INDEX_AT_ONCE: u64 = 8 << 20;

/// The checkpoint at `prefix` whose index is `index`: a sharded paramdex checkpoint, a
/// TensorFlow checkpoint, or (`named_index`: the URL named the `.index` itself) a native
/// single file, as a local `PREFIX.index` file would be read.
fn open_checkpoint(
    prefix: &ObjectLocation,
    index: ObjectLocation,
    opts: &UrlOptions,
    named_index: bool,
) -> Result<Box<dyn TensorStore>> {
    let mut held = open_tail(&index, opts.native.tail_bytes)?;
    if held.start > 0 && held.len() <= WHOLE_INDEX_AT_ONCE.min(opts.max_tf_index_bytes) {
        // Not held whole, but small: the rest now, in one request, rather than the header's
        // block first and the rest after it (a TensorFlow reader needs all of it).
        held.bytes = super::tf::remote::whole_object(
            &*held.inner,
            held.start,
            &held.bytes,
            opts.max_tf_index_bytes,
        )?;
        held.start = 0;
    }
    let held = Arc::new(held);
    match RemoteReader::open(held.clone(), opts.native.clone()) {
        Ok(r) if named_index => return Ok(Box::new(r)),
        // A native single file at PREFIX.index is also a TensorFlow checkpoint (`export_tf`):
        // read as one, as a local prefix is.
        Ok(_) => {}
        // The index of a sharded paramdex checkpoint.
        Err(Error::Unsupported(_)) => return open_sharded_at(prefix, held, opts.native.clone()),
        // Not a paramdex header: a TensorFlow checkpoint's index, or not an index at all (then
        // the TensorFlow reader says what is wrong with it).
        Err(Error::UnrecognizedFormat { .. } | Error::Corrupt { .. }) => {}
        Err(e) => return Err(e),
    }
    let bytes =
        super::tf::remote::whole_object(&*held, held.start, &held.bytes, opts.max_tf_index_bytes)?;
    Ok(Box::new(super::tf::remote::open_at(
        &index,
        prefix.path.as_ref(),
        &prefix.url,
        bytes,
    )?))
}

/// Opens the sharded checkpoint at `prefix` as a store, from its index object `index` (already
/// opened by the URL dispatcher, so its first read is not made twice); each data object
/// `PREFIX.data-k-of-N` is opened when first read (see [`RemoteSharded::shard`]).
pub(crate) fn open_sharded_at(
    prefix: &ObjectLocation,
    index: Arc<dyn RangeRead>,
    opts: RemoteOptions,
) -> Result<Box<dyn TensorStore>> {
    let open_data = object_data_opener(
        prefix.store.clone(),
        prefix.runtime.clone(),
        prefix.path.as_ref(),
        &prefix.url,
        opts.tail_bytes,
    );
    Ok(Box::new(RemoteSharded::open(
        index,
        prefix.url.clone(),
        open_data,
        opts,
    )?))
}
