//! `torch.save`-shaped files built in test code: a zip writer (stored entries, as torch
//! writes them) and a pickle assembler for the opcodes torch's `data.pkl` uses.

/// The CRC-32 zip records.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// A zip of stored entries `(name, bytes)`, in that order.
pub fn zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        let at = out.len() as u32;
        let crc = crc32(data);
        let len = data.len() as u32;
        // Local header: signature, version 2.0, flags, method 0 (stored), time, date, crc,
        // sizes, name length, extra length.
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        out.extend_from_slice(&20u16.to_le_bytes());
        out.extend_from_slice(&[0; 2 + 2 + 2 + 2]);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        // Central directory entry.
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes());
        central.extend_from_slice(&[0; 2 + 2 + 2 + 2]);
        central.extend_from_slice(&crc.to_le_bytes());
        central.extend_from_slice(&len.to_le_bytes());
        central.extend_from_slice(&len.to_le_bytes());
        central.extend_from_slice(&(name.len() as u16).to_le_bytes());
        // Extra, comment, disk, internal and external attributes.
        central.extend_from_slice(&[0; 2 + 2 + 2 + 2 + 4]);
        central.extend_from_slice(&at.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let cd_at = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_at.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// A `torch.save` zip: `archive/data.pkl`, `archive/byteorder`, `archive/version` and
/// `archive/data/KEY` for each storage.
pub fn torch_file(pkl: &[u8], storages: &[(&str, &[u8])]) -> Vec<u8> {
    let names: Vec<String> = storages
        .iter()
        .map(|(k, _)| format!("archive/data/{k}"))
        .collect();
    let mut entries: Vec<(&str, &[u8])> =
        vec![("archive/data.pkl", pkl), ("archive/byteorder", b"little")];
    for ((_, d), n) in storages.iter().zip(&names) {
        entries.push((n, d));
    }
    entries.push(("archive/version", b"3\n"));
    zip(&entries)
}

/// A pickle assembled opcode by opcode (protocol 2, as torch writes `data.pkl`).
pub struct Pk(pub Vec<u8>);

impl Default for Pk {
    fn default() -> Self {
        Pk(vec![0x80, 2])
    }
}

impl Pk {
    /// PROTO 2.
    pub fn new() -> Pk {
        Pk::default()
    }
    /// GLOBAL 'module name'.
    pub fn global(&mut self, module: &str, name: &str) -> &mut Pk {
        self.0.push(b'c');
        self.0
            .extend_from_slice(format!("{module}\n{name}\n").as_bytes());
        self
    }
    /// BINUNICODE.
    pub fn str(&mut self, s: &str) -> &mut Pk {
        self.0.push(b'X');
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    /// BININT.
    pub fn int(&mut self, i: i32) -> &mut Pk {
        self.0.push(b'J');
        self.0.extend_from_slice(&i.to_le_bytes());
        self
    }
    /// One opcode byte: MARK `(`, TUPLE `t`, REDUCE `R`, BINPERSID `Q`, EMPTY_DICT `}`,
    /// SETITEMS `u`, SETITEM `s`, NEWFALSE `0x89`, EMPTY_TUPLE `)`, STOP `.`...
    pub fn op(&mut self, code: u8) -> &mut Pk {
        self.0.push(code);
        self
    }
    /// LONG_BINPUT i.
    pub fn put(&mut self, i: u32) -> &mut Pk {
        self.0.push(b'r');
        self.0.extend_from_slice(&i.to_le_bytes());
        self
    }
    /// LONG_BINGET i.
    pub fn get(&mut self, i: u32) -> &mut Pk {
        self.0.push(b'j');
        self.0.extend_from_slice(&i.to_le_bytes());
        self
    }
    /// A tuple of ints: MARK, BININT each, TUPLE.
    pub fn ints(&mut self, v: &[i32]) -> &mut Pk {
        self.op(b'(');
        for &i in v {
            self.int(i);
        }
        self.op(b't')
    }
    /// `collections.OrderedDict()`: GLOBAL, EMPTY_TUPLE, REDUCE.
    pub fn ordered_dict(&mut self) -> &mut Pk {
        self.global("collections", "OrderedDict").op(b')').op(b'R')
    }
    /// `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())`
    /// with storage the persistent id `('storage', torch.CLASS, KEY, 'cpu', NUMEL)`.
    pub fn tensor(
        &mut self,
        class: &str,
        key: &str,
        numel: i32,
        offset: i32,
        size: &[i32],
        stride: &[i32],
    ) -> &mut Pk {
        self.global("torch._utils", "_rebuild_tensor_v2").op(b'(');
        self.op(b'(')
            .str("storage")
            .global("torch", class)
            .str(key)
            .str("cpu")
            .int(numel)
            .op(b't')
            .op(b'Q');
        self.int(offset).ints(size).ints(stride).op(0x89);
        self.ordered_dict().op(b't').op(b'R')
    }
    /// `torch._utils._rebuild_tensor_v3(storage, offset, size, stride, False, OrderedDict(),
    /// torch.DTYPE)` over the untyped storage `('storage', torch.storage.UntypedStorage, KEY, 'cpu',
    /// NBYTES)`: what torch 2.x writes for float8 and the unsigned types.
    pub fn tensor_v3(
        &mut self,
        dtype: &str,
        key: &str,
        nbytes: i32,
        offset: i32,
        size: &[i32],
        stride: &[i32],
    ) -> &mut Pk {
        self.global("torch._utils", "_rebuild_tensor_v3").op(b'(');
        self.op(b'(')
            .str("storage")
            .global("torch.storage", "UntypedStorage")
            .str(key)
            .str("cpu")
            .int(nbytes)
            .op(b't')
            .op(b'Q');
        self.int(offset).ints(size).ints(stride).op(0x89);
        self.ordered_dict().global("torch", dtype).op(b't').op(b'R')
    }
    /// STOP, and the bytes.
    pub fn finish(&mut self) -> Vec<u8> {
        self.op(b'.');
        self.0.clone()
    }
}

/// Little-endian bytes of f32 values.
pub fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
