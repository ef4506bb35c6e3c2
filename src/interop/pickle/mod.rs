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
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use crate::error::{Error, PickleProblem, Result};
use crate::name::MAX_NAME_LEN;

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

/// Parses the pickle at the start of `data` (up to its `STOP`; bytes after it are not read),
/// resolving only the globals in `allowed`. `path` names the stream in errors.
///
/// Errors: [`Error::Pickle`] with the offset of the opcode at fault and a
/// [`PickleProblem`]: a global not in `allowed` (named in the message), a stream cut short,
/// an opcode not implemented, a malformed sequence, a bound exceeded (see the module docs).
pub fn parse(data: &[u8], path: &str, allowed: &[GlobalName]) -> Result<Pickle> {
    Unpickler {
        data,
        pos: 0,
        op_at: 0,
        path,
        allowed,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        objects: Vec::new(),
        offsets: Vec::new(),
        depths: Vec::new(),
        items: 0,
    }
    .run()
}

struct Unpickler<'a> {
    data: &'a [u8],
    pos: usize,
    op_at: usize,
    path: &'a str,
    allowed: &'a [GlobalName],
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
    objects: Vec<Object>,
    offsets: Vec<u64>,
    depths: Vec<u16>,
    /// Items held by all containers so far (see [`MAX_ITEMS_PER_BYTE`]).
    items: u64,
}

/// Opcodes (Python's `pickletools` names).
mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const BINPERSID: u8 = b'Q';
    pub const REDUCE: u8 = b'R';
    pub const BINSTRING: u8 = b'T';
    pub const SHORT_BINSTRING: u8 = b'U';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const BUILD: u8 = b'b';
    pub const GLOBAL: u8 = b'c';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const BINGET: u8 = b'h';
    pub const INST: u8 = b'i';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    pub const PROTO: u8 = 0x80;
    pub const NEWOBJ: u8 = 0x81;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const EMPTY_SET: u8 = 0x8f;
    pub const ADDITEMS: u8 = 0x90;
    pub const FROZENSET: u8 = 0x91;
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
    pub const BYTEARRAY8: u8 = 0x96;
}

impl<'a> Unpickler<'a> {
    fn err(&self, problem: PickleProblem, detail: impl Into<String>) -> Error {
        Error::Pickle {
            path: self.path.to_string(),
            offset: self.op_at as u64,
            problem,
            detail: detail.into(),
        }
    }

    fn malformed(&self, detail: impl Into<String>) -> Error {
        self.err(PickleProblem::Malformed, detail)
    }

