//! Why the varints are hand-written (`src/format/varint.rs`) and not `integer-encoding`:
//! strictness first, then speed, side by side in one run.
//!
//! ```text
//! cargo bench --bench varint -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Before measuring, it checks the strictness difference that decides the 32-bit case: LevelDB
//! (and paramdex) reject a varint32 longer than 5 bytes; `integer-encoding`'s
//! `u32::decode_var` decodes it as a u64 and accepts it. The stream measured is 10,000 values
//! as the `get` path decodes them in index blocks: entry headers (shared, non-shared and value
//! lengths, mostly 1-2 bytes) with a block handle (3-5 bytes) after every 8th entry. Both
//! decoders are called across a crate boundary here; inside paramdex ours is inlined into its
//! callers, which the crate's `u32::decode_var` (not `#[inline]`) never is.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use integer_encoding::VarInt;
use paramdex::raw::format::{get_varint32, get_varint64, put_varint64};

/// The value stream (deterministic xorshift; see the module doc).
fn values() -> Vec<u32> {
    let mut s = 0x1234_5678_9abc_def1u64;
    let mut next = move |lo: u64, hi: u64| {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        lo + s.wrapping_mul(0x2545_f491_4f6c_dd1d) % (hi - lo)
    };
    let mut v = Vec::with_capacity(10_000);
    let mut entries = 0u64;
    while v.len() < 10_000 {
        v.push(next(0, 40) as u32); // shared prefix length
        v.push(if next(0, 10) == 0 {
            next(128, 300)
        } else {
            next(1, 64)
        } as u32);
        v.push(match next(0, 20) {
            0..=9 => next(0, 128),
            10..=16 => next(128, 1 << 14),
            _ => next(1 << 14, 1 << 21),
        } as u32); // value length
        entries += 1;
        if entries.is_multiple_of(8) {
            v.push(next(1 << 14, 1 << 32) as u32); // block handle: offset
            v.push(next(1 << 10, 1 << 22) as u32); // and size
        }
    }
    v
}

fn bench(c: &mut Criterion) {
    // Strictness: a 6-byte varint32 (value 0) is malformed for LevelDB.
    let overlong = [0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
    assert_eq!(get_varint32(&overlong), None);
    assert_eq!(u32::decode_var(&overlong), Some((0, 6)));
    eprintln!(
        "varint32 [80 80 80 80 80 00]: paramdex None (rejected), integer-encoding Some((0, 6))"
    );

    let vals = values();
    let mut buf = Vec::new();
    for &x in &vals {
        put_varint64(&mut buf, u64::from(x));
    }
    macro_rules! decode_all {
        ($f:expr) => {
            || {
                let buf = black_box(&buf[..]);
                let (mut pos, mut sum) = (0, 0u64);
                while pos < buf.len() {
                    let (v, n) = $f(&buf[pos..]).expect("a well-formed stream");
                    sum += u64::from(v);
                    pos += n;
                }
                sum
            }
        };
    }
    for (name, width) in [("varint32 decode", 32), ("varint64 decode", 64)] {
        let mut g = c.benchmark_group(name);
        g.throughput(Throughput::Elements(vals.len() as u64));
        if width == 32 {
            g.bench_function("paramdex", |b| b.iter(decode_all!(get_varint32)));
            g.bench_function("integer-encoding", |b| b.iter(decode_all!(u32::decode_var)));
        } else {
            g.bench_function("paramdex", |b| b.iter(decode_all!(get_varint64)));
            g.bench_function("integer-encoding", |b| b.iter(decode_all!(u64::decode_var)));
        }
        g.finish();
    }
    let mut g = c.benchmark_group("varint encode");
    g.throughput(Throughput::Elements(vals.len() as u64));
    let mut out = Vec::with_capacity(buf.len() + 16);
    g.bench_function("paramdex", |b| {
        b.iter(|| {
            out.clear();
            for &x in black_box(&vals) {
                put_varint64(&mut out, u64::from(x));
            }
            out.len()
        })
    });
    g.bench_function("integer-encoding", |b| {
        b.iter(|| {
            out.clear();
            let mut t = [0u8; 10];
            for &x in black_box(&vals) {
                let n = u64::from(x).encode_var(&mut t);
                out.extend_from_slice(&t[..n]);
            }
            out.len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
