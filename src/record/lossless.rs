//! Lossless compression of a record's data (SPEC.md 3.4): byte grouping by dtype, then zstd
//! over each group's stream where it pays, in chunks that decode independently.
//!
//! A float's bytes are not alike: its exponent byte takes few values (weights of one layer sit
//! within a few binades), its mantissa bytes are close to random. Grouping the k-th byte of
//! every element into stream k (after rotating each little-endian word left by one bit, so that
//! the sign joins the low mantissa byte and the whole exponent of a bfloat16 or float32 sits in
//! the top byte) gives an exponent stream that an entropy coder shrinks to about a third, and
//! mantissa streams that it cannot shrink, which are stored raw. This is ZipNN's method; the
//! entropy stage is zstd (level 1, tuned to find few matches), measured against the alternatives in BENCHMARKS.md.
//!
//! The data is cut into chunks of `2^chunk_log2` decoded bytes (the last one shorter), each with
//! its own streams and a CRC32C of its stored bytes: one tensor decodes on several threads, a
//! region of it decodes only the chunks it meets, and `verify` names the damaged chunk.
//!
//! Its own file because it is the one codec of compressed data, used by the writer (encode)
//! and by every reader (decode, verify); the record header that announces it is `desc.rs`'s.
//! Every length read here is checked with checked arithmetic against the stored bytes before it
//! is used; decoding never panics, and allocates only the decoded tensor (whose length the
//! chunk table bounds: at most `2^chunk_log2` bytes per table row), after the table is checked.

use std::ops::Range;
use std::sync::Mutex;

use crate::dtype::DType;
use crate::error::{CompressedProblem, Error, Result};
use crate::format::{crc32c, mask_crc, unmask_crc};

/// The codec number of this layout (record field `pdx_codec`, entry field 19).
pub const CODEC_LOSSLESS: u32 = 1;
/// The layout version, byte 0 of the stored data.
const LAYOUT_VERSION: u8 = 1;
/// log2 of the chunk size writers use: 1 MiB of decoded bytes (measured for issue 40 at plain
/// level 1: 256 KiB chunks gave 1.446 on synthetic bfloat16 against 1.458 for 1 MiB; a 16 MiB
/// tensor still decodes on every thread).
pub const CHUNK_LOG2: u8 = 20;
/// The chunk sizes a reader accepts: 64 KiB to 1 MiB. The upper bound is what bounds a decoded
/// length by the stored one (one table row of at least 12 bytes per chunk).
const MIN_CHUNK_LOG2: u8 = 16;
const MAX_CHUNK_LOG2: u8 = 20;
/// Bytes of the layout header: version, width, transform, chunk log2, chunk count (fixed32),
/// decoded length (fixed64).
const HEADER_LEN: usize = 16;
/// Bit 31 of a stream's table word: the stream is a zstd frame (else stored raw).
const STREAM_ZSTD: u32 = 1 << 31;
/// zstd's parameters: level 1 with few matches (a 64-entry hash table, matches of at least 7
/// bytes; a 128 KiB window, one block). An exponent stream is close to memoryless: the matches
/// zstd finds in it cost more than the Huffman-coded literals they replace, so the fewer it
/// looks for, the better the ratio and the faster both ways (bfloat16 of a trained model: ratio
/// 1.519 against 1.475 at plain level 1 and 1.467 at level 3, ZipNN 1.522; BENCHMARKS.md).
const ZSTD_PARAMS: [zstd_safe::CParameter; 5] = [
    zstd_safe::CParameter::CompressionLevel(1),
    zstd_safe::CParameter::WindowLog(17),
    zstd_safe::CParameter::HashLog(6),
    zstd_safe::CParameter::ChainLog(6),
    zstd_safe::CParameter::MinMatch(7),
];
/// A compressed stream is kept only when it saves at least 1/32 of the stream (else the
/// stream is stored raw: decoding it would cost time for nothing).
const KEEP_STREAM: usize = 32;
/// A compressed record is written only when it saves at least 1/64 of the data, else the
/// record is a plain one (SPEC.md 3.4: the file never grows).
const KEEP_RECORD: u64 = 64;

/// How a dtype's elements are cut into byte streams: `width` streams (byte k of every element
/// into stream k), and whether each little-endian word is first rotated left by one bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grouping {
    /// Bytes per word: 1, 2, 4 or 8.
    pub width: u8,
    /// Rotate each word left by one bit before grouping (floats: the sign bit leaves the
    /// exponent byte).
    pub rotate: bool,
}

