//! The compressed-record codec (`record::lossless`, SPEC.md 3.4) over arbitrary bytes.
//!
//! The first byte picks a dtype. The rest is taken three ways:
//! * as stored data, its chunk table read with the decoded length it declares (bounded here to
//!   16 MiB): refused, or decoded without a panic to exactly that length, and a region decoded
//!   alone equals the same bytes of the whole;
//! * the same with every checksum made to match (the table's and each chunk's), so that the
//!   zstd frames and the stream lengths behind them are reached, not stopped at a checksum;
//! * as tensor data (repeated to 64 KiB, so that it compresses): encoded, then decoded byte for
//!   byte.

use paramdex::raw::format::{crc32c, mask_crc};
use paramdex::raw::record::lossless::{self, At, Grouping, Layout};
use paramdex::DType;

const DTYPES: [DType; 8] = [
    DType::BFloat16,
    DType::Float16,
    DType::Float32,
    DType::Float64,
    DType::Float8E4M3FN,
    DType::Int32,
    DType::UInt16,
    DType::Complex128,
];

/// Decodes `stored` as the data of a tensor of `dtype`, if its table is accepted.
fn decode_stored(stored: &[u8], dtype: DType) {
    if stored.len() < 16 {
        return;
    }
    let declared = u64::from_le_bytes(stored[8..16].try_into().unwrap());
    if declared == 0 || declared > 16 << 20 {
        return;
    }
    let at = At {
        name: "t",
        offset: 0,
    };
    let Ok(layout) = Layout::parse(stored, dtype, declared, at) else {
        return;
    };
    let mut whole = vec![0u8; declared as usize];
    let Ok(()) = layout.decode_range(stored, 0..declared, &mut whole, 1, at) else {
        return;
    };
    let (a, b) = (declared / 3, declared - declared / 5);
    let mut part = vec![0u8; (b - a) as usize];
    layout
        .decode_range(stored, a..b, &mut part, 2, at)
        .expect("a region of data that decodes whole decodes");
    assert_eq!(part, whole[a as usize..b as usize]);
}

/// `stored` with its checksums made to match its own table (as far as the table reaches).
fn with_matching_crcs(stored: &[u8], dtype: DType) -> Option<Vec<u8>> {
    let mut s = stored.to_vec();
    if s.len() < 16 {
        return None;
    }
    let w = usize::from(Grouping::of(dtype).width);
    let count = u32::from_le_bytes(s[4..8].try_into().unwrap()) as usize;
    let row = 4 + 4 * w;
    let table_end = count.checked_mul(row)?.checked_add(16)?;
    if table_end.checked_add(4)? > s.len() {
        return None;
    }
    let mut pos = table_end + 4;
    for c in 0..count {
        let r = 16 + c * row;
        let start = pos;
        for k in 0..w {
            let word = u32::from_le_bytes(s[r + 4 + 4 * k..r + 8 + 4 * k].try_into().unwrap());
            pos = pos.checked_add((word & 0x7fff_ffff) as usize)?;
        }
        let crc = mask_crc(crc32c(s.get(start..pos)?));
        s[r..r + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = mask_crc(crc32c(&s[..table_end]));
    s[table_end..table_end + 4].copy_from_slice(&crc.to_le_bytes());
    Some(s)
}

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let dtype = DTYPES[usize::from(pick) % DTYPES.len()];
    decode_stored(rest, dtype);
    if let Some(fixed) = with_matching_crcs(rest, dtype) {
        decode_stored(&fixed, dtype);
    }
    if rest.is_empty() {
        return;
    }
    let esize = dtype.size();
    let tensor: Vec<u8> = rest.iter().copied().cycle().take(64 << 10).collect();
    let tensor = &tensor[..tensor.len() / esize * esize];
    if let Some(stored) = lossless::encode(dtype, tensor, 1) {
        assert!(stored.len() < tensor.len());
        let at = At {
            name: "t",
            offset: 0,
        };
        let back = lossless::decode(&stored, dtype, tensor.len() as u64, 1, at)
            .expect("encoded data decodes");
        assert!(back == tensor);
    }
}
