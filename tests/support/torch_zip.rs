//! Files shaped as PyTorch and torch.distributed.checkpoint write them, built with the standard
//! library only (inputs paramdex must refuse as foreign, never call corrupt): a `torch.save`
//! zip archive laid out as PyTorch's writer lays it out (stored entries, version-needed 0,
//! flags 0x0808 with a data descriptor after each entry, DOS time and date 0, data aligned to
//! 64 bytes by an `FB` extra field, then the central directory and its end record), a bare
//! pickle, and a DCP `FileSystemWriter` directory.
//!
//! Shared by the library's and the CLI's tests: `#[path = ".../tests/support/torch_zip.rs"]`.
#![allow(dead_code)]

use std::fs;
use std::path::Path;

/// CRC-32 (IEEE, reflected), as zip stores it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A zip archive of `entries` (name, bytes), stored, as PyTorch's writer writes it.
pub fn zip(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        let offset = out.len() as u32;
        let crc = crc32(data);
        // Pad so that the data starts on a 64-byte boundary: an extra field "FB" of zeros.
        let fixed = out.len() + 30 + name.len() + 4;
        let pad = (64 - fixed % 64) % 64;
        let mut extra = b"FB".to_vec();
        extra.extend_from_slice(&(pad as u16).to_le_bytes());
        extra.resize(4 + pad, b'Z');
        out.extend_from_slice(b"PK\x03\x04");
        out.extend_from_slice(&0u16.to_le_bytes()); // version needed
        out.extend_from_slice(&0x0808u16.to_le_bytes()); // flags: data descriptor, UTF-8
        out.extend_from_slice(&0u16.to_le_bytes()); // stored
        out.extend_from_slice(&[0; 4]); // DOS time and date
        out.extend_from_slice(&[0; 12]); // crc, sizes: in the data descriptor
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&extra);
        out.extend_from_slice(data);
        out.extend_from_slice(b"PK\x07\x08");
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());

        central.extend_from_slice(b"PK\x01\x02");
        central.extend_from_slice(&0u16.to_le_bytes()); // version made by
        central.extend_from_slice(&0u16.to_le_bytes()); // version needed
        central.extend_from_slice(&0x0808u16.to_le_bytes());
        central.extend_from_slice(&0u16.to_le_bytes());
        central.extend_from_slice(&[0; 4]);
        central.extend_from_slice(&crc.to_le_bytes());
        central.extend_from_slice(&(data.len() as u32).to_le_bytes());
        central.extend_from_slice(&(data.len() as u32).to_le_bytes());
        central.extend_from_slice(&(name.len() as u16).to_le_bytes());
        central.extend_from_slice(&[0; 12]); // extra, comment, disk, attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let cd_offset = out.len() as u32;
    let n = entries.len() as u16;
    out.extend_from_slice(&central);
    out.extend_from_slice(b"PK\x05\x06");
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// The pickle `torch.save` writes as `data.pkl` for `{"w": tensor}`: its first opcodes (PROTO
/// 2, EMPTY_DICT, ...) and a STOP; paramdex never runs it.
pub fn pickle(protocol: u8) -> Vec<u8> {
    let mut p = vec![0x80, protocol, b'}', b'q', 0, b'X', 1, 0, 0, 0, b'w'];
    p.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\nq\x01.");
    p
}

/// The bytes of a `torch.save` file written to `path` (whose stem names the archive, as
/// PyTorch names it): `STEM/data.pkl`, `STEM/byteorder`, `STEM/data/0` holding `storage`
/// bytes, `STEM/version`, `STEM/.data/serialization_id`.
pub fn torch_save(path: &Path, storage: &[u8]) -> Vec<u8> {
    let stem = path.file_stem().unwrap().to_str().unwrap();
    let entries = vec![
        (format!("{stem}/data.pkl"), pickle(2)),
        (format!("{stem}/byteorder"), b"little".to_vec()),
        (format!("{stem}/data/0"), storage.to_vec()),
        (format!("{stem}/version"), b"3\n".to_vec()),
        (
            format!("{stem}/.data/serialization_id"),
            b"1234567890123456789012345678901234567890".to_vec(),
        ),
    ];
    let bytes = zip(&entries);
    fs::write(path, &bytes).unwrap();
    bytes
}