impl Grouping {
    /// The grouping a writer uses for `dtype`: floats by their element (complex numbers by
    /// their parts) with the rotation, integers of 2, 4 and 8 bytes by their bytes, every
    /// 1-byte type (float8, int8, packed and sub-byte types, bools, bytes) as one stream.
    pub fn of(dtype: DType) -> Grouping {
        use DType::*;
        let (width, rotate) = match dtype {
            Float16 | BFloat16 => (2, true),
            Float32 | Complex64 => (4, true),
            Float64 | Complex128 => (8, true),
            Int16 | UInt16 => (2, false),
            Int32 | UInt32 => (4, false),
            Int64 | UInt64 => (8, false),
            _ => (1, false),
        };
        Grouping { width, rotate }
    }
}

/// Compresses `data` (the data of a tensor of `dtype`) on up to `threads` threads (0 = all
/// cores): the stored bytes of a compressed record, or `None` when compression would not save
/// at least 1/64 of the bytes (the record is then written plain).
pub fn encode(dtype: DType, data: &[u8], threads: usize) -> Option<Vec<u8>> {
    let g = Grouping::of(dtype);
    let w = usize::from(g.width);
    if data.is_empty() || !data.len().is_multiple_of(w) {
        return None;
    }
    let chunk = 1usize << CHUNK_LOG2;
    let chunks: Vec<&[u8]> = data.chunks(chunk).collect();
    let count = u32::try_from(chunks.len()).ok()?;
    // Each chunk's streams, encoded on the threads; the table is written after.
    let encoded: Vec<Mutex<Option<Vec<Stream>>>> =
        chunks.iter().map(|_| Mutex::new(None)).collect();
    let items: Vec<usize> = (0..chunks.len()).collect();
    let threads = if chunks.len() < 2 { 1 } else { threads };
    crate::parallel::try_each(&items, threads, |&i| {
        let streams = encode_chunk(g, chunks[i]);
        *encoded[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(streams);
        Ok(())
    })
    .ok()?;
    let row = 4 + 4 * w;
    let mut out = Vec::with_capacity(data.len());
    out.push(LAYOUT_VERSION);
    out.push(g.width);
    out.push(u8::from(g.rotate));
    out.push(CHUNK_LOG2);
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    let encoded: Vec<Vec<Stream>> = encoded
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_default()
        })
        .collect();
    for streams in &encoded {
        let mut crc = 0u32;
        for s in streams {
            crc = crate::format::crc32c_extend(crc, s.bytes());
        }
        out.extend_from_slice(&mask_crc(crc).to_le_bytes());
        for s in streams {
            // A stream is at most 2^MAX_CHUNK_LOG2 bytes (raw), so its length fits 31 bits.
            let len = u32::try_from(s.bytes().len()).ok()?;
            let word = if matches!(s, Stream::Zstd(_)) {
                len | STREAM_ZSTD
            } else {
                len
            };
            out.extend_from_slice(&word.to_le_bytes());
        }
    }
    debug_assert_eq!(out.len(), HEADER_LEN + encoded.len() * row);
    out.extend_from_slice(&mask_crc(crc32c(&out)).to_le_bytes());
    for streams in &encoded {
        for s in streams {
            out.extend_from_slice(s.bytes());
        }
    }
    let saves = data.len() as u64 / KEEP_RECORD;
    (out.len() as u64 + saves <= data.len() as u64).then_some(out)
}

/// One encoded stream: a zstd frame, or the grouped bytes themselves.
enum Stream {
    Zstd(Vec<u8>),
    Raw(Vec<u8>),
}

impl Stream {
    fn bytes(&self) -> &[u8] {
        match self {
            Stream::Zstd(b) | Stream::Raw(b) => b,
        }
    }
}

thread_local! {
    /// One zstd compression context per thread (creating one costs more than compressing a
    /// small chunk).
    static CCTX: std::cell::RefCell<Option<zstd_safe::CCtx<'static>>> = const { std::cell::RefCell::new(None) };
    /// One zstd decompression context per thread.
    static DCTX: std::cell::RefCell<Option<zstd_safe::DCtx<'static>>> = const { std::cell::RefCell::new(None) };
}

