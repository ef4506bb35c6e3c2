//! The unpickler itself: [`parse`] runs the opcodes of a stream (protocols 2 to 5) on a stack
//! machine that builds the value tree ([`Pickle`]) and never calls anything, resolving globals
//! only from the allow-list and checking every bound of the module docs before it allocates.
//! Its own file because the opcode loop and its bookkeeping (stack, marks, memo, arena) are
//! apart from the value tree, its walks and the allow-lists (`mod.rs`).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use crate::error::{Error, PickleProblem, Result};

use super::*;

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
pub(super) mod op {
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
