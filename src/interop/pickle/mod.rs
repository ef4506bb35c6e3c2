//! A restricted unpickler: reads Python pickles (protocols 2 to 5, the opcodes `torch.save`,
//! `paddle.save` and NumPy's array pickles use) into a plain Rust value tree, and never runs
//! anything.
//!
//! Python's unpickler imports every global a pickle names and calls whatever the pickle asks
//! for, so a pickle can run any code (`posix.system` through `REDUCE`). This one resolves a
//! global only when it is on the caller's allow-list ([`TORCH_GLOBALS`], [`NUMPY_GLOBALS`], as
//! `torch.load(weights_only=True)` has); any other name is refused with
//! [`PickleProblem::ForbiddenGlobal`], naming it, before the rest of the stream is read. An
//! allowed global is not called either: `REDUCE` and `NEWOBJ` record the call
//! ([`Object::Call`]) for the reader of the format to interpret, except for the few pure
//! constructors evaluated here (`collections.OrderedDict()` is a dict, `builtins.set` and
//! `frozenset` sets, `torch.Size` a tuple, `_codecs.encode(s, "latin1")` the bytes of `s`).
//! Persistent ids (`BINPERSID`, which `torch.save` uses for storages) become
//! [`Object::PersistentId`] for the caller to resolve.
//!
//! Bounds (every one checked before the memory it guards is allocated): a length field is
//! checked against the bytes left in the stream, so a 10 GB length in a short stream is
//! [`PickleProblem::Truncated`], and no value holds more bytes than the stream; the stack holds
//! at most [`MAX_STACK`] items, at most [`MAX_MARKS`] marks are open, the memo holds at most
//! [`MAX_MEMO`] entries, the value tree at most [`MAX_OBJECTS`] containers, nested at most
//! [`MAX_DEPTH`] deep; a `GLOBAL` line is at most [`MAX_GLOBAL_LEN`] bytes. Values read from
//! the memo are shared, not copied (a container is an [`ObjId`] into one arena, strings are
//! reference-counted), so a pickle that refers to one object many times costs its references,
//! not copies; and a container that holds itself (through the memo) is a cycle in the arena,
//! which [`Pickle::named_leaves`] refuses instead of following forever. All containers
//! together hold at most [`MAX_ITEMS_PER_BYTE`] items per byte of the stream, so calls that
//! copy a tuple's items cannot multiply it either.
//!
//! Walks are bounded by the stream's size too: a value shared under many containers is one
//! value, but it has one name per path to it, and a few hundred bytes of `DUP`s nested under
//! `TUPLE`s make millions of paths. [`Pickle::named_leaves`] visits at most
//! [`MAX_VISITS_PER_BYTE`] values and makes at most [`MAX_NAME_BYTES_PER_BYTE`] bytes of names
//! per byte of the stream, and the readers that build records from the leaves (a tensor per
//! leaf, a chunk per DCP entry) spend a [`Budget`] from [`Pickle::budget`] the same way; past
//! it, the file is refused ([`PickleProblem::Limit`], with the offset of the container being
//! expanded), in time and memory proportional to its bytes.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use crate::error::{Error, PickleProblem, Result};
use crate::name::MAX_NAME_LEN;

mod unpickler;

pub use unpickler::parse;