/// The streams of one chunk: grouped, then each compressed where that saves 1/32 of it.
fn encode_chunk(g: Grouping, chunk: &[u8]) -> Vec<Stream> {
    let groups = group(g, chunk);
    groups
        .into_iter()
        .map(|raw| {
            let mut z = Vec::with_capacity(zstd_safe::compress_bound(raw.len()));
            let ok = CCTX.with(|c| {
                let mut c = c.borrow_mut();
                let cctx = c.get_or_insert_with(|| {
                    let mut cctx = zstd_safe::CCtx::create();
                    for p in ZSTD_PARAMS {
                        // Each is within zstd's documented bounds; a refused one would leave
                        // zstd's default, which decodes the same.
                        let _ = cctx.set_parameter(p);
                    }
                    cctx
                });
                cctx.compress2(&mut z, &raw).is_ok()
            });
            if ok && z.len() + raw.len() / KEEP_STREAM < raw.len() {
                Stream::Zstd(z)
            } else {
                Stream::Raw(raw)
            }
        })
        .collect()
}

/// `chunk` cut into `g.width` streams (byte k of every word into stream k, each word rotated
/// left by one bit first when `g.rotate`).
fn group(g: Grouping, chunk: &[u8]) -> Vec<Vec<u8>> {
    let w = usize::from(g.width);
    let n = chunk.len() / w;
    let mut out = vec![vec![0u8; n]; w];
    match (w, g.rotate) {
        (1, _) => out[0].copy_from_slice(chunk),
        (2, rot) => {
            let (a, b) = out.split_at_mut(1);
            for ((c, x), y) in chunk
                .chunks_exact(2)
                .zip(a[0].iter_mut())
                .zip(b[0].iter_mut())
            {
                let v = u16::from_le_bytes([c[0], c[1]]);
                let [p, q] = if rot { v.rotate_left(1) } else { v }.to_le_bytes();
                *x = p;
                *y = q;
            }
        }
        (4, rot) => {
            for (j, c) in chunk.chunks_exact(4).enumerate() {
                let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                let b = if rot { v.rotate_left(1) } else { v }.to_le_bytes();
                for (s, byte) in out.iter_mut().zip(b) {
                    s[j] = byte;
                }
            }
        }
        (_, rot) => {
            for (j, c) in chunk.chunks_exact(8).enumerate() {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                let v = u64::from_le_bytes(a);
                let b = if rot { v.rotate_left(1) } else { v }.to_le_bytes();
                for (s, byte) in out.iter_mut().zip(b) {
                    s[j] = byte;
                }
            }
        }
    }
    out
}

/// The inverse of [`group`]: the streams (each `out.len() / g.width` bytes) interleaved into
/// `out`, each word rotated back.
fn ungroup(g: Grouping, streams: &[&[u8]], out: &mut [u8]) {
    match (g.width, g.rotate) {
        (1, _) => out.copy_from_slice(streams[0]),
        (2, rot) => {
            for ((o, &a), &b) in out.chunks_exact_mut(2).zip(streams[0]).zip(streams[1]) {
                let v = u16::from_le_bytes([a, b]);
                o.copy_from_slice(&if rot { v.rotate_right(1) } else { v }.to_le_bytes());
            }
        }
        (4, rot) => {
            let (s0, s1, s2, s3) = (streams[0], streams[1], streams[2], streams[3]);
            for (j, o) in out.chunks_exact_mut(4).enumerate() {
                let v = u32::from_le_bytes([s0[j], s1[j], s2[j], s3[j]]);
                o.copy_from_slice(&if rot { v.rotate_right(1) } else { v }.to_le_bytes());
            }
        }
        (_, rot) => {
            for (j, o) in out.chunks_exact_mut(8).enumerate() {
                let mut b = [0u8; 8];
                for (x, s) in b.iter_mut().zip(streams) {
                    *x = s[j];
                }
                let v = u64::from_le_bytes(b);
                o.copy_from_slice(&if rot { v.rotate_right(1) } else { v }.to_le_bytes());
            }
        }
    }
}

/// A checked chunk table: where each chunk's streams are in the stored bytes.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The grouping the streams were cut with.
    pub grouping: Grouping,
    /// log2 of the decoded bytes per chunk (the last chunk may be shorter).
    pub chunk_log2: u8,
    /// Decoded bytes.
    pub decoded_len: u64,
    /// `decoded_len`, which `parse` checked fits in memory.
    decoded: usize,
    /// Per chunk: its stored range (relative to the stored bytes), its stored CRC (masked) and
    /// each stream's (range, compressed).
    chunks: Vec<ChunkAt>,
}

