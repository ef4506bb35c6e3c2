//! GGUF files built by hand, byte by byte (no writer of ours involved): every metadata value
//! type, every ggml type's block size, hostile files refused with an error naming what is
//! wrong, and every truncation of a valid file refused without a panic.

use paramdex::interop::gguf::{GgmlType, GgufStore, GGML_TYPES};
use paramdex::interop::{open_any, Format, Kind, TensorData, TensorStore};
use paramdex::{Error, MetaValue, Region};

/// A GGUF file under construction: key/value pairs, tensor infos and data, in order.
#[derive(Default, Clone)]
struct G {
    version: u32,
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_t: u64,
    data: Vec<u8>,
    alignment: u64,
    /// Counts to write instead of the real ones (hostile files).
    fake_counts: Option<(u64, u64)>,
}

fn s(out: &mut Vec<u8>, v: &[u8]) {
    out.extend_from_slice(&(v.len() as u64).to_le_bytes());
    out.extend_from_slice(v);
}

impl G {
    fn new() -> G {
        G {
            version: 3,
            alignment: 32,
            ..G::default()
        }
    }

    /// A key with a raw value (its type and bytes).
    fn kv(mut self, key: &str, ty: u32, value: &[u8]) -> G {
        s(&mut self.kv, key.as_bytes());
        self.kv.extend_from_slice(&ty.to_le_bytes());
        self.kv.extend_from_slice(value);
        self.n_kv += 1;
        self
    }

    /// A tensor with row-major `shape`, ggml type `ty`, and `data`, placed at the next aligned
    /// offset of the data section.
    fn tensor(mut self, name: &str, shape: &[u64], ty: u32, data: &[u8]) -> G {
        let at = (self.data.len() as u64).next_multiple_of(self.alignment);
        self.data.resize(at as usize, 0);
        self.tensor_at(name, shape, ty, at);
        self.data.extend_from_slice(data);
        self
    }

    fn tensor_at(&mut self, name: &str, shape: &[u64], ty: u32, offset: u64) {
        s(&mut self.infos, name.as_bytes());
        self.infos
            .extend_from_slice(&(shape.len() as u32).to_le_bytes());
        for d in shape.iter().rev() {
            self.infos.extend_from_slice(&d.to_le_bytes());
        }
        self.infos.extend_from_slice(&ty.to_le_bytes());
        self.infos.extend_from_slice(&offset.to_le_bytes());
        self.n_t += 1;
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        let (n_t, n_kv) = self.fake_counts.unwrap_or((self.n_t, self.n_kv));
        out.extend_from_slice(&n_t.to_le_bytes());
        out.extend_from_slice(&n_kv.to_le_bytes());
        out.extend_from_slice(&self.kv);
        out.extend_from_slice(&self.infos);
        let pad = (out.len() as u64).next_multiple_of(self.alignment) as usize;
        out.resize(pad, 0);
        out.extend_from_slice(&self.data);
        out
    }

    fn open(&self) -> paramdex::Result<GgufStore> {
        GgufStore::from_bytes(self.bytes())
    }
}

fn u32v(v: u32) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn array(elem: u32, count: u64, body: &[u8]) -> Vec<u8> {
    let mut out = elem.to_le_bytes().to_vec();
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(body);
    out
}

fn string(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    s(&mut out, v);
    out
}