/// Most items on the unpickler's stack (the items under open marks included).
pub const MAX_STACK: usize = 1 << 20;
/// Most marks open at once.
pub const MAX_MARKS: usize = 4096;
/// Most memo entries.
pub const MAX_MEMO: usize = 1 << 22;
/// Most containers (tuples, lists, dicts, sets, calls, persistent ids) in one pickle.
pub const MAX_OBJECTS: usize = 1 << 24;
/// Deepest nesting of containers.
pub const MAX_DEPTH: usize = 256;
/// Longest module or name of a `GLOBAL` opcode, in bytes.
pub const MAX_GLOBAL_LEN: usize = 1024;
/// Most items all containers together may hold, per byte of the stream (plus 4096): each item
/// is pushed by an opcode of at least one byte, and the calls that copy a tuple's items (their
/// arguments) at most double that; a pickle that copies one large tuple over and over to
/// multiply its size is refused.
pub const MAX_ITEMS_PER_BYTE: u64 = 4;
/// Most values (containers and leaves) [`Pickle::named_leaves`] visits per byte of the stream
/// (plus [`MIN_VISITS`]): a value reached by several paths is visited once per path, so a
/// pickle that shares one container under many others (a few hundred bytes of `DUP`s nested
/// under `TUPLE`s) has millions of paths; its walk stops here, in time and memory proportional
/// to the stream. A pickle with no shared container has at most one visit per item, and items
/// cost at least a quarter of a byte each ([`MAX_ITEMS_PER_BYTE`]); 8 leaves room for a state
/// dict saved twice over (`{"model": sd, "ema": sd}`).
pub const MAX_VISITS_PER_BYTE: u64 = 8;
/// Visits every walk may make however short the stream.
pub const MIN_VISITS: u64 = 4096;
/// Most bytes of names [`Pickle::named_leaves`] makes (those of the containers on the way
/// included) per byte of the stream, plus [`MIN_NAME_BYTES`]. A flat state dict's names are
/// its keys (at most one byte a byte); nested ones repeat their prefixes, and an optimizer's
/// `param_groups.0.params.1234` names a two-byte int with 25 bytes: 64 covers those.
pub const MAX_NAME_BYTES_PER_BYTE: u64 = 64;
/// Name bytes every walk may make however short the stream (one name of [`MAX_NAME_LEN`]).
pub const MIN_NAME_BYTES: u64 = MAX_NAME_LEN as u64;

/// Most bytes of records (a tensor's name, shape and message, a metadata value) the readers
/// build from a pickle's leaves, per byte of the pickle (plus [`MIN_RECORD_BYTES`]), spent
/// from a [`Pickle::budget`]. A leaf shared under many names is one value of the pickle but
/// one record per name: without this bound, a few KiB of `DUP`s of one tensor with a long
/// shape would cost gigabytes. A tensor's record is about 200 bytes with its name and shape,
/// for at least 60 bytes of pickle per tensor (tied weights, a 2-byte memo reference each, are
/// few).
pub const RECORD_BYTES_PER_BYTE: u64 = 64;
/// Bytes of records any pickle may build, however short.
pub const MIN_RECORD_BYTES: u64 = 1 << 20;

/// A global on an allow-list: `(module, name)`.
pub type GlobalName = (&'static str, &'static str);

/// A `&[GlobalName]` of the given globals followed by torch's dtypes (`torch.float32`, ...):
/// the one list of dtypes that both `torch.save`'s allow-list ([`TORCH_GLOBALS`]) and DCP's
/// (`interop::torch::dcp::DCP_GLOBALS`) name.
macro_rules! with_torch_dtypes {
    ($($global:expr),* $(,)?) => {
        &[
            $($global,)*
            ("torch", "float32"),
            ("torch", "float64"),
            ("torch", "float16"),
            ("torch", "bfloat16"),
            ("torch", "int64"),
            ("torch", "int32"),
            ("torch", "int16"),
            ("torch", "int8"),
            ("torch", "uint8"),
            ("torch", "bool"),
            ("torch", "uint16"),
            ("torch", "uint32"),
            ("torch", "uint64"),
            ("torch", "complex64"),
            ("torch", "complex128"),
            ("torch", "float8_e4m3fn"),
            ("torch", "float8_e5m2"),
            ("torch", "float8_e4m3fnuz"),
            ("torch", "float8_e5m2fnuz"),
            ("torch", "float8_e8m0fnu"),
            ("torch", "float4_e2m1fn_x2"),
        ]
    };
}
pub(crate) use with_torch_dtypes;