#[derive(Clone, Debug)]
struct ChunkAt {
    stored: Range<usize>,
    crc: u32,
    streams: smallvec::SmallVec<[(Range<usize>, bool); 8]>,
}

/// Where an error about compressed data is: the tensor shown as `name`, its stored bytes at
/// file offset `offset`.
#[derive(Clone, Copy, Debug)]
pub struct At<'a> {
    /// The tensor, as shown in messages.
    pub name: &'a str,
    /// File offset of the stored bytes' first byte.
    pub offset: u64,
}

impl At<'_> {
    fn err(
        &self,
        chunk: Option<usize>,
        rel: usize,
        problem: CompressedProblem,
        detail: String,
    ) -> Error {
        Error::Compressed {
            name: self.name.to_string(),
            chunk: chunk.map(|c| c as u64),
            offset: self.offset.saturating_add(rel as u64),
            problem,
            detail,
        }
    }
}

fn fixed32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Layout {
    /// Reads and checks the header and chunk table of `stored` (the stored bytes of a record of
    /// `dtype` whose decoded length must be `decoded_len`): the layout version, the grouping
    /// (the writer's for `dtype`), the chunk size, the chunk count, the table's checksum, raw
    /// streams of exactly their decoded length, and stream lengths that add up to the stored
    /// bytes exactly. Nothing is decompressed.
    pub fn parse(stored: &[u8], dtype: DType, decoded_len: u64, at: At<'_>) -> Result<Layout> {
        use CompressedProblem::{Length, Table};
        let table = |rel: usize, d: String| at.err(None, rel, Table, d);
        if stored.len() < HEADER_LEN {
            return Err(table(
                0,
                format!(
                    "{} stored bytes, shorter than the 16-byte layout header",
                    stored.len()
                ),
            ));
        }
        if stored[0] != LAYOUT_VERSION {
            return Err(table(0, format!("unknown layout version {}", stored[0])));
        }
        let grouping = Grouping {
            width: stored[1],
            rotate: stored[2] != 0,
        };
        if stored[2] > 1 || grouping != Grouping::of(dtype) {
            return Err(table(
                1,
                format!(
                    "grouping of width {} rotate {}, a {dtype} is grouped by {:?}",
                    stored[1],
                    stored[2],
                    Grouping::of(dtype)
                ),
            ));
        }
        let chunk_log2 = stored[3];
        if !(MIN_CHUNK_LOG2..=MAX_CHUNK_LOG2).contains(&chunk_log2) {
            return Err(table(
                3,
                format!(
                    "chunk size 2^{chunk_log2} outside 2^{MIN_CHUNK_LOG2}..=2^{MAX_CHUNK_LOG2}"
                ),
            ));
        }
        let count = fixed32(stored, 4) as usize;
        let declared = u64::from_le_bytes(stored[8..16].try_into().expect("8 bytes"));
        if declared != decoded_len {
            return Err(at.err(None, 8, Length, format!(
                "the record declares {declared} decoded bytes, the tensor's shape needs {decoded_len}"
            )));
        }
        let decoded = usize::try_from(decoded_len).map_err(|_| {
            at.err(
                None,
                8,
                Length,
                format!("{decoded_len} decoded bytes do not fit in memory"),
            )
        })?;
        let w = usize::from(grouping.width);
        let chunk = 1u64 << chunk_log2;
        if decoded_len == 0
            || !decoded_len.is_multiple_of(w as u64)
            || decoded_len.div_ceil(chunk) != count as u64
        {
            return Err(table(4, format!(
                "{count} chunks of 2^{chunk_log2} bytes for {decoded_len} decoded bytes of words of {w}"
            )));
        }
        let row = 4 + 4 * w;
        let table_end = count
            .checked_mul(row)
            .and_then(|t| t.checked_add(HEADER_LEN))
            .filter(|&e| e.checked_add(4).is_some_and(|e| e <= stored.len()))
            .ok_or_else(|| {
                table(
                    4,
                    format!(
                        "a chunk table of {count} rows runs past the {} stored bytes",
                        stored.len()
                    ),
                )
            })?;
        let table_crc = unmask_crc(fixed32(stored, table_end));
        let computed = crc32c(&stored[..table_end]);
        if table_crc != computed {
            return Err(table(
                table_end,
                format!(
                "chunk table checksum mismatch: stored {table_crc:#010x}, computed {computed:#010x}"
            ),
            ));
        }
        let mut pos = table_end + 4;
        let mut chunks = Vec::with_capacity(count);
        for c in 0..count {
            let r = HEADER_LEN + c * row;
            let crc = fixed32(stored, r);
            let first = pos;
            // c < count = ceil(decoded / chunk), so c · chunk < decoded.
            let this_len = (decoded - c * (1usize << chunk_log2)).min(1usize << chunk_log2);
            let stream_len = this_len / w;
            let mut streams = smallvec::SmallVec::new();
            for k in 0..w {
                let word = fixed32(stored, r + 4 + 4 * k);
                let zstd = word & STREAM_ZSTD != 0;
                let len = (word & !STREAM_ZSTD) as usize;
                if !zstd && len != stream_len {
                    return Err(at.err(
                        Some(c),
                        r,
                        Table,
                        format!(
                            "raw stream {k} of {len} bytes, the chunk's streams are {stream_len}"
                        ),
                    ));
                }
                let end = pos
                    .checked_add(len)
                    .filter(|&e| e <= stored.len())
                    .ok_or_else(|| {
                        at.err(
                            Some(c),
                            r,
                            Table,
                            format!(
                                "stream {k} of {len} bytes at {pos} runs past the {} stored bytes",
                                stored.len()
                            ),
                        )
                    })?;
                streams.push((pos..end, zstd));
                pos = end;
            }
            chunks.push(ChunkAt {
                stored: first..pos,
                crc,
                streams,
            });
        }
        if pos != stored.len() {
            return Err(table(
                pos,
                format!(
                    "the chunks end at {pos}, the record's data is {} bytes",
                    stored.len()
                ),
            ));
        }
        Ok(Layout {
            grouping,
            chunk_log2,
            decoded_len,
            decoded,
            chunks,
        })
    }

    /// Number of chunks.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// Decoded byte range of chunk `c`.
    fn decoded_range(&self, c: usize) -> Range<usize> {
        let chunk = 1usize << self.chunk_log2;
        let start = c * chunk;
        let end = start.saturating_add(chunk).min(self.decoded);
        start..end
    }

    /// Checks chunk `c`'s stored bytes against its checksum.
    pub fn check_chunk(&self, stored: &[u8], c: usize, at: At<'_>) -> Result<()> {
        let ch = &self.chunks[c];
        let computed = crc32c(&stored[ch.stored.clone()]);
        let want = unmask_crc(ch.crc);
        if computed != want {
            return Err(at.err(Some(c), ch.stored.start, CompressedProblem::Checksum, format!(
                "checksum mismatch over {} stored bytes: stored {want:#010x}, computed {computed:#010x}",
                ch.stored.len()
            )));
        }
        Ok(())
    }

    /// Checks every chunk's stored bytes against its checksum (what `verify` does before it
    /// decodes), naming the first damaged chunk.
    pub fn check_chunks(&self, stored: &[u8], at: At<'_>) -> Result<()> {
        (0..self.chunks.len()).try_for_each(|c| self.check_chunk(stored, c, at))
    }

    /// Decodes chunk `c` (its checksum checked first) into `out`, exactly its decoded length.
    fn decode_chunk(&self, stored: &[u8], c: usize, out: &mut [u8], at: At<'_>) -> Result<()> {
        self.check_chunk(stored, c, at)?;
        let ch = &self.chunks[c];
        let n = out.len() / usize::from(self.grouping.width);
        let mut scratch: smallvec::SmallVec<[Vec<u8>; 8]> = smallvec::SmallVec::new();
        for (k, (r, zstd)) in ch.streams.iter().enumerate() {
            if !*zstd {
                continue;
            }
            let mut buf = vec![0u8; n];
            let got = DCTX.with(|d| {
                let mut d = d.borrow_mut();
                let dctx = d.get_or_insert_with(zstd_safe::DCtx::create);
                dctx.decompress(&mut buf[..], &stored[r.clone()])
            });
            match got {
                Ok(m) if m == n => {}
                Ok(m) => {
                    return Err(at.err(
                        Some(c),
                        r.start,
                        CompressedProblem::Stream,
                        format!("stream {k} decodes to {m} bytes, the chunk's streams are {n}"),
                    ))
                }
                Err(code) => {
                    return Err(at.err(
                        Some(c),
                        r.start,
                        CompressedProblem::Stream,
                        format!(
                            "stream {k} does not decode: {}",
                            zstd_safe::get_error_name(code)
                        ),
                    ))
                }
            }
            scratch.push(buf);
        }
        let mut decoded = scratch.iter();
        let streams: smallvec::SmallVec<[&[u8]; 8]> = ch
            .streams
            .iter()
            .map(|(r, zstd)| {
                if *zstd {
                    decoded.next().map_or(&[][..], |b| &b[..])
                } else {
                    &stored[r.clone()]
                }
            })
            .collect();
        ungroup(self.grouping, &streams, out);
        Ok(())
    }

    /// Decodes the chunks that meet decoded bytes `range` into `out` (which holds exactly
    /// `range`), on up to `threads` threads (0 = all cores).
    pub fn decode_range(
        &self,
        stored: &[u8],
        range: Range<u64>,
        out: &mut [u8],
        threads: usize,
        at: At<'_>,
    ) -> Result<()> {
        if range.start > range.end
            || range.end > self.decoded_len
            || out.len() as u64 != range.end - range.start
        {
            return Err(Error::InvalidArgument(format!(
                "tensor {}: decoded range {range:?} of {} bytes into {} bytes",
                at.name,
                self.decoded_len,
                out.len()
            )));
        }
        if range.is_empty() {
            return Ok(());
        }
        // Both ends are at most the decoded length, which `parse` checked fits in memory.
        let (start, end) = (
            usize::try_from(range.start).expect("at most the decoded length"),
            usize::try_from(range.end).expect("at most the decoded length"),
        );
        let shift = self.chunk_log2;
        let first = start >> shift;
        let last = (end - 1) >> shift;
        let whole = range.start == 0 && range.end == self.decoded_len;
        // Each chunk met, with the part of `out` it fills.
        let mut parts: Vec<(usize, Mutex<&mut [u8]>)> = Vec::with_capacity(last - first + 1);
        let mut rest = out;
        for c in first..=last {
            let d = self.decoded_range(c);
            let lo = start.max(d.start);
            let hi = end.min(d.end);
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(hi - lo);
            rest = tail;
            parts.push((c, Mutex::new(mine)));
        }
        let threads = if parts.len() < 2 { 1 } else { threads };
        crate::parallel::try_each(&parts, threads, |(c, dst)| {
            let mut dst = dst.lock().unwrap_or_else(|p| p.into_inner());
            let d = self.decoded_range(*c);
            let lo = start.max(d.start);
            if whole || (lo == d.start && dst.len() == d.len()) {
                self.decode_chunk(stored, *c, &mut dst, at)
            } else {
                let mut full = vec![0u8; d.len()];
                self.decode_chunk(stored, *c, &mut full, at)?;
                let off = lo - d.start;
                let len = dst.len();
                dst.copy_from_slice(&full[off..off + len]);
                Ok(())
            }
        })
    }
}