#[test]
fn every_value_type_is_metadata() {
    let strings: Vec<u8> = [string(b"a"), string(b"bc"), string(b"")].concat();
    let inner = [
        array(0, 2, &[1, 2]),
        array(8, 1, &string(b"x")),
        array(9, 1, &array(5, 1, &(-7i32).to_le_bytes())),
    ]
    .concat();
    let g = G::new()
        .kv("u8", 0, &[200])
        .kv("i8", 1, &[0xff])
        .kv("u16", 2, &60000u16.to_le_bytes())
        .kv("i16", 3, &(-3i16).to_le_bytes())
        .kv("u32", 4, &u32v(4_000_000_000))
        .kv("i32", 5, &(-5i32).to_le_bytes())
        .kv("f32", 6, &1.5f32.to_le_bytes())
        .kv("bool", 7, &[1])
        .kv("string", 8, &string("héllo".as_bytes()))
        .kv("not_utf8", 8, &string(&[0xff, 0xfe]))
        .kv("strings", 9, &array(8, 3, &strings))
        .kv("u64", 10, &u64::MAX.to_le_bytes())
        .kv("i64", 11, &i64::MIN.to_le_bytes())
        .kv("f64", 12, &0.25f64.to_le_bytes())
        .kv("nested", 9, &array(9, 3, &inner))
        .kv("empty", 9, &array(6, 0, &[]));
    let st = g.open().unwrap();
    let m = st.metadata().unwrap();
    let i = MetaValue::Int;
    assert_eq!(m.get("u8"), Some(&i(200)));
    assert_eq!(m.get("i8"), Some(&i(-1)));
    assert_eq!(m.get("u16"), Some(&i(60000)));
    assert_eq!(m.get("i16"), Some(&i(-3)));
    assert_eq!(m.get("u32"), Some(&i(4_000_000_000)));
    assert_eq!(m.get("i32"), Some(&i(-5)));
    assert_eq!(m.get("f32"), Some(&MetaValue::Float(1.5)));
    assert_eq!(m.get("bool"), Some(&MetaValue::Bool(true)));
    assert_eq!(m.get("string"), Some(&MetaValue::String("héllo".into())));
    assert_eq!(m.get("not_utf8"), Some(&MetaValue::Bytes(vec![0xff, 0xfe])));
    assert_eq!(
        m.get("strings"),
        Some(&MetaValue::List(vec!["a".into(), "bc".into(), "".into()]))
    );
    assert_eq!(m.get("u64"), Some(&MetaValue::String(u64::MAX.to_string())));
    assert_eq!(m.get("i64"), Some(&i(i64::MIN)));
    assert_eq!(m.get("f64"), Some(&MetaValue::Float(0.25)));
    assert_eq!(
        m.get("nested"),
        Some(&MetaValue::List(vec![
            MetaValue::List(vec![i(1), i(2)]),
            MetaValue::List(vec!["x".into()]),
            MetaValue::List(vec![MetaValue::List(vec![i(-7)])]),
        ]))
    );
    assert_eq!(m.get("empty"), Some(&MetaValue::List(vec![])));
    // The keys' GGUF types, in file order, under the reserved key.
    assert_eq!(m.len(), 17);
    let Some(MetaValue::List(types)) = m.get("paramdex.gguf.types") else {
        panic!("no types")
    };
    let ty = |i: usize| match &types[i] {
        MetaValue::List(kv) => (kv[0].to_text(), kv[1].to_text()),
        other => panic!("{other:?}"),
    };
    assert_eq!(ty(0), ("u8".into(), "uint8".into()));
    assert_eq!(ty(10), ("strings".into(), "array[string]".into()));
    assert_eq!(
        ty(14),
        (
            "nested".into(),
            "array[array[uint8],array[string],array[array[int32]]]".into()
        )
    );
    assert_eq!(ty(15), ("empty".into(), "array[float32]".into()));
    // Keys in file order with their GGUF types, no value decoded.
    let keys: Vec<(&[u8], &str)> = st.keys().collect();
    assert_eq!(keys[0], (&b"u8"[..], "uint8"));
    assert_eq!(keys[10], (&b"strings"[..], "array"));
    assert_eq!(st.value(b"i16").unwrap(), Some(i(-3)));
    assert_eq!(st.value(b"absent").unwrap(), None);
    assert_eq!(st.version(), 3);
}