    /// The next `n` bytes of the stream, checked against what is left before anything is
    /// allocated for them.
    fn take(&mut self, n: u64, what: &str) -> Result<Range<usize>> {
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            return Err(self.err(
                PickleProblem::Truncated,
                format!("{what} of {n} bytes runs past the end of the stream ({left} bytes left)"),
            ));
        }
        // n <= left <= usize::MAX.
        let r = self.pos..self.pos + n as usize;
        self.pos = r.end;
        Ok(r)
    }

    fn bytes(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        let r = self.take(n, what)?;
        Ok(&self.data[r])
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1, "an argument")?[0])
    }

    fn le(&mut self, n: usize) -> Result<u64> {
        let b = self.bytes(n as u64, "an argument")?;
        Ok(b.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
    }

    fn push(&mut self, v: Value) -> Result<()> {
        if self.stack.len() >= MAX_STACK {
            return Err(self.err(
                PickleProblem::Limit,
                format!("more than {MAX_STACK} items on the stack"),
            ));
        }
        self.stack.push(v);
        Ok(())
    }

    fn pop(&mut self) -> Result<Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed("stack underflow"));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.malformed("stack underflow"))
    }

    fn top(&self) -> Result<&Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed("stack underflow"));
        }
        self.stack
            .last()
            .ok_or_else(|| self.malformed("stack underflow"))
    }

    /// The items pushed since the last mark, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Value>> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| self.malformed("no mark to pop to"))?;
        Ok(self.stack.split_off(m))
    }

    fn depth_of(&self, v: &Value) -> usize {
        match v {
            Value::Obj(id) => usize::from(self.depths[id.0 as usize]),
            _ => 0,
        }
    }

    fn check_depth(&self, d: usize) -> Result<u16> {
        if d > MAX_DEPTH {
            return Err(self.err(
                PickleProblem::Limit,
                format!("containers nest deeper than {MAX_DEPTH}"),
            ));
        }
        // d <= MAX_DEPTH < u16::MAX.
        Ok(d as u16)
    }

    fn new_object(&mut self, o: Object) -> Result<Value> {
        if self.objects.len() >= MAX_OBJECTS {
            return Err(self.err(
                PickleProblem::Limit,
                format!("more than {MAX_OBJECTS} containers"),
            ));
        }
        let children = match &o {
            Object::Tuple(v) | Object::List(v) | Object::Set(v) => {
                v.iter().map(|x| self.depth_of(x)).max().unwrap_or(0)
            }
            Object::Dict { items, .. } => items
                .iter()
                .map(|(k, v)| self.depth_of(k).max(self.depth_of(v)))
                .max()
                .unwrap_or(0),
            Object::Call { args, .. } => args.iter().map(|x| self.depth_of(x)).max().unwrap_or(0),
            Object::PersistentId(v) => self.depth_of(v),
            Object::Global(_) => 0,
        };
        let d = self.check_depth(children + 1)?;
        let n = match &o {
            Object::Tuple(v) | Object::List(v) | Object::Set(v) => v.len(),
            Object::Dict { items, .. } => 2 * items.len(),
            Object::Call { args, .. } => args.len(),
            Object::PersistentId(_) | Object::Global(_) => 1,
        };
        self.count_items(n)?;
        let id = ObjId(self.objects.len() as u32);
        self.objects.push(o);
        self.offsets.push(self.op_at as u64);
        self.depths.push(d);
        Ok(Value::Obj(id))
    }

    /// Counts `n` more items held by containers, against the budget.
    fn count_items(&mut self, n: usize) -> Result<()> {
        self.items += n as u64;
        let limit = MAX_ITEMS_PER_BYTE * self.data.len() as u64 + 4096;
        if self.items > limit {
            return Err(self.err(
                PickleProblem::Limit,
                format!(
                    "containers hold more than {limit} items ({MAX_ITEMS_PER_BYTE} per byte of \
                     the stream)"
                ),
            ));
        }
        Ok(())
    }

    /// Records that container `id` now holds `v` (its depth may grow).
    fn grow(&mut self, id: ObjId, v: &Value) -> Result<()> {
        self.count_items(1)?;
        let d = self.check_depth(self.depth_of(v) + 1)?;
        let cur = &mut self.depths[id.0 as usize];
        *cur = (*cur).max(d);
        Ok(())
    }

    fn obj_id(&self, v: &Value, what: &str) -> Result<ObjId> {
        match v {
            Value::Obj(id) => Ok(*id),
            _ => Err(self.malformed(format!("{what} is not a container"))),
        }
    }

    fn tuple_items(&self, v: &Value, what: &str) -> Result<Vec<Value>> {
        match v {
            Value::Obj(id) => match &self.objects[id.0 as usize] {
                Object::Tuple(items) => Ok(items.clone()),
                _ => Err(self.malformed(format!("{what} is not a tuple"))),
            },
            _ => Err(self.malformed(format!("{what} is not a tuple"))),
        }
    }

    fn resolve(&self, module: &str, name: &str) -> Result<GlobalName> {
        // Python 3 writes `builtins` as `__builtin__` at protocols below 3 (fix_imports), and
        // reads it back as `builtins`.
        let module = if module == "__builtin__" {
            "builtins"
        } else {
            module
        };
        self.allowed
            .iter()
            .find(|(m, n)| *m == module && *n == name)
            .copied()
            .ok_or_else(|| {
                self.err(
                    PickleProblem::ForbiddenGlobal,
                    format!(
                        "the pickle names the global {module}.{name}, which is not on the \
                         allow-list of this format; it was not loaded and nothing was run"
                    ),
                )
            })
    }

    fn line(&mut self) -> Result<&'a str> {
        let rest = &self.data[self.pos..];
        let window = &rest[..rest.len().min(MAX_GLOBAL_LEN + 1)];
        let Some(n) = window.iter().position(|&b| b == b'\n') else {
            return Err(if rest.len() <= MAX_GLOBAL_LEN {
                self.err(
                    PickleProblem::Truncated,
                    "a global's name runs past the end",
                )
            } else {
                self.err(
                    PickleProblem::Limit,
                    format!("a global's module or name is longer than {MAX_GLOBAL_LEN} bytes"),
                )
            });
        };
        let b = self.bytes(n as u64 + 1, "a global's name")?;
        std::str::from_utf8(&b[..n]).map_err(|_| self.malformed("a global's name is not UTF-8"))
    }

    fn string(&mut self, n: u64) -> Result<Value> {
        let b = self.bytes(n, "a str")?;
        let s = std::str::from_utf8(b)
            .map_err(|_| self.malformed("a str is not UTF-8 (a lone surrogate?)"))?;
        Ok(Value::Str(Arc::from(s)))
    }

    fn span(&mut self, n: u64, what: &str) -> Result<Value> {
        Ok(Value::Bytes(Bytes::Span(self.take(n, what)?)))
    }

    fn long(&mut self, n: u64) -> Result<Value> {
        let b = self.bytes(n, "an int")?;
        if b.is_empty() {
            return Ok(Value::Int(0));
        }
        if b.len() <= 8 {
            let neg = b[b.len() - 1] & 0x80 != 0;
            let mut x: u64 = if neg { u64::MAX } else { 0 };
            for &byte in b.iter().rev() {
                x = (x << 8) | u64::from(byte);
            }
            return Ok(Value::Int(x as i64));
        }
        Ok(Value::BigInt(Arc::from(b)))
    }

    /// `func(*args)` for an allowed global: the pure constructors are evaluated, anything else
    /// is recorded.
    fn call(&mut self, func: GlobalName, args: Vec<Value>) -> Result<Value> {
        match (func, args.as_slice()) {
            (("collections", "OrderedDict"), []) => self.new_object(Object::Dict {
                ordered: true,
                items: Vec::new(),
                state: None,
            }),
            // A Counter is a dict of counts, filled by SETITEMS as a dict is.
            (("collections", "Counter"), []) => self.new_object(Object::Dict {
                ordered: false,
                items: Vec::new(),
                state: None,
            }),
            // `bytearray()` and `bytearray(b)`, as protocols 2 and below pickle a bytearray
            // (`b` itself through `_codecs.encode`).
            (("builtins", "bytearray"), []) => Ok(Value::Bytes(Bytes::Owned(Arc::from(&[][..])))),
            (("builtins", "bytearray"), [Value::Bytes(b)]) => Ok(Value::Bytes(b.clone())),
            (("builtins", "set" | "frozenset"), []) => self.new_object(Object::Set(Vec::new())),
            (("builtins", "set" | "frozenset"), [v]) => {
                let items = match self.object_of(v) {
                    Some(Object::List(i) | Object::Tuple(i) | Object::Set(i)) => i.clone(),
                    _ => return Err(self.malformed("set() of something not a list or tuple")),
                };
                self.new_object(Object::Set(items))
            }
            (("builtins", "tuple"), []) => self.new_object(Object::Tuple(Vec::new())),
            (("builtins", "tuple"), [v]) => {
                let items = match self.object_of(v) {
                    Some(Object::List(i) | Object::Tuple(i)) => i.clone(),
                    _ => return Err(self.malformed("tuple() of something not a list or tuple")),
                };
                self.new_object(Object::Tuple(items))
            }
            (("torch", "Size"), [v]) => {
                let items = self.tuple_items(v, "the argument of torch.Size")?;
                self.new_object(Object::Tuple(items))
            }
            (("_codecs", "encode"), [Value::Str(s), Value::Str(enc)])
                if enc.as_ref() == "latin1" || enc.as_ref() == "latin-1" =>
            {
                let mut out = Vec::with_capacity(s.len());
                for c in s.chars() {
                    let c = u8::try_from(u32::from(c)).map_err(|_| {
                        self.malformed("_codecs.encode(..., 'latin1') of a character above U+00FF")
                    })?;
                    out.push(c);
                }
                Ok(Value::Bytes(Bytes::Owned(Arc::from(out))))
            }
            (("_codecs", "encode"), _) => Err(self.err(
                PickleProblem::ForbiddenGlobal,
                "_codecs.encode is allowed only as encode(str, 'latin1'), as NumPy pickles bytes",
            )),
            _ => self.new_object(Object::Call {
                func,
                args,
                state: None,
            }),
        }
    }

    fn object_of(&self, v: &Value) -> Option<&Object> {
        match v {
            Value::Obj(id) => Some(&self.objects[id.0 as usize]),
            _ => None,
        }
    }

    fn global_of(&self, v: &Value, what: &str) -> Result<GlobalName> {
        match self.object_of(v) {
            Some(Object::Global(g)) => Ok(*g),
            _ => Err(self.err(
                PickleProblem::ForbiddenGlobal,
                format!("{what} calls something that is not an allowed global"),
            )),
        }
    }

    fn set_items(&mut self, id: ObjId, pairs: Vec<Value>) -> Result<()> {
        if !pairs.len().is_multiple_of(2) {
            return Err(self.malformed("an odd number of items to set in a dict"));
        }
        for p in &pairs {
            self.grow(id, p)?;
        }
        let Object::Dict { items, .. } = &mut self.objects[id.0 as usize] else {
            return Err(self.malformed("items set in something that is not a dict"));
        };
        // A key set twice is kept twice (Python would keep one): no pickler writes that, and
        // the readers refuse the duplicate name; looking keys up here would be quadratic.
        let mut it = pairs.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            items.push((k, v));
        }
        Ok(())
    }

    fn append(&mut self, id: ObjId, new: Vec<Value>) -> Result<()> {
        for v in &new {
            self.grow(id, v)?;
        }
        match &mut self.objects[id.0 as usize] {
            Object::List(items) => {
                items.extend(new);
                Ok(())
            }
            _ => Err(self.malformed("items appended to something that is not a list")),
        }
    }

    fn run(mut self) -> Result<Pickle> {
        loop {
            self.op_at = self.pos;
            if self.pos >= self.data.len() {
                return Err(self.err(
                    PickleProblem::Truncated,
                    "the stream ends before its STOP opcode",
                ));
            }
            let code = self.data[self.pos];
            self.pos += 1;
            match code {
                op::PROTO => {
                    let v = self.u8()?;
                    if v > 5 {
                        return Err(self.err(
                            PickleProblem::UnsupportedOpcode,
                            format!("pickle protocol {v} (at most 5 is read)"),
                        ));
                    }
                }
                op::FRAME => {
                    // Frames only group opcodes: check the length, read on.
                    let n = self.le(8)?;
                    let left = (self.data.len() - self.pos) as u64;
                    if n > left {
                        return Err(self.err(
                            PickleProblem::Truncated,
                            format!("a frame of {n} bytes runs past the end ({left} bytes left)"),
                        ));
                    }
                }
                op::STOP => {
                    let root = self.pop()?;
                    return Ok(Pickle {
                        objects: self.objects,
                        offsets: self.offsets,
                        root,
                        end: self.pos,
                    });
                }
                op::MARK => {
                    if self.marks.len() >= MAX_MARKS {
                        return Err(self.err(
                            PickleProblem::Limit,
                            format!("more than {MAX_MARKS} marks open"),
                        ));
                    }
                    self.marks.push(self.stack.len());
                }
                op::POP => {
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() > floor {
                        self.stack.pop();
                    } else {
                        self.pop_mark()?;
                    }
                }
                op::POP_MARK => {
                    self.pop_mark()?;
                }
                op::DUP => {
                    let v = self.top()?.clone();
                    self.push(v)?;
                }
                op::NONE => self.push(Value::None)?,
                op::NEWTRUE => self.push(Value::Bool(true))?,
                op::NEWFALSE => self.push(Value::Bool(false))?,
                op::BININT => {
                    let v = self.le(4)? as u32 as i32;
                    self.push(Value::Int(i64::from(v)))?;
                }
                op::BININT1 => {
                    let v = self.u8()?;
                    self.push(Value::Int(i64::from(v)))?;
                }
                op::BININT2 => {
                    let v = self.le(2)?;
                    self.push(Value::Int(v as i64))?;
                }
                op::LONG1 => {
                    let n = self.u8()?;
                    let v = self.long(u64::from(n))?;
                    self.push(v)?;
                }
                op::LONG4 => {
                    let n = self.le(4)? as u32 as i32;
                    if n < 0 {
                        return Err(self.malformed("a negative int length"));
                    }
                    let v = self.long(n as u64)?;
                    self.push(v)?;
                }
                op::BINFLOAT => {
                    let b = self.bytes(8, "a float")?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    // BINFLOAT is big-endian by the pickle format's definition.
                    #[allow(clippy::big_endian_bytes)]
                    let f = f64::from_be_bytes(a);
                    self.push(Value::Float(f))?;
                }
                op::BINUNICODE => {
                    let n = self.le(4)?;
                    let v = self.string(n)?;
                    self.push(v)?;
                }
                op::SHORT_BINUNICODE => {
                    let n = self.u8()?;
                    let v = self.string(u64::from(n))?;
                    self.push(v)?;
                }
                op::BINUNICODE8 => {
                    let n = self.le(8)?;
                    let v = self.string(n)?;
                    self.push(v)?;
                }
                op::BINSTRING => {
                    let n = self.le(4)? as u32 as i32;
                    if n < 0 {
                        return Err(self.malformed("a negative string length"));
                    }
                    let v = self.span(n as u64, "a string")?;
                    self.push(v)?;
                }
                op::SHORT_BINSTRING | op::SHORT_BINBYTES => {
                    let n = self.u8()?;
                    let v = self.span(u64::from(n), "a bytes")?;
                    self.push(v)?;
                }
                op::BINBYTES => {
                    let n = self.le(4)?;
                    let v = self.span(n, "a bytes")?;
                    self.push(v)?;
                }
                op::BINBYTES8 | op::BYTEARRAY8 => {
                    let n = self.le(8)?;
                    let v = self.span(n, "a bytes")?;
                    self.push(v)?;
                }
                op::EMPTY_TUPLE => {
                    let v = self.new_object(Object::Tuple(Vec::new()))?;
                    self.push(v)?;
                }
                op::TUPLE => {
                    let items = self.pop_mark()?;
                    let v = self.new_object(Object::Tuple(items))?;
                    self.push(v)?;
                }
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    let n = usize::from(code - op::TUPLE1 + 1);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    let v = self.new_object(Object::Tuple(items))?;
                    self.push(v)?;
                }
                op::EMPTY_LIST => {
                    let v = self.new_object(Object::List(Vec::new()))?;
                    self.push(v)?;
                }
                op::LIST => {
                    let items = self.pop_mark()?;
                    let v = self.new_object(Object::List(items))?;
                    self.push(v)?;
                }
                op::APPEND => {
                    let v = self.pop()?;
                    let id = self.obj_id(self.top()?, "the target of APPEND")?;
                    self.append(id, vec![v])?;
                }
                op::APPENDS => {
                    let items = self.pop_mark()?;
                    let id = self.obj_id(self.top()?, "the target of APPENDS")?;
                    self.append(id, items)?;
                }
                op::EMPTY_DICT => {
                    let v = self.new_object(Object::Dict {
                        ordered: false,
                        items: Vec::new(),
                        state: None,
                    })?;
                    self.push(v)?;
                }
                op::DICT => {
                    let items = self.pop_mark()?;
                    let v = self.new_object(Object::Dict {
                        ordered: false,
                        items: Vec::new(),
                        state: None,
                    })?;
                    let id = self.obj_id(&v, "a dict")?;
                    self.set_items(id, items)?;
                    self.push(v)?;
                }
                op::SETITEM => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let id = self.obj_id(self.top()?, "the target of SETITEM")?;
                    self.set_items(id, vec![k, v])?;
                }
                op::SETITEMS => {
                    let items = self.pop_mark()?;
                    let id = self.obj_id(self.top()?, "the target of SETITEMS")?;
                    self.set_items(id, items)?;
                }
                op::EMPTY_SET => {
                    let v = self.new_object(Object::Set(Vec::new()))?;
                    self.push(v)?;
                }
                op::ADDITEMS => {
                    let new = self.pop_mark()?;
                    let id = self.obj_id(self.top()?, "the target of ADDITEMS")?;
                    for v in &new {
                        self.grow(id, v)?;
                    }
                    match &mut self.objects[id.0 as usize] {
                        Object::Set(items) => items.extend(new),
                        _ => return Err(self.malformed("items added to something not a set")),
                    }
                }
                op::FROZENSET => {
                    let items = self.pop_mark()?;
                    let v = self.new_object(Object::Set(items))?;
                    self.push(v)?;
                }
                op::GLOBAL => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let g = self.resolve(module, name)?;
                    let v = self.new_object(Object::Global(g))?;
                    self.push(v)?;
                }
                op::STACK_GLOBAL => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Value::Str(module), Value::Str(name)) = (module, name) else {
                        return Err(self.malformed("STACK_GLOBAL of something not two strs"));
                    };
                    let g = self.resolve(&module, &name)?;
                    let v = self.new_object(Object::Global(g))?;
                    self.push(v)?;
                }
                op::INST => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.resolve(module, name)?;
                    return Err(self.err(
                        PickleProblem::UnsupportedOpcode,
                        format!("opcode INST (of {module}.{name}): protocol 0/1 instances"),
                    ));
                }
                op::REDUCE => {
                    let args = self.pop()?;
                    let func = self.pop()?;
                    let g = self.global_of(&func, "REDUCE")?;
                    let args = self.tuple_items(&args, "the arguments of REDUCE")?;
                    let v = self.call(g, args)?;
                    self.push(v)?;
                }
                op::NEWOBJ => {
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    let g = self.global_of(&cls, "NEWOBJ")?;
                    let args = self.tuple_items(&args, "the arguments of NEWOBJ")?;
                    let v = self.call(g, args)?;
                    self.push(v)?;
                }
                op::BUILD => {
                    let state = self.pop()?;
                    let id = self.obj_id(self.top()?, "the target of BUILD")?;
                    self.grow(id, &state)?;
                    match &mut self.objects[id.0 as usize] {
                        Object::Call { state: s, .. } | Object::Dict { state: s, .. } => {
                            *s = Some(state)
                        }
                        _ => return Err(self.malformed("BUILD of something not an object")),
                    }
                }
                op::BINPERSID => {
                    let pid = self.pop()?;
                    let v = self.new_object(Object::PersistentId(pid))?;
                    self.push(v)?;
                }
                op::BINPUT => {
                    let i = self.u8()?;
                    self.memo_put(u32::from(i))?;
                }
                op::LONG_BINPUT => {
                    let i = self.le(4)? as u32;
                    self.memo_put(i)?;
                }
                op::MEMOIZE => {
                    let i = u32::try_from(self.memo.len())
                        .map_err(|_| self.err(PickleProblem::Limit, "memo full"))?;
                    self.memo_put(i)?;
                }
                op::BINGET => {
                    let i = self.u8()?;
                    self.memo_get(u32::from(i))?;
                }
                op::LONG_BINGET => {
                    let i = self.le(4)? as u32;
                    self.memo_get(i)?;
                }
                other => {
                    return Err(self.err(
                        PickleProblem::UnsupportedOpcode,
                        format!(
                            "opcode {} ({other:#04x}){}",
                            opcode_name(other),
                            unsupported_why(other)
                        ),
                    ))
                }
            }
        }
    }

    fn memo_put(&mut self, i: u32) -> Result<()> {
        let v = self.top()?.clone();
        if !self.memo.contains_key(&i) && self.memo.len() >= MAX_MEMO {
            return Err(self.err(
                PickleProblem::Limit,
                format!("more than {MAX_MEMO} memo entries"),
            ));
        }
        self.memo.insert(i, v);
        Ok(())
    }

    fn memo_get(&mut self, i: u32) -> Result<()> {
        let v = self
            .memo
            .get(&i)
            .cloned()
            .ok_or_else(|| self.malformed(format!("memo entry {i} was never stored")))?;
        self.push(v)
    }
}

/// `pickletools`' name of the opcodes this unpickler refuses, for messages.
fn opcode_name(code: u8) -> &'static str {
    match code {
        b'I' => "INT",
        b'L' => "LONG",
        b'S' => "STRING",
        b'V' => "UNICODE",
        b'F' => "FLOAT",
        b'P' => "PERSID",
        b'p' => "PUT",
        b'g' => "GET",
        b'o' => "OBJ",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x92 => "NEWOBJ_EX",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => "unknown",
    }
}

fn unsupported_why(code: u8) -> &'static str {
    match code {
        b'I' | b'L' | b'S' | b'V' | b'F' | b'P' | b'p' | b'g' | b'o' => {
            ": a protocol 0/1 text form, which torch, Paddle and NumPy pickles do not use"
        }
        0x82..=0x84 => ": the extension registry names globals by number, which is not allowed",
        0x92 => ": keyword-argument construction is not used by the formats read",
        0x97 | 0x98 => ": out-of-band buffers are not supplied",
        _ => ": not a pickle opcode",
    }
}

#[cfg(test)]
mod tests;