/// The globals a `torch.save` pickle may name: exactly those `torch.load(weights_only=True)`
/// allows by default (torch 2.15's `torch._weights_only_unpickler._get_allowed_globals()`, listed
/// sorted by `python -c "from torch._weights_only_unpickler import _get_allowed_globals as g;
/// print(*sorted(g()), sep='\\n')"`), so that paramdex reads what torch reads weights-only and
/// refuses what it refuses: `_codecs.encode` (how protocol 2 pickles `bytes`),
/// `builtins.bytearray`, `builtins.complex`, `collections.Counter`, `torch.device`, every
/// dtype, storage, tensor class and rebuild function. None of them is called; the readers
/// interpret the calls they know (a tensor rebuild function paramdex does not read makes that
/// tensor [`Error::Unsupported`]), and anything else is a leaf that is no tensor.
pub const TORCH_GLOBALS: &[GlobalName] = with_torch_dtypes![
    ("_codecs", "encode"),
    ("builtins", "bytearray"),
    ("builtins", "complex"),
    ("builtins", "set"),
    ("collections", "Counter"),
    ("collections", "OrderedDict"),
    ("torch", "BFloat16Storage"),
    ("torch", "BFloat16Tensor"),
    ("torch", "BoolStorage"),
    ("torch", "BoolTensor"),
    ("torch", "ByteStorage"),
    ("torch", "ByteTensor"),
    ("torch", "CharStorage"),
    ("torch", "CharTensor"),
    ("torch", "ComplexDoubleStorage"),
    ("torch", "ComplexFloatStorage"),
    ("torch", "DoubleStorage"),
    ("torch", "DoubleTensor"),
    ("torch", "FloatStorage"),
    ("torch", "FloatTensor"),
    ("torch", "HalfStorage"),
    ("torch", "HalfTensor"),
    ("torch", "IntStorage"),
    ("torch", "IntTensor"),
    ("torch", "LongStorage"),
    ("torch", "LongTensor"),
    ("torch", "QInt32Storage"),
    ("torch", "QInt8Storage"),
    ("torch", "QUInt2x4Storage"),
    ("torch", "QUInt4x2Storage"),
    ("torch", "QUInt8Storage"),
    ("torch", "ShortStorage"),
    ("torch", "ShortTensor"),
    ("torch", "Size"),
    ("torch", "Tensor"),
    ("torch._tensor", "_rebuild_from_type_v2"),
    ("torch._utils", "_rebuild_device_tensor_from_cpu_tensor"),
    ("torch._utils", "_rebuild_device_tensor_from_numpy"),
    ("torch._utils", "_rebuild_meta_tensor_no_storage"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch._utils", "_rebuild_parameter_with_state"),
    ("torch._utils", "_rebuild_qtensor"),
    ("torch._utils", "_rebuild_sparse_tensor"),
    ("torch._utils", "_rebuild_tensor"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_tensor_v3"),
    ("torch._utils", "_rebuild_wrapper_subclass"),
    ("torch", "bcomplex32"),
    ("torch", "bits16"),
    ("torch", "bits1x8"),
    ("torch", "bits2x4"),
    ("torch", "bits4x2"),
    ("torch", "bits8"),
    ("torch", "complex32"),
    ("torch.cuda", "BFloat16Storage"),
    ("torch.cuda", "BFloat16Tensor"),
    ("torch.cuda", "BoolStorage"),
    ("torch.cuda", "BoolTensor"),
    ("torch.cuda", "ByteStorage"),
    ("torch.cuda", "ByteTensor"),
    ("torch.cuda", "CharStorage"),
    ("torch.cuda", "CharTensor"),
    ("torch.cuda", "ComplexDoubleStorage"),
    ("torch.cuda", "ComplexFloatStorage"),
    ("torch.cuda", "DoubleStorage"),
    ("torch.cuda", "DoubleTensor"),
    ("torch.cuda", "FloatStorage"),
    ("torch.cuda", "FloatTensor"),
    ("torch.cuda", "HalfStorage"),
    ("torch.cuda", "HalfTensor"),
    ("torch.cuda", "IntStorage"),
    ("torch.cuda", "IntTensor"),
    ("torch.cuda", "LongStorage"),
    ("torch.cuda", "LongTensor"),
    ("torch.cuda", "ShortStorage"),
    ("torch.cuda", "ShortTensor"),
    ("torch.cuda.sparse", "BFloat16Tensor"),
    ("torch.cuda.sparse", "ByteTensor"),
    ("torch.cuda.sparse", "CharTensor"),
    ("torch.cuda.sparse", "DoubleTensor"),
    ("torch.cuda.sparse", "FloatTensor"),
    ("torch.cuda.sparse", "HalfTensor"),
    ("torch.cuda.sparse", "IntTensor"),
    ("torch.cuda.sparse", "LongTensor"),
    ("torch.cuda.sparse", "ShortTensor"),
    ("torch", "device"),
    ("torch", "int1"),
    ("torch", "int2"),
    ("torch", "int3"),
    ("torch", "int4"),
    ("torch", "int5"),
    ("torch", "int6"),
    ("torch", "int7"),
    ("torch.nn.parameter", "Parameter"),
    ("torch", "per_channel_affine"),
    ("torch", "per_channel_affine_float_qparams"),
    ("torch", "per_channel_symmetric"),
    ("torch", "per_tensor_affine"),
    ("torch", "per_tensor_symmetric"),
    ("torch", "qint32"),
    ("torch", "qint8"),
    ("torch", "quint2x4"),
    ("torch", "quint4x2"),
    ("torch", "quint8"),
    ("torch.serialization", "_get_layout"),
    ("torch.sparse", "BFloat16Tensor"),
    ("torch.sparse", "ByteTensor"),
    ("torch.sparse", "CharTensor"),
    ("torch.sparse", "DoubleTensor"),
    ("torch.sparse", "FloatTensor"),
    ("torch.sparse", "HalfTensor"),
    ("torch.sparse", "IntTensor"),
    ("torch.sparse", "LongTensor"),
    ("torch.sparse", "ShortTensor"),
    ("torch.storage", "TypedStorage"),
    ("torch.storage", "UntypedStorage"),
    ("torch", "uint1"),
    ("torch", "uint2"),
    ("torch", "uint3"),
    ("torch", "uint4"),
    ("torch", "uint5"),
    ("torch", "uint6"),
    ("torch", "uint7"),
];

/// The globals a NumPy array pickle (and so a Paddle `.pdparams` / `.pdopt`) may name.
pub const NUMPY_GLOBALS: &[GlobalName] = &[
    ("collections", "OrderedDict"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "slice"),
];

/// The globals a Paddle `paddle.save` pickle (`.pdparams`, `.pdopt`) may name: NumPy's, and
/// `builtins.tuple`, through which Paddle pickles a tensor as `tuple((name, ndarray))`.
pub const PADDLE_GLOBALS: &[GlobalName] = &[
    ("collections", "OrderedDict"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
    ("builtins", "tuple"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "slice"),
];

/// A scalar beside the tensors of a checkpoint (an epoch, a learning rate, a flag, a short
/// string) as a metadata value; `None` for anything else. The `torch.save` and Paddle dygraph
/// readers keep these as the store's metadata.
pub(crate) fn metadata_value(v: &Value) -> Option<crate::native::MetaValue> {
    use crate::native::MetaValue;
    Some(match v {
        Value::Int(i) => MetaValue::Int(*i),
        Value::Float(f) => MetaValue::Float(*f),
        Value::Bool(b) => MetaValue::Bool(*b),
        Value::Str(s) if s.len() <= 4096 => MetaValue::String(s.to_string()),
        _ => return None,
    })
}

/// A container in [`Pickle`]'s arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjId(u32);

/// The bytes of a `bytes` value: a range of the pickle stream (no copy), or bytes made here
/// (`_codecs.encode`).
#[derive(Clone, Debug, PartialEq)]
pub enum Bytes {
    /// These bytes of the stream.
    Span(Range<usize>),
    /// Bytes not in the stream as such.
    Owned(Arc<[u8]>),
}

/// A pickled value. Containers are [`ObjId`]s into the [`Pickle`]'s arena, so that a value
/// read from the memo is shared, not copied.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An `int` that fits an `i64`.
    Int(i64),
    /// A larger `int`: little-endian two's complement bytes.
    BigInt(Arc<[u8]>),
    /// A `float`.
    Float(f64),
    /// A `str`.
    Str(Arc<str>),
    /// A `bytes` (or Python 2 `str`, or `bytearray`).
    Bytes(Bytes),
    /// A container, a call, a global or a persistent id.
    Obj(ObjId),
}

/// A container of the value tree.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// A `tuple` (also `torch.Size`).
    Tuple(Vec<Value>),
    /// A `list`.
    List(Vec<Value>),
    /// A `dict`, or a `collections.OrderedDict` (`ordered`), in insertion order; `state` is
    /// what `BUILD` gave it (torch's `_metadata` attribute of a state dict).
    Dict {
        /// Whether it is an `OrderedDict`.
        ordered: bool,
        /// Its items in insertion order (a key set twice is there twice).
        items: Vec<(Value, Value)>,
        /// The `BUILD` state, if any.
        state: Option<Value>,
    },
    /// A `set` or `frozenset`.
    Set(Vec<Value>),
    /// An allowed global, not called.
    Global(GlobalName),
    /// A call of an allowed global that the unpickler does not evaluate (`REDUCE`, `NEWOBJ`),
    /// with the state `BUILD` gave its result.
    Call {
        /// The global called.
        func: GlobalName,
        /// Its positional arguments.
        args: Vec<Value>,
        /// The `BUILD` state, if any.
        state: Option<Value>,
    },
    /// A persistent id (`BINPERSID`), for the caller to resolve.
    PersistentId(Value),
}

/// A parsed pickle: the arena of containers and the root value.
#[derive(Debug)]
pub struct Pickle {
    objects: Vec<Object>,
    /// The offset of the opcode that made each container, for messages.
    offsets: Vec<u64>,
    root: Value,
    end: usize,
}

/// What [`Pickle::named_leaves`] gives: a name and the leaf value under it.
pub type NamedLeaf = (String, Value);

impl Pickle {
    /// The value `STOP` returned.
    pub fn root(&self) -> &Value {
        &self.root
    }

    /// The container `id`.
    pub fn get(&self, id: ObjId) -> &Object {
        // Ids are only made by `push_object`, as indexes of `objects`.
        &self.objects[id.0 as usize]
    }

    /// The container `v` is, if it is one.
    pub fn object(&self, v: &Value) -> Option<&Object> {
        match v {
            Value::Obj(id) => Some(self.get(*id)),
            _ => None,
        }
    }

    /// The offset just past the `STOP` opcode.
    pub fn end(&self) -> usize {
        self.end
    }

    /// The offset in the stream of the opcode that made container `id`.
    pub fn offset_of(&self, id: ObjId) -> u64 {
        // Ids are only made by `new_object`, which records the offset with the container.
        self.offsets[id.0 as usize]
    }

    /// A budget of `per_byte` units for each byte of this pickle's stream, and `floor` more:
    /// what the readers of a format spend on the records they build from the value tree
    /// (which sharing can make far larger than the tree itself).
    pub fn budget(&self, per_byte: u64, floor: u64) -> Budget {
        Budget::new(
            per_byte
                .saturating_mul(self.end as u64)
                .saturating_add(floor),
        )
    }

    /// The bytes of `b`; `stream` is the pickle stream it was parsed from.
    pub fn bytes<'a>(&'a self, b: &'a Bytes, stream: &'a [u8]) -> Option<&'a [u8]> {
        match b {
            Bytes::Span(r) => stream.get(r.clone()),
            Bytes::Owned(o) => Some(o),
        }
    }

    /// The leaves of the tree under the root, named as `state_dict` keys: the items of dicts
    /// (by key: a `str`, or an `int`, `bool`, `None` or `float` written as Python prints it)
    /// and of lists and tuples (by index) are descended into, and their names joined with
    /// `.`; anything else (a scalar, a string, a call, a set) is a leaf. A root that is not
    /// a container is the one leaf, named `""`. A leaf reached by two paths (tied weights) is
    /// listed under both names.
    ///
    /// The walk is bounded by the stream's size, however much the pickle shares: at most
    /// [`MAX_VISITS_PER_BYTE`] values visited and [`MAX_NAME_BYTES_PER_BYTE`] bytes of names
    /// made per byte of the stream (see [`Pickle::end`]).
    ///
    /// Errors ([`Error::Pickle`] under `path`, at the offset of the container being named):
    /// a container that holds itself ([`PickleProblem::Limit`]), nesting deeper than
    /// [`MAX_DEPTH`], more visits or name bytes than the stream's budget, a name longer than
    /// [`MAX_NAME_LEN`], a dict key of another type ([`PickleProblem::Malformed`]).
    pub fn named_leaves(&self, path: &str) -> Result<Vec<NamedLeaf>> {
        self.named_leaves_with(path, &|_, _| false)
    }

    /// [`Pickle::named_leaves`], with the containers for which `is_leaf` holds taken as
    /// leaves (Paddle's `(name, ndarray)` tuples).
    pub fn named_leaves_with(
        &self,
        path: &str,
        is_leaf: &dyn Fn(&Pickle, &Value) -> bool,
    ) -> Result<Vec<NamedLeaf>> {
        let mut out = Vec::new();
        let mut walk = Walk {
            p: self,
            is_leaf,
            path,
            on_path: Vec::new(),
            visits: self.budget(MAX_VISITS_PER_BYTE, MIN_VISITS),
            name_bytes: self.budget(MAX_NAME_BYTES_PER_BYTE, MIN_NAME_BYTES),
            out: &mut out,
        };
        walk.visit(String::new(), &self.root)?;
        Ok(out)
    }
}