#[test]
fn every_ggml_type_lists_with_its_block_size_and_loads_its_blocks() {
    let mut g = G::new().kv("general.architecture", 8, &string(b"test"));
    let mut expect = Vec::new();
    for t in GGML_TYPES {
        let shape = [2u64, 3, t.block * 2];
        let n = 2 * 3 * 2 * t.bytes;
        let data: Vec<u8> = (0..n).map(|i| (i as u8) ^ (t.code as u8)).collect();
        let name = format!("t.{}", t.name);
        g = g.tensor(&name, &shape, t.code, &data);
        expect.push((name, *t, shape, data));
    }
    // v2 files are read the same way.
    for version in [2, 3] {
        g.version = version;
        let st = g.open().unwrap();
        assert_eq!(st.format(), Format::Gguf);
        let list = st.list().unwrap();
        assert_eq!(list.len(), GGML_TYPES.len());
        for (name, t, shape, data) in &expect {
            let info = list.iter().find(|i| i.name == name.as_bytes()).unwrap();
            assert_eq!(info.shape, shape);
            assert_eq!(info.nbytes, data.len() as u64, "{name}");
            match t.plain {
                Some(d) => assert_eq!(info.kind, Kind::Numeric(d)),
                None => {
                    assert_eq!(info.kind.name(), t.name);
                    assert!(info.kind.is_opaque());
                }
            }
            let loaded = st.load(name.as_bytes()).unwrap().unwrap();
            let TensorData::Bytes(b) = loaded.data else {
                panic!()
            };
            assert_eq!(&b[..], &data[..], "{name}");
            let loc = st.data_location(name.as_bytes()).unwrap().unwrap();
            assert_eq!(loc.len, data.len() as u64);
            assert_eq!(loc.offset % 32, 0);
        }
        let v = st.verify(1).unwrap();
        assert_eq!(v.tensors, GGML_TYPES.len() as u64);
    }
    // The sizes gguf-py 0.19 lists in GGML_QUANT_SIZES, spot-checked.
    let size = |n: &str| {
        let t = GgmlType::from_name(n).unwrap();
        (t.block, t.bytes)
    };
    assert_eq!(size("q4_0"), (32, 18));
    assert_eq!(size("q8_0"), (32, 34));
    assert_eq!(size("q2_k"), (256, 84));
    assert_eq!(size("q6_k"), (256, 210));
    assert_eq!(size("iq2_xxs"), (256, 66));
    assert_eq!(size("iq1_m"), (256, 56));
    assert_eq!(size("tq1_0"), (256, 54));
    assert_eq!(size("mxfp4"), (32, 17));
}

#[test]
fn a_block_tensor_is_read_by_whole_rows() {
    let q8 = GgmlType::from_name("q8_0").unwrap();
    let data: Vec<u8> = (0..4 * 34).map(|i| i as u8).collect();
    let st = G::new()
        .tensor("w", &[4, 32], q8.code, &data)
        .open()
        .unwrap();
    let r = Region::new(vec![1, 0], vec![2, 32]).unwrap();
    let t = st.load_slice(b"w", &r).unwrap().unwrap();
    let TensorData::Bytes(b) = t.data else {
        panic!()
    };
    assert_eq!(&b[..], &data[34..3 * 34]);
    assert_eq!(t.info.shape, vec![2, 32]);
    let part = Region::new(vec![0, 0], vec![1, 16]).unwrap();
    let e = st.load_slice(b"w", &part).unwrap_err();
    assert!(e.to_string().contains("whole rows"), "{e}");
}

#[test]
fn detected_by_content_whatever_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("weights.bin");
    let data = 1.0f32.to_le_bytes().repeat(4);
    std::fs::write(&p, G::new().tensor("x", &[4], 0, &data).bytes()).unwrap();
    let st = open_any(&p).unwrap();
    assert_eq!(st.format(), Format::Gguf);
    assert_eq!(st.list().unwrap()[0].shape, vec![4]);
    let layout = st.layout().unwrap();
    assert_eq!(layout.alignment, Some(32));
}

