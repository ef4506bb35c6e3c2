//! Inputs in object stores (issue 15): what a URL names, resolved once at the edge
//! ([`ObjectInput::resolve`]: an object with its first read held, a checkpoint by its index, or
//! nothing there), and the object side of each format's detector, which the registry
//! (`registry::OPENERS`, the one list that also opens paths) runs in its order. The first read
//! is the one the name suggests, and every detector after it reads what it holds before asking
//! for more, so that a format costs as few requests as it allows (docs/remote.md gives each
//! format's request pattern). Its own file: everything here needs object storage (the `s3`
//! feature).

use std::ops::Range;
use std::sync::Arc;

use crate::error::{Error, RemoteProblem, Result};
use crate::interop::safetensors::{self, RemoteSafetensors, RemoteSafetensorsOptions};
use crate::interop::store::TensorStore;
use crate::native::Reader;
use crate::remote::{ObjectLocation, ObjectRange, RangeRead, ReadAt, RemoteOptions, RequestStats};

/// How [`super::open_location`] opens what a URL names.
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

/// The client's error behind a not-found answer.
type RemoteSource = Option<Box<dyn std::error::Error + Send + Sync + 'static>>;

/// The first read of the checkpoint index `index`: its tail, and the rest of it at once when it
/// is small (a TensorFlow reader needs all of it, and the index of a sharded paramdex
/// checkpoint this small costs no more read whole than block by block).
fn open_index(index: &ObjectLocation, opts: &UrlOptions) -> Result<FirstRead> {
    let mut held = open_tail(index, opts.native.tail_bytes)?;
    if held.start > 0 && held.len() <= WHOLE_INDEX_AT_ONCE.min(opts.max_tf_index_bytes) {
        // Not held whole, but small: the rest now, in one request, rather than the header's
        // block first and the rest after it.
        held.bytes = super::tf::remote::whole_object(
            &*held.inner,
            held.start,
            &held.bytes,
            opts.max_tf_index_bytes,
        )?;
        held.start = 0;
    }
    Ok(held)
}

/// What a URL names, resolved once (by [`ObjectInput::resolve`]) before any format looks at
/// it: each detector of the registry (`registry::OPENERS`, the same list that opens a path)
/// reads this, and finds the first read already made.
pub(crate) struct ObjectInput<'o> {
    /// The key the URL names.
    loc: ObjectLocation,
    /// Its last component.
    name: String,
    opts: &'o UrlOptions,
    at: At,
    /// The object's first bytes ([`ObjectInput::head`]), read once for every detector that
    /// decides by them.
    head: std::sync::OnceLock<Vec<u8>>,
    /// Why the native detector refused the object, for the error when no format claims it.
    not_native: std::cell::RefCell<String>,
}

/// What is at the key a URL names.
enum At {
    /// An object, its first read held.
    Object(Arc<FirstRead>),
    /// A checkpoint at `prefix`, named by its prefix, by its `.index` (`named_index`) or by one
    /// of its data objects: its index `index_loc`, the first read of it held.
    Checkpoint {
        prefix: ObjectLocation,
        index_loc: ObjectLocation,
        index: Arc<FirstRead>,
        named_index: bool,
    },
    /// No object, nor a checkpoint at this prefix: a "directory" of the bucket, or nothing.
    /// The URL of `KEY.index` and why it is not found (taken by [`ObjectInput::unclaimed`]).
    Nothing(std::cell::RefCell<Option<(String, RemoteSource)>>),
}

