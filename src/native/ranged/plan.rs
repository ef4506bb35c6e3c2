//! The parallel fetch planner of a load by ranges: [`plan_parts`] splits the byte ranges of the
//! tensors to fetch into requests of bounded size, tensors lying close together sharing one,
//! a large tensor split over several. Its own file because it is pure arithmetic over ranges,
//! tested on its own, apart from the reader that issues the requests (`reader.rs`).

use std::ops::Range;

/// One request of a parallel load: a range of the object, and the tensors' bytes in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlannedPart {
    pub(crate) range: Range<u64>,
    /// (tensor number, byte range within that tensor), in the object's order.
    pub(crate) members: Vec<(usize, Range<u64>)>,
}

/// Splits the reading of `extents` (the tensors' byte ranges, sorted by start, not
/// overlapping) into requests of at most `part_size` bytes: consecutive tensors at most
/// `max_gap` bytes apart share a request (the gap is read too), a larger tensor is split.
/// Empty extents are in no request.
pub(crate) fn plan_parts(extents: &[Range<u64>], part_size: u64, max_gap: u64) -> Vec<PlannedPart> {
    let part_size = part_size.max(1);
    let mut out: Vec<PlannedPart> = Vec::new();
    let mut cur: Option<PlannedPart> = None;
    for (t, r) in extents.iter().enumerate() {
        if r.start >= r.end {
            continue;
        }
        if let Some(c) = &cur {
            if r.start < c.range.end || r.start - c.range.end > max_gap {
                out.extend(cur.take());
            }
        }
        let mut pos = r.start;
        while pos < r.end {
            // A tensor joins the part under way if the part has room past the gap before it.
            let joins = cur
                .as_ref()
                .is_some_and(|c| pos.max(c.range.end) - c.range.start < part_size);
            if !joins {
                out.extend(cur.take());
            }
            let c = cur.get_or_insert_with(|| PlannedPart {
                range: pos..pos,
                members: Vec::new(),
            });
            c.range.end = c.range.end.max(pos);
            let room = part_size - (c.range.end - c.range.start);
            let take = room.min(r.end - pos);
            c.members.push((t, pos - r.start..pos - r.start + take));
            c.range.end = pos + take;
            pos += take;
        }
    }
    out.extend(cur);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(p: &PlannedPart) -> Vec<(usize, Range<u64>)> {
        p.members.clone()
    }

    #[test]
    fn small_tensors_that_lie_together_share_a_part() {
        let plan = plan_parts(&[0..10, 12..20, 30..40], 100, 16);
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].range, 0..40);
        assert_eq!(members(&plan[0]), vec![(0, 0..10), (1, 0..8), (2, 0..10)]);
    }

    #[test]
    fn a_gap_larger_than_max_gap_starts_a_part() {
        let plan = plan_parts(&[0..10, 12..20, 100..110], 1000, 16);
        let ranges: Vec<_> = plan.iter().map(|p| p.range.clone()).collect();
        assert_eq!(ranges, vec![0..20, 100..110]);
    }

    #[test]
    fn a_large_tensor_is_split_into_parts() {
        let plan = plan_parts(&[0..3, 4..14], 4, 8);
        let got: Vec<_> = plan.iter().map(|p| (p.range.clone(), members(p))).collect();
        assert_eq!(
            got,
            vec![
                // The gap (byte 3) fills the first part: the tensor starts the next one.
                (0..3, vec![(0, 0..3)]),
                (4..8, vec![(1, 0..4)]),
                (8..12, vec![(1, 4..8)]),
                (12..14, vec![(1, 8..10)]),
            ]
        );
        // Empty tensors are in no part.
        let plan = plan_parts(&[0..0, 5..5, 5..9], 4, 0);
        assert_eq!(plan.len(), 1);
        assert_eq!(members(&plan[0]), vec![(2, 0..4)]);
    }

    /// Random layouts: every tensor byte in exactly one part, in order; parts no larger than
    /// asked, in order, not overlapping; gaps inside a part no larger than max_gap.
    #[test]
    fn plans_cover_every_byte_once() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n.max(1)
        };
        for _ in 0..500 {
            let n = rnd(20) as usize;
            let mut at = 0;
            let mut ext = Vec::new();
            for _ in 0..n {
                at += rnd(3) * rnd(40);
                let len = if rnd(4) == 0 { 0 } else { 1 + rnd(3) * rnd(50) };
                ext.push(at..at + len);
                at += len;
            }
            let part = 1 + rnd(64);
            let gap = rnd(30);
            let plan = plan_parts(&ext, part, gap);
            let mut seen: Vec<u64> = vec![0; n];
            let mut prev_end = 0;
            for p in &plan {
                assert!(p.range.start >= prev_end && p.range.end > p.range.start);
                assert!(p.range.end - p.range.start <= part, "{p:?} > {part}");
                prev_end = p.range.end;
                let mut pos = p.range.start;
                for (i, (t, r)) in p.members.iter().enumerate() {
                    let s = ext[*t].start + r.start;
                    assert!(s >= pos && s - pos <= if i == 0 { 0 } else { gap });
                    assert_eq!(r.start, seen[*t], "tensor {t} in order");
                    seen[*t] = r.end;
                    pos = ext[*t].start + r.end;
                }
                assert_eq!(pos, p.range.end);
            }
            for (t, r) in ext.iter().enumerate() {
                assert_eq!(seen[t], r.end - r.start, "tensor {t} whole");
            }
        }
    }
}