/// The error of opening `g`, as text.
fn refused(g: &G) -> String {
    match g.open() {
        Ok(_) => panic!("a hostile file was opened"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn hostile_files_are_refused_naming_what_and_where() {
    let f32s = [0u8; 16];
    let ok = G::new().tensor("x", &[4], 0, &f32s);
    ok.open().unwrap();

    let mut g = ok.clone();
    g.fake_counts = Some((u64::MAX, 0));
    assert!(refused(&g).contains("tensor count"));
    g.fake_counts = Some((1, 1 << 60));
    assert!(refused(&g).contains("key/value count"));

    // A string length far past the file.
    let mut g = G::new();
    g.kv.extend_from_slice(&u64::MAX.to_le_bytes());
    g.kv.extend_from_slice(&[0; 32]);
    g.n_kv = 1;
    let e = refused(&g);
    assert!(e.contains("key 0") && e.contains("above the limit"), "{e}");
    let g = G::new().kv("k", 8, &(1u64 << 40).to_le_bytes());
    let e = refused(&g);
    assert!(e.contains("key k") && e.contains("are left in the"), "{e}");
    // An array declaring more elements than the file holds.
    let g = G::new().kv("k", 9, &array(10, u64::MAX / 4, &[]));
    assert!(refused(&g).contains("more than the"));
    let g = G::new().kv("k", 9, &array(8, 1 << 40, &[]));
    assert!(refused(&g).contains("more than the"));
    let g = G::new().kv("k", 13, &[0; 8]);
    assert!(refused(&g).contains("unknown value type 13"));
    // Arrays nested past the limit.
    let mut deep = array(0, 0, &[]);
    for _ in 0..20 {
        deep = array(9, 1, &deep);
    }
    assert!(refused(&G::new().kv("k", 9, &deep)).contains("deeper"));

    for (a, why) in [(0u32, "0, not a power"), (3, "3, not a power")] {
        let g = G::new().kv("general.alignment", 4, &u32v(a));
        assert!(refused(&g).contains(why), "{a}");
    }
    let g = G::new().kv("general.alignment", 8, &string(b"32"));
    assert!(refused(&g).contains("not an unsigned integer"));
    let g = G::new().kv("k", 0, &[1]).kv("k", 0, &[2]);
    assert!(refused(&g).contains("key k appears twice"));

    // Tensors: out of the file, overlapping, of an unknown type, of 9 dimensions, not whole
    // blocks, unaligned, twice the same name.
    let mut g = G::new();
    g.tensor_at("x", &[4], 0, 1 << 20);
    let e = refused(&g);
    assert!(e.contains("tensor x") && e.contains("outside"), "{e}");
    let mut g = G::new();
    g.tensor_at("x", &[4], 0, u64::MAX - 31);
    assert!(refused(&g).contains("outside"));
    let mut g = ok.clone();
    g.tensor_at("y", &[2], 0, 0);
    let e = refused(&g);
    assert!(
        e.contains("overlap") && e.contains("x") && e.contains("y"),
        "{e}"
    );
    for code in [4u32, 31, 1000] {
        let mut g = ok.clone();
        g.tensor_at("z", &[4], code, 0);
        match g.open() {
            Err(Error::UnknownDType {
                system,
                code: c,
                location,
            }) => {
                assert_eq!((system, c), ("ggml", i64::from(code)));
                assert!(location.unwrap().contains("tensor z"));
            }
            other => panic!("{other:?}"),
        }
    }
    let mut g = G::new();
    g.tensor_at("deep", &[1; 9], 0, 0);
    assert!(refused(&g).contains("tensor deep has 9 dimensions"));
    let e = refused(&G::new().tensor("q", &[2, 16], 2, &[0; 36]));
    assert!(e.contains("whole number of 32-element blocks"), "{e}");
    let e = refused(&G::new().tensor("q", &[], 2, &[0; 18]));
    assert!(e.contains("whole number"), "{e}");
    let mut g = ok.clone();
    g.tensor_at("u", &[1], 0, 8);
    assert!(refused(&g).contains("not a multiple of the alignment"));
    let g = G::new()
        .tensor("x", &[1], 0, &[0; 4])
        .tensor("x", &[1], 0, &[0; 4]);
    assert!(refused(&g).contains("tensor x appears twice"));
    let mut g = ok.clone();
    g.tensor_at("huge", &[u64::MAX], 0, 0);
    assert!(refused(&g).contains("i64::MAX"));
    let mut g = ok.clone();
    g.tensor_at("big", &[1 << 62, 1 << 62], 0, 0);
    assert!(refused(&g).contains("overflows"));

    let mut g = ok.clone();
    g.version = 1;
    assert!(refused(&g).contains("version 1"));
    g.version = 3u32.swap_bytes();
    assert!(refused(&g).contains("big-endian"));
    g.version = 7;
    assert!(refused(&g).contains("version 7"));
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let mut g = G::new();
    g.alignment = 64;
    let g = g
        .kv("general.alignment", 4, &u32v(64))
        .kv(
            "tokens",
            9,
            &array(8, 2, &[string(b"ab"), string(b"c")].concat()),
        )
        .tensor("a", &[2, 32], 8, &[7; 68])
        .tensor("b", &[3], 0, &[1; 12]);
    let bytes = g.bytes();
    let st = GgufStore::from_bytes(bytes.clone()).unwrap();
    assert_eq!(st.alignment(), 64);
    assert_eq!(st.data_start() % 64, 0);
    for n in 0..bytes.len() {
        if GgufStore::from_bytes(bytes[..n].to_vec()).is_ok() {
            panic!("a file cut at {n} of {} bytes opened", bytes.len());
        }
    }
}

/// A file with keys of every value type (arrays of arrays, a non-UTF-8 string, a uint64 above
/// i64::MAX, a NaN float32), an alignment of 64, and plain tensors.
fn typed_file() -> G {
    let mut g = G::new();
    g.alignment = 64;
    let inner = [array(0, 2, &[1, 2]), array(8, 1, &string(b"x"))].concat();
    g.kv("general.alignment", 4, &u32v(64))
        .kv("z.first", 1, &[0x80])
        .kv("a.u16", 2, &7u16.to_le_bytes())
        .kv("i16", 3, &(-3i16).to_le_bytes())
        .kv("nan", 6, &f32::from_bits(0x7fc0_0001).to_le_bytes())
        .kv("f32", 6, &0.1f32.to_le_bytes())
        .kv("b", 7, &[0])
        .kv("raw", 8, &string(&[0xff]))
        .kv("u64", 10, &u64::MAX.to_le_bytes())
        .kv("i64", 11, &(-1i64).to_le_bytes())
        .kv("f64", 12, &0.1f64.to_le_bytes())
        .kv(
            "tokens",
            9,
            &array(8, 2, &[string(b"<s>"), string(b"a")].concat()),
        )
        .kv(
            "scores",
            9,
            &array(6, 2, &[1f32.to_le_bytes(), 2f32.to_le_bytes()].concat()),
        )
        .kv("nested", 9, &array(9, 2, &inner))
        .kv("none", 9, &array(9, 0, &[]))
        .tensor("w", &[2, 3], 0, &[3; 24])
        .tensor("h", &[5], 1, &[4; 10])
        .tensor("s", &[], 28, &[5; 8])
}

/// The key/value section of a GGUF file: its bytes from the key count to the tensor infos.
fn kv_bytes(b: &[u8], n_kv_end: usize) -> &[u8] {
    &b[16..n_kv_end]
}

#[test]
fn gguf_to_paramdex_to_gguf_keeps_every_key_type_and_byte() {
    use paramdex::interop::{export, ExportOptions, OutputFormat};
    let dir = tempfile::tempdir().unwrap();
    let g = typed_file();
    let src = dir.path().join("in.gguf");
    std::fs::write(&src, g.bytes()).unwrap();
    let direct = dir.path().join("direct.gguf");
    let pdx = dir.path().join("mid.pdx");
    let back = dir.path().join("back.gguf");
    let opts = ExportOptions::default();
    let input = open_any(&src).unwrap();
    export(&*input, OutputFormat::Gguf, &direct, &opts).unwrap();
    export(&*input, OutputFormat::Native, &pdx, &opts).unwrap();
    let mid = open_any(&pdx).unwrap();
    assert_eq!(mid.format(), Format::Native);
    export(&*mid, OutputFormat::Gguf, &back, &opts).unwrap();
    let want = g.bytes();
    let kv_end = 24 + g.kv.len();
    for out in [&direct, &back] {
        let got = std::fs::read(out).unwrap();
        // The same key/value section byte for byte (every key, its type, its order, its
        // value), the same tensors (in name order) and the same alignment.
        assert_eq!(kv_bytes(&got, kv_end), kv_bytes(&want, kv_end), "{out:?}");
        let a = GgufStore::from_bytes(want.clone()).unwrap();
        let b = GgufStore::from_bytes(got).unwrap();
        assert_eq!(b.alignment(), 64);
        assert_eq!(a.list().unwrap(), b.list().unwrap());
        for t in a.list().unwrap() {
            let x = a.load(&t.name).unwrap().unwrap();
            let y = b.load(&t.name).unwrap().unwrap();
            assert_eq!(x.data.raw_bytes(), y.data.raw_bytes());
            assert_eq!(b.data_location(&t.name).unwrap().unwrap().offset % 64, 0);
        }
        assert_eq!(a.metadata().unwrap(), b.metadata().unwrap());
    }
}

#[test]
fn block_tensors_round_trip_and_other_outputs_refuse_them() {
    use paramdex::interop::{export, ExportOptions, OutputFormat};
    let dir = tempfile::tempdir().unwrap();
    let q4k = GgmlType::from_name("q4_k").unwrap();
    let blocks: Vec<u8> = (0..2 * 144).map(|i| (i * 7) as u8).collect();
    let g = G::new()
        .kv("general.architecture", 8, &string(b"llama"))
        .tensor("blk.0.w", &[2, 256], q4k.code, &blocks)
        .tensor("norm", &[4], 0, &[1; 16]);
    let st = GgufStore::from_bytes(g.bytes()).unwrap();
    let out = dir.path().join("out.gguf");
    export(&st, OutputFormat::Gguf, &out, &ExportOptions::default()).unwrap();
    let back = GgufStore::open(&out).unwrap();
    let t = back.load(b"blk.0.w").unwrap().unwrap();
    assert_eq!(t.info.kind.name(), "q4_k");
    assert_eq!(t.info.shape, vec![2, 256]);
    assert_eq!(&t.data.raw_bytes()[..], &blocks[..]);
    for f in [
        OutputFormat::Safetensors,
        OutputFormat::TensorFlow,
        OutputFormat::PaddleCombined,
        OutputFormat::Native,
    ] {
        let dst = dir.path().join(format!("out.{}", f.name()));
        let e = export(&st, f, &dst, &ExportOptions::default()).unwrap_err();
        assert!(e.to_string().contains("q4_k"), "{f:?}: {e}");
        let opts = ExportOptions {
            skip_unsupported: true,
            ..ExportOptions::default()
        };
        let rep = export(&st, f, &dst, &opts).unwrap();
        assert_eq!(rep.skipped.len(), 1, "{f:?}");
    }
}

#[test]
fn other_inputs_metadata_become_strings_and_gguf_refuses_what_it_cannot_hold() {
    use paramdex::interop::{export, ExportOptions, OutputFormat};
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.pdx");
    let mut w = paramdex::Writer::create(&src).unwrap();
    w.add_values("a", &[2], &[1.0f32, 2.0]).unwrap();
    w.add_values("flags", &[2], &[1u8, 0]).unwrap();
    let mut m = paramdex::Metadata::new();
    m.insert("step", 12i64).unwrap();
    m.insert("name", "run").unwrap();
    w.set_metadata(m).unwrap();
    w.finish().unwrap();
    let input = open_any(&src).unwrap();
    let out = dir.path().join("out.gguf");
    let e = export(&*input, OutputFormat::Gguf, &out, &ExportOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains("uint8, which GGUF has no type for"),
        "{e}"
    );
    let opts = ExportOptions {
        skip_unsupported: true,
        ..ExportOptions::default()
    };
    export(&*input, OutputFormat::Gguf, &out, &opts).unwrap();
    let back = GgufStore::open(&out).unwrap();
    let keys: Vec<(&[u8], &str)> = back.keys().collect();
    assert_eq!(
        keys,
        vec![(&b"name"[..], "string"), (&b"step"[..], "string")]
    );
    assert_eq!(
        back.value(b"step").unwrap(),
        Some(MetaValue::String("12".into()))
    );
    assert_eq!(back.list().unwrap().len(), 1);
}

/// An object (`file://`: object storage, the `s3` feature) whose head is far longer than the
/// first read: the head is read on until the tensor infos end, then each tensor by one read;
/// it lists, loads and decodes as the local file does. A hostile object is refused the same.
#[cfg(feature = "s3")]
#[test]
fn an_object_reads_as_the_local_file() {
    let dir = tempfile::tempdir().unwrap();
    let tokens: Vec<u8> = (0..40_000)
        .flat_map(|i| string(format!("token{i}").as_bytes()))
        .collect();
    let g = G::new()
        .kv("tokenizer.ggml.tokens", 9, &array(8, 40_000, &tokens))
        .tensor("b", &[2, 32], 8, &[9; 68])
        .tensor("a", &[3], 0, &[1; 12]);
    let p = dir.path().join("model.gguf");
    std::fs::write(&p, g.bytes()).unwrap();
    assert!(g.bytes().len() > 256 << 10);
    let url = format!("file://{}", p.display());
    let (local, remote) = (open_any(&p).unwrap(), open_any(&url).unwrap());
    assert_eq!(remote.format(), Format::Gguf);
    assert_eq!(local.list().unwrap(), remote.list().unwrap());
    for name in [&b"a"[..], b"b"] {
        let x = local.load(name).unwrap().unwrap();
        let y = remote.load(name).unwrap().unwrap();
        assert_eq!(x.data.raw_bytes(), y.data.raw_bytes());
    }
    assert_eq!(local.metadata().unwrap(), remote.metadata().unwrap());
    let mut bad = g.clone();
    bad.tensor_at("c", &[4], 0, 1 << 30);
    std::fs::write(&p, bad.bytes()).unwrap();
    let e = open_any(&url).err().unwrap().to_string();
    assert!(e.contains("tensor c") && e.contains("outside"), "{e}");
}