impl<'o> ObjectInput<'o> {
    /// Resolves what `loc` names, by its name where the name says, with the first read the
    /// format its name suggests needs (docs/remote.md gives each format's requests):
    ///
    /// * `KEY/.metadata` (a torch DCP checkpoint's, when it is a pickle): its first bytes.
    /// * a Hugging Face index (`*.safetensors.index.json`, `pytorch_model.bin.index.json`): the
    ///   whole of it, at most [`super::hf::MAX_INDEX_BYTES`].
    /// * `KEY.index`, `KEY.data-SSSSS-of-NNNNN`: the checkpoint at prefix `KEY`, its `.index`
    ///   read from its end (whole, when it is small).
    /// * a key ending in `.safetensors`: its start (one request holds the header length and,
    ///   usually, the header); any other key: its end (one request holds a native file's footer
    ///   and, usually, its index block).
    /// * an other key naming no object: the checkpoint at prefix `KEY` when `KEY.index` is an
    ///   object, else nothing there (a "directory" the detectors look into, or nothing).
    pub(crate) fn resolve(loc: ObjectLocation, opts: &'o UrlOptions) -> Result<ObjectInput<'o>> {
        let key = loc.path.as_ref().to_string();
        let name = key.rsplit('/').next().unwrap_or_default().to_string();
        let at = if name == super::torch::dcp::METADATA_FILE
            && loc.without_suffix(&format!("/{name}")).is_some()
        {
            At::Object(Arc::new(open_head(&loc, 2)?))
        } else if super::hf::is_index_name(&name) {
            At::Object(Arc::new(open_head(&loc, super::hf::MAX_INDEX_BYTES)?))
        } else if let Some(prefix) = loc.without_suffix(".index") {
            At::Checkpoint {
                prefix,
                index: Arc::new(open_index(&loc, opts)?),
                index_loc: loc.clone(),
                named_index: true,
            }
        } else if let Some(prefix) = data_object_prefix(&loc) {
            let index_loc = prefix.with_suffix(".index");
            At::Checkpoint {
                index: Arc::new(open_index(&index_loc, opts)?),
                prefix,
                index_loc,
                named_index: false,
            }
        } else {
            let by_name = key.ends_with(".safetensors");
            let first = if by_name {
                open_head(&loc, opts.safetensors.head_bytes)
            } else {
                open_tail(&loc, opts.native.tail_bytes)
            };
            match first {
                Ok(first) => At::Object(Arc::new(first)),
                Err(Error::Remote {
                    problem: RemoteProblem::NotFound,
                    ..
                }) if !by_name => {
                    let index_loc = loc.with_suffix(".index");
                    match open_index(&index_loc, opts) {
                        Ok(index) => At::Checkpoint {
                            prefix: loc.clone(),
                            index: Arc::new(index),
                            index_loc,
                            named_index: false,
                        },
                        Err(Error::Remote {
                            problem: RemoteProblem::NotFound,
                            url,
                            source,
                            ..
                        }) if url == index_loc.url => {
                            At::Nothing(std::cell::RefCell::new(Some((url, source))))
                        }
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        };
        Ok(ObjectInput::new(loc, name, opts, at))
    }

    /// The object at `loc`, its first read `first` made: opened as an object, never as the
    /// prefix of a checkpoint.
    fn object(loc: ObjectLocation, first: FirstRead, opts: &'o UrlOptions) -> ObjectInput<'o> {
        let name = loc.path.as_ref().rsplit('/').next().unwrap_or_default();
        let name = name.to_string();
        ObjectInput::new(loc, name, opts, At::Object(Arc::new(first)))
    }

    fn new(loc: ObjectLocation, name: String, opts: &'o UrlOptions, at: At) -> ObjectInput<'o> {
        ObjectInput {
            loc,
            name,
            opts,
            at,
            head: std::sync::OnceLock::new(),
            not_native: std::cell::RefCell::new(String::new()),
        }
    }

    /// The object and its first read, if the key names an object.
    fn first(&self) -> Option<&Arc<FirstRead>> {
        match &self.at {
            At::Object(first) => Some(first),
            _ => None,
        }
    }

    /// The object's first bytes (the safetensors head's size of them, all of them for a
    /// shorter object): the first read's when it started at 0, else one more request, made
    /// once.
    fn head<'a>(&'a self, first: &'a FirstRead) -> Result<&'a [u8]> {
        if let Some(head) = first.head() {
            return Ok(head);
        }
        if let Some(head) = self.head.get() {
            return Ok(head);
        }
        let len = first.len();
        let head = first.read(0..self.opts.safetensors.head_bytes.max(9).min(len))?;
        Ok(self.head.get_or_init(|| head))
    }

    /// The error for an input that no format claims: an object is
    /// [`Error::UnrecognizedFormat`], saying what it looks like where it is recognised (a
    /// `torch.save` zip, a pickle, a DCP `.distcp`), as a local file would; a key naming nothing
    /// is [`RemoteProblem::NotFound`] naming both URLs (the key and `KEY.index`).
    pub(crate) fn unclaimed(&self) -> Error {
        match &self.at {
            At::Object(first) => {
                let url = first.location().to_string();
                let head = match self.head(first) {
                    Ok(head) => head,
                    Err(e) => return e,
                };
                let name = url.rsplit('/').next().unwrap_or_default();
                let head = &head[..head.len().min(super::foreign::HEAD_LEN)];
                if let Some(kind) = super::foreign::looks_like(name, head) {
                    return super::foreign::not_recognized(url, kind, head);
                }
                let not_native = self.not_native.borrow();
                Error::UnrecognizedFormat {
                    path: url.clone(),
                    looks_like: None,
                    detail: format!(
                        "neither a native paramdex file ({not_native}) nor a safetensors or GGUF \
                         file; a TensorFlow or sharded checkpoint is named by its prefix (PREFIX, with \
                         PREFIX.index beside it) or by {url}.index"
                    ),
                }
            }
            At::Nothing(missing) => {
                let (url, source) = missing.borrow_mut().take().unwrap_or_default();
                Error::Remote {
                    problem: RemoteProblem::NotFound,
                    detail: format!(
                        "no such object, and no checkpoint with this prefix ({url} does not \
                         exist either)"
                    ),
                    url: self.loc.url.clone(),
                    source,
                }
            }
            // The TensorFlow detector claims every checkpoint the others leave.
            At::Checkpoint { index_loc, .. } => Error::UnrecognizedFormat {
                path: index_loc.url.clone(),
                looks_like: None,
                detail: "neither a paramdex index nor a TensorFlow one".into(),
            },
        }
    }
}

/// Opens what a URL names, for a detector that opens other inputs beside it (the shards of a
/// Hugging Face checkpoint): the registry's own open ([`super::open_location`]).
pub(crate) type OpenLocation = fn(ObjectLocation, &UrlOptions) -> Result<Box<dyn TensorStore>>;

/// Opens an object already resolved: the registry's detection of an input.
pub(crate) type OpenInput = fn(&ObjectInput<'_>) -> Result<Box<dyn TensorStore>>;

/// The object side of a detector: `Ok(None)` when the input is not its format.
type Found = Result<Option<Box<dyn TensorStore>>>;

/// A detector's claim of `s`.
fn boxed(s: impl TensorStore + 'static) -> Option<Box<dyn TensorStore>> {
    Some(Box::new(s))
}

/// A torch DCP checkpoint: its `.metadata` named (when it starts like a pickle, as
/// `FileSystemWriter` writes it), or a key naming nothing whose "directory" holds one.
pub(crate) fn dcp(o: &ObjectInput<'_>) -> Found {
    match &o.at {
        At::Object(first) if o.name == super::torch::dcp::METADATA_FILE => {
            let Some(dir) = o.loc.without_suffix(&format!("/{}", o.name)) else {
                return Ok(None);
            };
            if first
                .head()
                .is_some_and(|h| super::foreign::pickle_protocol(h).is_some())
            {
                return open_dcp(&dir, first, o.opts).map(Some);
            }
            Ok(None)
        }
        At::Nothing(_) => dcp_at(&o.loc, o.opts).transpose(),
        _ => Ok(None),
    }
}

/// A Hugging Face layout: its sharded checkpoint's index named, or a key naming nothing that
/// holds one (or a single model file); `open` opens the shards, `run` a model file.
pub(crate) fn hf(o: &ObjectInput<'_>, open: OpenLocation, run: OpenInput) -> Found {
    match &o.at {
        At::Object(first) if super::hf::is_index_name(&o.name) => {
            hf_index(&o.loc, &o.name, first, o.opts, open).map(boxed)
        }
        At::Nothing(_) => hf_at(&o.loc, o.opts, open, run).transpose(),
        _ => Ok(None),
    }
}

/// A safetensors file whose first read held its start (an 8-byte little-endian header
/// length, then `{`): decided with no request more.
pub(crate) fn safetensors_held(o: &ObjectInput<'_>) -> Found {
    match o.first() {
        Some(first) => match first.head().filter(|h| safetensors::starts_like(h)) {
            Some(head) => open_safetensors(first, head.to_vec(), o.opts),
            None => Ok(None),
        },
        None => Ok(None),
    }
}

/// A safetensors file read from its end first (and not a native file): its start read.
pub(crate) fn safetensors_read(o: &ObjectInput<'_>) -> Found {
    let Some(first) = o.first() else {
        return Ok(None);
    };
    let head = o.head(first)?;
    if !safetensors::starts_like(head) {
        return Ok(None);
    }
    open_safetensors(first, head.to_vec(), o.opts)
}

fn open_safetensors(first: &Arc<FirstRead>, head: Vec<u8>, opts: &UrlOptions) -> Found {
    let src: Arc<dyn RangeRead> = first.clone();
    Ok(boxed(RemoteSafetensors::open_with_head(
        src,
        head,
        opts.safetensors,
    )?))
}

/// A GGUF file: its first bytes (those the safetensors test read) start with `GGUF`; its head
/// is read on from them ([`super::gguf::GgufStore::open_ranged`]).
pub(crate) fn gguf(o: &ObjectInput<'_>) -> Found {
    let Some(first) = o.first() else {
        return Ok(None);
    };
    let head = o.head(first)?;
    if !super::gguf::starts_like(head) {
        return Ok(None);
    }
    let head = head.to_vec();
    Ok(boxed(super::gguf::GgufStore::open_ranged(
        first.clone(),
        head,
    )?))
}

/// A native paramdex file (the table magic ends it and its header is a paramdex one), or the
/// index of a sharded paramdex checkpoint; a native single file named as `PREFIX.index` is
/// read as one, at a prefix it is left to the TensorFlow detector (`export_tf` writes it so).
pub(crate) fn native(o: &ObjectInput<'_>) -> Found {
    let opts = &o.opts.native;
    match &o.at {
        At::Object(first) => match Reader::from_range_read(first.clone(), opts.clone()) {
            Ok(r) => Ok(boxed(r)),
            Err(Error::UnrecognizedFormat { detail, .. }) => {
                *o.not_native.borrow_mut() = detail;
                Ok(None)
            }
            Err(e) => Err(e),
        },
        At::Checkpoint {
            prefix,
            index,
            named_index,
            ..
        } => match Reader::from_range_read(index.clone(), opts.clone()) {
            Ok(r) if *named_index => Ok(boxed(r)),
            Ok(_) => Ok(None),
            // The index of a sharded paramdex checkpoint.
            Err(Error::Unsupported(_)) => {
                open_sharded_at(prefix, index.clone(), opts.clone()).map(Some)
            }
            // Not a paramdex header: a TensorFlow checkpoint's index, or not an index at all
            // (then the TensorFlow reader says what is wrong with it).
            Err(Error::UnrecognizedFormat { .. } | Error::Corrupt { .. }) => Ok(None),
            Err(e) => Err(e),
        },
        At::Nothing(_) => Ok(None),
    }
}

/// A TensorFlow checkpoint: every checkpoint the native detector leaves, its whole `.index`
/// read (at most [`UrlOptions::max_tf_index_bytes`]).
pub(crate) fn tf(o: &ObjectInput<'_>) -> Found {
    let At::Checkpoint {
        prefix,
        index_loc,
        index,
        ..
    } = &o.at
    else {
        return Ok(None);
    };
    let bytes = super::tf::remote::whole_object(
        &**index,
        index.start,
        &index.bytes,
        o.opts.max_tf_index_bytes,
    )?;
    Ok(boxed(super::tf::remote::open_at(
        index_loc,
        prefix.path.as_ref(),
        &prefix.url,
        bytes,
    )?))
}

/// The object, when its first bytes say it may be `zip` (a `torch.save` zip) or else a pickle:
/// read whole (at most [`UrlOptions::max_whole_object_bytes`], checked before the read). A DCP
/// `.distcp` is not (its checkpoint, by its `.metadata`, is the input).
fn whole_if(
    o: &ObjectInput<'_>,
    zip: bool,
) -> Result<Option<(crate::native::Source, std::path::PathBuf)>> {
    let Some(first) = o.first() else {
        return Ok(None);
    };
    let url = first.location().to_string();
    if url.ends_with(".distcp") {
        return Ok(None);
    }
    let head = o.head(first)?;
    let claims = if zip {
        super::torch::zip::starts_like(&head[..head.len().min(4)])
    } else {
        super::foreign::pickle_protocol(head).is_some()
    };
    if !claims {
        return Ok(None);
    }
    let bytes = whole(&**first, o.opts.max_whole_object_bytes)?;
    Ok(Some((
        crate::native::Source::Memory(bytes.into()),
        std::path::PathBuf::from(url),
    )))
}

/// A `torch.save` zip, read whole and opened by the local reader's own test
/// ([`super::torch::open_source`]).
pub(crate) fn torch(o: &ObjectInput<'_>) -> Found {
    match whole_if(o, true)? {
        Some((source, path)) => super::torch::open_source(source, path),
        None => Ok(None),
    }
}

/// A Paddle dygraph pickle (`.pdparams`, `.pdopt`), read whole and opened by the local
/// reader's own test ([`super::paddle::dygraph::open_source`]).
pub(crate) fn dygraph(o: &ObjectInput<'_>) -> Found {
    match whole_if(o, false)? {
        Some((source, path)) => super::paddle::dygraph::open_source(source, path),
        None => Ok(None),
    }
}

/// A Paddle model's parameters or program, a merged file or a tensor file (the files it needs
/// read whole, detected by the local rules, merged files among them: `paddle::fetched`); or,
/// for a key naming nothing, the Paddle model at that prefix or under it.
pub(crate) fn paddle(o: &ObjectInput<'_>) -> Found {
    match &o.at {
        At::Object(first) => {
            let url = first.location().to_string();
            let head = o.head(first)?;
            let name = url.rsplit('/').next().unwrap_or_default();
            let this = || whole_source(first, o.opts);
            let sibling = siblings(&o.loc, o.opts);
            super::paddle::fetched::open_file(&url, name, head, &this, &sibling)
        }
        At::Nothing(_) => paddle_at(&o.loc, o.opts)
            .or_else(|| paddle_dir_at(&o.loc, o.opts))
            .transpose(),
        At::Checkpoint { .. } => Ok(None),
    }
}

/// The torch DCP checkpoint at `loc`, a key that names no object nor checkpoint prefix, when
/// its "directory" holds `.metadata` starting like a pickle, as `FileSystemWriter` writes it
/// (one request to see, made only on the way to a not-found error). `None`: it does not.
fn dcp_at(loc: &ObjectLocation, opts: &UrlOptions) -> Option<Result<Box<dyn TensorStore>>> {
    let mut dir = loc.clone();
    dir.url = dir.url.trim_end_matches('/').to_string();
    let held = open_head(&dir.with_suffix("/.metadata"), 2).ok()?;
    super::foreign::pickle_protocol(held.head()?)?;
    Some(open_dcp(&dir, &held, opts))
}

/// The torch DCP checkpoint under the prefix `dir` whose `.metadata` object `meta` is, parsed
/// and checked by the local reader ([`super::torch::dcp::DcpStore`]): `.metadata` read whole
/// (at most [`super::torch::dcp::MAX_METADATA_BYTES`]), each data file's length asked for
/// once at open (a HEAD), its bytes read whole when first needed (at most
/// [`UrlOptions::max_whole_object_bytes`], checked before the read).
fn open_dcp(
    dir: &ObjectLocation,
    meta: &FirstRead,
    opts: &UrlOptions,
) -> Result<Box<dyn TensorStore>> {
    use super::torch::dcp::{DcpStore, MAX_METADATA_BYTES};
    let bytes = whole(meta, MAX_METADATA_BYTES)?;
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

/// The Hugging Face sharded checkpoint whose index is the object `loc` (named `name`, its
/// first read `first`, of at most [`super::hf::MAX_INDEX_BYTES`]: the whole index), each
/// shard the weight map names opened beside it by `open` (the same detection as any URL).
fn hf_index(
    loc: &ObjectLocation,
    name: &str,
    first: &FirstRead,
    opts: &UrlOptions,
    open: OpenLocation,
) -> Result<super::hf::ShardedStore> {
    crate::error::ensure_within(
        "bytes of a Hugging Face index",
        first.len(),
        super::hf::MAX_INDEX_BYTES,
        None,
    )?;
    let bytes = first.head().unwrap_or_default();
    let index = super::hf::parse_index(bytes, &loc.url)?;
    // The shards beside the index: its key with the last component replaced.
    let dir = loc.without_suffix(&format!("/{name}"));
    super::hf::ShardedStore::new(&loc.url, index, &|shard| match &dir {
        Some(d) => open(d.with_suffix(&format!("/{shard}")), opts),
        None => Err(Error::Unsupported(format!(
            "{}: an index at the root of a bucket; put the checkpoint under a prefix",
            loc.url
        ))),
    })
}

/// The Hugging Face layout under `loc`, a key naming no object nor checkpoint prefix: the
/// sharded checkpoint of `KEY/model.safetensors.index.json` (or `pytorch_model.bin.index.json`),
/// else `KEY/model.safetensors` or `KEY/pytorch_model.bin` (made only on the way to a not-found
/// error: one request per name tried), a model file opened by `run`. `None` when there is none.
fn hf_at(
    loc: &ObjectLocation,
    opts: &UrlOptions,
    open: OpenLocation,
    run: OpenInput,
) -> Option<Result<Box<dyn TensorStore>>> {
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
        let r = open_head(&child, super::hf::MAX_INDEX_BYTES)
            .and_then(|first| hf_index(&child, n, &first, opts, open))
            .map(|s| Box::new(s) as Box<dyn TensorStore>);
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
        .and_then(|first| run(&ObjectInput::object(child, first, opts)));
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

/// The largest `.index` read whole at once when its first read did not hold it all
/// ([`open_index`]).
const WHOLE_INDEX_AT_ONCE: u64 = 8 << 20;

/// Opens the sharded checkpoint at `prefix` as a store, from its index object `index` (already
/// opened by [`ObjectInput::resolve`], so its first read is not made twice); each data object
/// `PREFIX.data-k-of-N` is opened when first read (see `RangedSharded::shard`).
pub(crate) fn open_sharded_at(
    prefix: &ObjectLocation,
    index: Arc<dyn RangeRead>,
    opts: RemoteOptions,
) -> Result<Box<dyn TensorStore>> {
    // The data objects beside the index, in the store the URL was resolved to (a bucket's;
    // object_store's local file system for `file://`, which names no bucket).
    let bucket = crate::remote::split_s3_url(&prefix.url)
        .map(|(b, _)| b.to_string())
        .unwrap_or_default();
    let place = crate::remote::BucketPlace::at(prefix.clone(), &bucket)?;
    Ok(Box::new(Reader::from_place(
        index,
        prefix.url.clone(),
        Arc::new(place),
        opts,
    )?))
}