/// A DCP `FileSystemWriter` directory at `dir`: `.metadata` (a pickle) and `__0_0.distcp`
/// (a tensor's `torch.save` archive named `archive`, as DCP writes each tensor).
pub fn dcp_dir(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(".metadata"), pickle(4)).unwrap();
    let entries = vec![
        ("archive/data.pkl".to_string(), pickle(2)),
        ("archive/data/0".to_string(), vec![0u8; 64]),
        ("archive/version".to_string(), b"3\n".to_vec()),
    ];
    fs::write(dir.join("__0_0.distcp"), zip(&entries)).unwrap();
}

/// A pickle of the shape DCP's `.metadata` has, assembled opcode by opcode (protocol 4).
pub struct DcpPickle(pub Vec<u8>);

impl DcpPickle {
    fn new() -> DcpPickle {
        DcpPickle(vec![0x80, 4])
    }
    fn op(&mut self, c: u8) -> &mut Self {
        self.0.push(c);
        self
    }
    fn global(&mut self, module: &str, name: &str) -> &mut Self {
        self.0.push(b'c');
        self.0
            .extend_from_slice(format!("{module}\n{name}\n").as_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.0.push(b'X');
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn int(&mut self, i: i64) -> &mut Self {
        if let Ok(i) = i32::try_from(i) {
            self.0.push(b'J');
            self.0.extend_from_slice(&i.to_le_bytes());
        } else {
            self.0.extend_from_slice(&[0x8a, 8]);
            self.0.extend_from_slice(&i.to_le_bytes());
        }
        self
    }
    /// `torch.Size(dims)`.
    fn size(&mut self, dims: &[i64]) -> &mut Self {
        self.global("torch", "Size").op(b'(');
        for &d in dims {
            self.int(d);
        }
        self.op(b't').op(0x85).op(b'R')
    }
    /// `cls.__new__(cls)` of a DCP class: GLOBAL, EMPTY_TUPLE, NEWOBJ.
    fn new_obj(&mut self, module: &str, class: &str) -> &mut Self {
        self.global(module, class).op(b')').op(0x81)
    }
    fn meta(&mut self, class: &str) -> &mut Self {
        self.new_obj("torch.distributed.checkpoint.metadata", class)
    }
}

/// One chunk of a DCP tensor: its offsets and sizes in the global tensor, and its data file.
pub struct DcpChunk {
    pub offsets: Vec<i64>,
    pub sizes: Vec<i64>,
    pub file: String,
}

/// What a DCP checkpoint holds: tensors (name, torch dtype, global size, chunks) and
/// non-tensor items (name, bytes).
#[derive(Default)]
pub struct DcpSpec {
    pub tensors: Vec<(String, String, Vec<i64>, Vec<DcpChunk>)>,
    pub bytes: Vec<(String, Vec<u8>, String)>,
    /// Globals named before the metadata (a hostile pickle): (module, name).
    pub extra_global: Option<(String, String)>,
}

/// The `torch.save` archive of a tensor of dtype storage class `class` ("FloatStorage"),
/// shape `size`, contiguous, holding `data`, as DCP writes each chunk.
pub fn torch_tensor_archive(class: &str, size: &[i64], data: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80u8, 2];
    p.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\n(");
    p.extend_from_slice(b"(X\x07\x00\x00\x00storage");
    p.extend_from_slice(format!("ctorch\n{class}\n").as_bytes());
    p.extend_from_slice(b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpu");
    let es = match class {
        "FloatStorage" | "IntStorage" => 4,
        "DoubleStorage" | "LongStorage" => 8,
        "HalfStorage" | "BFloat16Storage" => 2,
        _ => 1,
    };
    let numel = (data.len() / es) as i32;
    p.push(b'J');
    p.extend_from_slice(&numel.to_le_bytes());
    p.extend_from_slice(b"tQ");
    p.push(b'J');
    p.extend_from_slice(&0i32.to_le_bytes());
    // size and row-major stride
    let mut stride = vec![1i64; size.len()];
    for d in (0..size.len().saturating_sub(1)).rev() {
        stride[d] = stride[d + 1] * size[d + 1];
    }
    for v in [size, &stride[..]] {
        p.push(b'(');
        for &x in v {
            p.push(b'J');
            p.extend_from_slice(&(x as i32).to_le_bytes());
        }
        p.push(b't');
    }
    p.push(0x89);
    p.extend_from_slice(b"ccollections\nOrderedDict\n)RtR.");
    zip(&[
        ("archive/data.pkl".to_string(), p),
        ("archive/byteorder".to_string(), b"little".to_vec()),
        ("archive/data/0".to_string(), data.to_vec()),
        ("archive/version".to_string(), b"3\n".to_vec()),
    ])
}

/// The `torch.save` archive of a Python int, as DCP writes a non-tensor `step`.
pub fn torch_int_archive(v: i32) -> Vec<u8> {
    let mut p = vec![0x80u8, 2, b'J'];
    p.extend_from_slice(&v.to_le_bytes());
    p.push(b'.');
    zip(&[
        ("archive/data.pkl".to_string(), p),
        ("archive/byteorder".to_string(), b"little".to_vec()),
        ("archive/version".to_string(), b"3\n".to_vec()),
    ])
}

/// Writes a DCP `FileSystemWriter` checkpoint to `dir`: each chunk's archive (`archive_of`
/// gives its bytes: tensor name, chunk index) appended to its data file, then `.metadata`
/// describing `spec`. Returns the `.metadata` bytes.
pub fn dcp_checkpoint(
    dir: &Path,
    spec: &DcpSpec,
    archive_of: &dyn Fn(&str, usize) -> Vec<u8>,
) -> Vec<u8> {
    fs::create_dir_all(dir).unwrap();
    let mut files: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
    // (fqn, offsets or None, file, offset, length)
    let mut storage = Vec::new();
    for (name, _, _, chunks) in &spec.tensors {
        for (i, c) in chunks.iter().enumerate() {
            let f = files.entry(c.file.clone()).or_default();
            let a = archive_of(name, i);
            storage.push((
                name.clone(),
                Some(c.offsets.clone()),
                c.file.clone(),
                f.len(),
                a.len(),
            ));
            f.extend_from_slice(&a);
        }
    }
    for (name, b, file) in &spec.bytes {
        let f = files.entry(file.clone()).or_default();
        storage.push((name.clone(), None, file.clone(), f.len(), b.len()));
        f.extend_from_slice(b);
    }
    for (f, b) in &files {
        fs::write(dir.join(f), b).unwrap();
    }
    let mut p = DcpPickle::new();
    if let Some((m, n)) = &spec.extra_global {
        p.global(m, n).op(b'0');
    }
    p.meta("Metadata").op(b'}').op(b'(');
    p.str("state_dict_metadata").op(b'}').op(b'(');
    for (name, dtype, size, chunks) in &spec.tensors {
        p.str(name).meta("TensorStorageMetadata").op(b'}').op(b'(');
        p.str("properties").meta("TensorProperties").op(b'(');
        p.global("torch", dtype)
            .global("torch.serialization", "_get_layout")
            .str("torch.strided")
            .op(0x85)
            .op(b'R')
            .op(0x89)
            .global(
                "torch.distributed.checkpoint.metadata",
                "_MEM_FORMAT_ENCODING",
            )
            .int(0)
            .op(0x85)
            .op(b'R')
            .op(0x89)
            .op(b't')
            .op(b'b');
        p.str("size").size(size);
        p.str("chunks").op(b']').op(b'(');
        for c in chunks {
            p.meta("ChunkStorageMetadata").op(b'}').op(b'(');
            p.str("offsets").size(&c.offsets);
            p.str("sizes").size(&c.sizes);
            p.op(b'u').op(b'b');
        }
        p.op(b'e').op(b'u').op(b'b');
    }
    for (name, _, _) in &spec.bytes {
        p.str(name).meta("BytesStorageMetadata");
    }
    p.op(b'u');
    p.str("planner_data").op(b'N');
    p.str("storage_data").op(b'}').op(b'(');
    for (fqn, offsets, file, offset, len) in &storage {
        p.meta("MetadataIndex").op(b'}').op(b'(');
        p.str("fqn").str(fqn).str("offset");
        match offsets {
            Some(o) => p.size(o),
            None => p.op(b'N'),
        };
        p.str("index").int(0).op(b'u').op(b'b');
        p.new_obj("torch.distributed.checkpoint.filesystem", "_StorageInfo")
            .op(b'}')
            .op(b'(');
        p.str("relative_path")
            .str(file)
            .str("offset")
            .int(*offset as i64)
            .str("length")
            .int(*len as i64)
            .op(b'u')
            .op(b'b');
    }
    p.op(b'u');
    p.str("version").str("1.0.0").op(b'u').op(b'b').op(b'.');
    fs::write(dir.join(".metadata"), &p.0).unwrap();
    p.0
}