struct Walk<'a> {
    p: &'a Pickle,
    is_leaf: &'a dyn Fn(&Pickle, &Value) -> bool,
    path: &'a str,
    on_path: Vec<ObjId>,
    visits: Budget,
    name_bytes: Budget,
    out: &'a mut Vec<NamedLeaf>,
}

impl Walk<'_> {
    /// An error at the offset of the container being named (the end of the stream at the
    /// root).
    fn err(&self, problem: PickleProblem, detail: String) -> Error {
        let offset = match self.on_path.last() {
            Some(&id) => self.p.offset_of(id),
            None => self.p.end as u64,
        };
        Error::Pickle {
            path: self.path.to_string(),
            offset,
            problem,
            detail,
        }
    }

    fn visit(&mut self, name: String, v: &Value) -> Result<()> {
        if !self.visits.spend(1) {
            let (limit, len) = (self.visits.limit(), self.p.end);
            return Err(self.err(
                PickleProblem::Limit,
                format!(
                    "more than {limit} values to name ({MAX_VISITS_PER_BYTE} per byte of the \
                     {len}-byte stream): values shared many times over, under {}",
                    shown(&name[..floor_char(&name, 200)])
                ),
            ));
        }
        let Value::Obj(id) = v else {
            self.out.push((name, v.clone()));
            return Ok(());
        };
        if (self.is_leaf)(self.p, v) {
            self.out.push((name, v.clone()));
            return Ok(());
        }
        let obj = self.p.get(*id);
        let n = match obj {
            Object::Dict { items, .. } => items.len(),
            Object::List(items) | Object::Tuple(items) => items.len(),
            _ => {
                self.out.push((name, v.clone()));
                return Ok(());
            }
        };
        if self.on_path.contains(id) {
            return Err(self.err(
                PickleProblem::Limit,
                format!("the container at {} holds itself", shown(&name)),
            ));
        }
        if self.on_path.len() >= MAX_DEPTH {
            return Err(self.err(
                PickleProblem::Limit,
                format!(
                    "containers nest deeper than {MAX_DEPTH} at {}",
                    shown(&name)
                ),
            ));
        }
        self.on_path.push(*id);
        // Each child's key is made when it is visited, not all beforehand: a shared long key
        // would otherwise be copied once per item before any budget is checked.
        for i in 0..n {
            let (key, child): (Cow<'_, str>, &Value) = match obj {
                Object::Dict { items, .. } => match dict_key(&items[i].0) {
                    Some(k) => (k, &items[i].1),
                    None => {
                        return Err(self.err(
                            PickleProblem::Malformed,
                            format!(
                                "a dict under {} has a key that is not a str, int, bool, float \
                                 or None",
                                shown(&name[..floor_char(&name, 200)])
                            ),
                        ))
                    }
                },
                Object::List(items) | Object::Tuple(items) => (i.to_string().into(), &items[i]),
                // `n` is 0 for anything else.
                _ => break,
            };
            // Checked before the name is made: a long key shared at every level would
            // otherwise make names of hundreds of megabytes.
            if name.len() + 1 + key.len() > MAX_NAME_LEN {
                return Err(self.err(
                    PickleProblem::Limit,
                    format!(
                        "a name under {} is longer than {MAX_NAME_LEN} bytes",
                        shown(&name[..floor_char(&name, 200)])
                    ),
                ));
            }
            if !self.name_bytes.spend((name.len() + 1 + key.len()) as u64) {
                let (limit, len) = (self.name_bytes.limit(), self.p.end);
                return Err(self.err(
                    PickleProblem::Limit,
                    format!(
                        "the names under {} come to more than {limit} bytes \
                         ({MAX_NAME_BYTES_PER_BYTE} per byte of the {len}-byte stream): values \
                         shared many times over",
                        shown(&name[..floor_char(&name, 200)])
                    ),
                ));
            }
            let full = if name.is_empty() && self.on_path.len() == 1 {
                key.into_owned()
            } else {
                format!("{name}.{key}")
            };
            self.visit(full, child)?;
        }
        self.on_path.pop();
        Ok(())
    }
}

