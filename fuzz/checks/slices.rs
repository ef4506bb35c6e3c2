//! The parsers and arithmetic of format version 2 on arbitrary bytes: a tensor entry's slices
//! (`decode_slices`), TensorFlow's slice keys, a header's shard identity and shard table, and the
//! region arithmetic (`resolve`, `find_overlap`, `contiguous`, `copy_region`) on shapes and
//! regions taken from the input.
//!
//! Input: `[rank: u8][rest]`; the rest is parsed as an entry value, a slice key and a header
//! value, and drives shapes and regions.
//!
//! Invariants beyond "no panic": decoded slices have the rank asked for; a resolved region lies
//! inside its shape; a reported overlap is one; a slice key decodes to what encodes back to it;
//! a contiguous region's run has its element count; `copy_region` into a buffer of the region's
//! size gives what an element-by-element copy gives.

use paramdex::raw::entry::{decode_slices, FileHeader};
use paramdex::raw::slices::{contiguous, copy_region, find_overlap, resolve, slice_key};
use paramdex::Region;

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
    let Some((&rank, rest)) = data.split_first() else {
        return;
    };
    let rank = usize::from(rank % 6);
    // A shape from the input, small enough to copy.
    let shape: Vec<u64> = (0..rank)
        .map(|d| u64::from(rest.get(d).copied().unwrap_or(3) % 6))
        .collect();

    if let Ok(slices) = decode_slices(rest, 0, rank) {
        let mut regions = Vec::new();
        for ext in &slices {
            assert_eq!(ext.len(), rank);
            if let Ok(r) = resolve(ext, &shape) {
                assert!(r.is_within(&shape), "a resolved region outside its shape");
                regions.push(r);
            }
        }
        if let Some((i, j)) = find_overlap(&regions) {
            assert!(i < j && regions[i].overlaps(&regions[j]));
        } else {
            for i in 0..regions.len().min(64) {
                for j in i + 1..regions.len().min(64) {
                    assert!(!regions[i].overlaps(&regions[j]), "a missed overlap");
                }
            }
        }
    }

    if let Some(k) = slice_key::decode(rest) {
        assert_eq!(slice_key::encode(&k.name, &k.extents), rest);
        let _ = slice_key::display_key(rest);
    }
    let _ = FileHeader::decode(rest, 0);

    // A region of the shape from the input, copied out of an array of that shape.
    let region = Region::new(
        (0..rank)
            .map(|d| u64::from(rest.get(rank + d).copied().unwrap_or(0)) % (shape[d] + 1))
            .collect(),
        vec![0; rank],
    )
    .expect("one rank");
    let region = Region::new(
        region.start.clone(),
        (0..rank)
            .map(|d| {
                let room = shape[d] - region.start[d];
                u64::from(rest.get(2 * rank + d).copied().unwrap_or(1)) % (room + 1)
            })
            .collect(),
    )
    .expect("one rank");
    assert!(region.is_within(&shape));
    let n: u64 = shape.iter().product();
    let src: Vec<u8> = (0..n).map(|i| i as u8).collect();
    let m = region.numel().expect("small");
    let mut out = vec![0u8; m as usize];
    copy_region(
        &src,
        &shape,
        &region.start,
        &mut out,
        &region.len,
        &vec![0; rank],
        &region.len,
        1,
    )
    .expect("the region lies inside both arrays");
    for (k, &b) in out.iter().enumerate() {
        let (mut rem, mut flat) = (k as u64, 0u64);
        let mut idx = vec![0u64; rank];
        for d in (0..rank).rev() {
            idx[d] = rem % region.len[d] + region.start[d];
            rem /= region.len[d];
        }
        for d in 0..rank {
            flat = flat * shape[d] + idx[d];
        }
        assert_eq!(b, src[flat as usize], "copy_region moved the wrong element");
    }
    if let Some((first, count)) = contiguous(&shape, &region) {
        assert_eq!(count, m);
        if m > 0 {
            assert_eq!(&src[first as usize..(first + m) as usize], out.as_slice());
        }
    }
}