/// Decodes `stored` (a compressed record's data, of a tensor of `dtype` and `decoded_len`
/// bytes) whole into `out` (`decoded_len` bytes) on up to `threads` threads.
pub fn decode_into(
    stored: &[u8],
    dtype: DType,
    out: &mut [u8],
    threads: usize,
    at: At<'_>,
) -> Result<()> {
    let layout = Layout::parse(stored, dtype, out.len() as u64, at)?;
    let len = layout.decoded_len;
    layout.decode_range(stored, 0..len, out, threads, at)
}

/// Decodes `stored` (a compressed record's data, of a tensor of `dtype` and `decoded_len`
/// bytes) whole on up to `threads` threads; the table is checked before anything is allocated.
pub fn decode(
    stored: &[u8],
    dtype: DType,
    decoded_len: u64,
    threads: usize,
    at: At<'_>,
) -> Result<Vec<u8>> {
    let layout = Layout::parse(stored, dtype, decoded_len, at)?;
    let len = usize::try_from(decoded_len).map_err(|_| {
        Error::InvalidArgument(format!(
            "tensor {}: {decoded_len} bytes do not fit in memory",
            at.name
        ))
    })?;
    let mut out = vec![0u8; len];
    layout.decode_range(stored, 0..decoded_len, &mut out, threads, at)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> At<'static> {
        At {
            name: "t",
            offset: 100,
        }
    }

    fn weights(n: usize) -> Vec<f32> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let u = (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                u * 0.02 * (1.0 + (i / 4096 % 7) as f32)
            })
            .collect()
    }

    fn round_trip(dtype: DType, data: &[u8]) -> Option<usize> {
        let stored = encode(dtype, data, 2)?;
        let mut out = vec![0u8; data.len()];
        decode_into(&stored, dtype, &mut out, 2, at()).unwrap();
        assert_eq!(out, data, "{dtype}");
        // Every region decodes to the same bytes.
        let layout = Layout::parse(&stored, dtype, data.len() as u64, at()).unwrap();
        let w = usize::from(Grouping::of(dtype).width) as u64;
        for (a, b) in [
            (0, w),
            (w * 3, (1 << 20) + w * 5),
            (data.len() as u64 - w, data.len() as u64),
        ] {
            if b <= data.len() as u64 {
                let mut part = vec![0u8; (b - a) as usize];
                layout
                    .decode_range(&stored, a..b, &mut part, 1, at())
                    .unwrap();
                assert_eq!(part, data[a as usize..b as usize]);
            }
        }
        Some(stored.len())
    }

    #[test]
    fn floats_compress_and_decode_byte_exact() {
        let w = weights(3 << 19);
        let bf16: Vec<u8> = w
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect();
        let f32b: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let f64b: Vec<u8> = w.iter().flat_map(|&v| f64::from(v).to_le_bytes()).collect();
        let n = round_trip(DType::BFloat16, &bf16).unwrap();
        assert!(
            (bf16.len() as f64 / n as f64) > 1.25,
            "bf16 ratio {}",
            bf16.len() as f64 / n as f64
        );
        assert!(round_trip(DType::Float32, &f32b).is_some());
        assert!(round_trip(DType::Float64, &f64b).is_some());
        let zeros = vec![0u8; 3 << 20];
        for d in [
            DType::Int8,
            DType::Int16,
            DType::Int32,
            DType::Int64,
            DType::Float16,
            DType::Complex64,
        ] {
            assert!(round_trip(d, &zeros).unwrap() < 4096, "{d}");
        }
    }

    #[test]
    fn random_bytes_are_not_compressed() {
        let mut x = 1u64;
        let data: Vec<u8> = (0..(1 << 20) + 10)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (x >> 56) as u8
            })
            .collect();
        assert!(encode(DType::UInt8, &data, 1).is_none());
        assert!(encode(DType::BFloat16, &data, 1).is_none());
    }

    #[test]
    fn hostile_tables_are_refused() {
        let w = weights(1 << 19);
        let data: Vec<u8> = w
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect();
        let stored = encode(DType::BFloat16, &data, 1).unwrap();
        let len = data.len() as u64;
        let problem = |e: Error| match e {
            Error::Compressed { problem, .. } => problem,
            other => panic!("{other}"),
        };
        // A lying decoded length.
        let e = Layout::parse(&stored, DType::BFloat16, len + 2, at()).unwrap_err();
        assert_eq!(problem(e), CompressedProblem::Length);
        // Another dtype's grouping.
        assert!(Layout::parse(&stored, DType::Float32, len, at()).is_err());
        // Truncated anywhere: refused, never a panic.
        for cut in [0, 5, 15, 16, 20, 40, stored.len() / 2, stored.len() - 1] {
            let e = Layout::parse(&stored[..cut], DType::BFloat16, len, at()).unwrap_err();
            assert_eq!(problem(e), CompressedProblem::Table, "cut {cut}");
        }
        // A damaged table byte: the table checksum.
        let mut bad = stored.clone();
        bad[17] ^= 1;
        assert_eq!(
            problem(Layout::parse(&bad, DType::BFloat16, len, at()).unwrap_err()),
            CompressedProblem::Table
        );
        // A damaged stream byte: the chunk checksum names chunk 0.
        let mut bad = stored.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x40;
        let mut out = vec![0u8; data.len()];
        match decode_into(&bad, DType::BFloat16, &mut out, 1, at()).unwrap_err() {
            Error::Compressed { chunk, problem, .. } => {
                assert_eq!(problem, CompressedProblem::Checksum);
                assert_eq!(chunk, Some(0));
            }
            other => panic!("{other}"),
        }
    }
}