/// A dict key as a name: a `str`, or an `int`, `bool`, `None` or `float` written as Python
/// prints it; `None` for a key of another type.
fn dict_key(k: &Value) -> Option<Cow<'_, str>> {
    Some(match k {
        Value::Str(s) => Cow::Borrowed(s),
        Value::Int(i) => i.to_string().into(),
        Value::Bool(b) => Cow::Borrowed(if *b { "True" } else { "False" }),
        Value::None => Cow::Borrowed("None"),
        Value::Float(f) => format!("{f:?}").into(),
        _ => return None,
    })
}

/// The largest char boundary of `s` at most `n`.
fn floor_char(s: &str, n: usize) -> usize {
    let mut n = n.min(s.len());
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    n
}

/// A count of work (visits, bytes of records) that may not pass a limit set from a stream's
/// size: the bound that keeps a reader of a much-shared pickle in time and memory
/// proportional to its bytes.
#[derive(Clone, Debug)]
pub struct Budget {
    spent: u64,
    limit: u64,
    refused: bool,
}

impl Budget {
    /// A budget of `limit` units.
    pub fn new(limit: u64) -> Budget {
        Budget {
            spent: 0,
            limit,
            refused: false,
        }
    }

    /// Spends `n` units: `false` (and nothing spent) when that would pass the limit.
    pub fn spend(&mut self, n: u64) -> bool {
        match self.spent.checked_add(n) {
            Some(s) if s <= self.limit => {
                self.spent = s;
                true
            }
            _ => {
                self.refused = true;
                false
            }
        }
    }

    /// Whether a [`Budget::spend`] was refused.
    pub fn ran_out(&self) -> bool {
        self.refused
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

fn shown(name: &str) -> String {
    if name.is_empty() {
        "the root".into()
    } else {
        format!("{name:?}")
    }
}

#[cfg(test)]
mod tests;
