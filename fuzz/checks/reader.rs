//! `Reader` over arbitrary bytes: open, iterate, get every name found and some that are not,
//! prefix scans, LoD and record access, verify. Both with and without checksum verification.
//!
//! Format version 2 inputs (slices, shard identity, a sharded index read from memory) go through
//! the same calls, plus `get_slice` of the stored slices and of regions taken from the input.
//!
//! The same input is also read by ranges (`Reader` over a source that copies every read,
//! the code path of an object in a bucket, built without object storage): it opens where the mapped reader opens (a file that is not a
//! sharded checkpoint's index), every lookup gives the same tensor or an error of the same
//! variant, and its verify passes exactly when the mapped verify does, with the same report.
//!
//! Invariants beyond "no panic": every view's data and record lie inside the file at the offsets
//! it reports; when iteration completes, `get` finds exactly the iterated whole tensors with the
//! same data, refuses the tensors stored in slices (`Error::Sliced`), and `get_slice` of each
//! stored slice's region gives its bytes; when `verify` passes, every tensor's record agrees
//! with its entry and its CRC matches.

use paramdex::{Error, ReadOptions, Reader, Region, TensorView};

fn check_view(file: &[u8], t: &TensorView<'_>) {
    let off = t.data_offset() as usize;
    assert_eq!(t.data(), &file[off..off + t.data().len()]);
    let rec = t.record();
    assert!(rec.len() >= t.data().len());
    assert!(rec.ends_with(t.data()));
    assert!(t.shape().iter().product::<u64>() == t.numel());
    let _ = t.lod().map(|l| l.to_vec());
    let _ = t.check_record();
    let _ = t.verify_crc();
    // A bytes value (SPEC.md 6.1): its value lies inside its data, or it is an error.
    if let Ok(v) = t.bytes_value() {
        assert!(t.data().ends_with(v));
    }
    let _ = t.as_slice::<f32>();
    let _ = t.as_slice::<u8>();
}

fn run(data: &[u8], verify_tensors: bool, verify_blocks: bool) {
    let opts = ReadOptions {
        verify_blocks,
        verify_tensors,
        block_cache_bytes: if verify_blocks { 1 << 16 } else { 0 },
    };
    let Ok(r) = Reader::from_bytes_with(data.to_vec(), opts) else {
        return;
    };
    assert!(r.records().expect("mapped").len() <= data.len());
    let mut names: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    // Stored slices: (tensor name, region, bytes).
    let mut slices: Vec<(Vec<u8>, Region, Vec<u8>)> = Vec::new();
    let mut complete = true;
    let mut last: Option<Vec<u8>> = None;
    for t in r.iter() {
        match t {
            Ok(t) => {
                check_view(data, &t);
                let sliced = t.slice_start().map(<[u64]>::to_vec);
                if let Some(prev) = &last {
                    // The slices of one tensor come together, at its place in name order.
                    let same_tensor = sliced.is_some()
                        && slices
                            .last()
                            .is_some_and(|(n, _, _)| n.as_slice() == t.name());
                    assert!(
                        prev.as_slice() < t.name() || (same_tensor && prev.as_slice() == t.name()),
                        "names not increasing"
                    );
                }
                last = Some(t.name().to_vec());
                match sliced {
                    Some(start) => {
                        assert_eq!(start.len(), t.shape().len());
                        assert_eq!(t.full_shape().len(), t.shape().len());
                        let region = Region::new(start, t.shape().to_vec()).expect("one rank");
                        assert!(
                            region.is_within(t.full_shape()),
                            "a slice outside its tensor"
                        );
                        slices.push((t.name().to_vec(), region, t.data().to_vec()));
                    }
                    None => names.push((t.name().to_vec(), t.data().to_vec())),
                }
            }
            Err(_) => {
                complete = false;
                break;
            }
        }
        if names.len() + slices.len() > 10_000 {
            complete = false;
            break;
        }
    }
    let mut probes: Vec<Vec<u8>> = vec![b"a".to_vec(), b"w".to_vec(), vec![0xff; 3]];
    probes.extend(data.chunks(7).take(8).map(|c| c.to_vec()));
    for p in &probes {
        match r.get(p) {
            Ok(Some(t)) => {
                check_view(data, &t);
                if complete {
                    assert!(
                        names.iter().any(|(n, _)| n == p),
                        "get found a name iteration missed"
                    );
                }
            }
            // A miss of an iterated name is a damaged file verify must refuse: a key damaged
            // inside a data block (block checksums off) that the hash index, keyed by the name
            // as written, no longer leads to; or a damaged hash index block (as below).
            Ok(None) => {
                if complete && names.iter().any(|(n, _)| n == p) {
                    assert!(
                        verify_fails(&r),
                        "get missed an iterated name, and verify passes"
                    );
                }
            }
            Err(_) => {}
        }
        let _ = r.prefix(p).take(100).count();
        // A region read from the input's bytes, of any tensor the probe names.
        let dims: Vec<u64> = p.iter().take(3).map(|&b| u64::from(b % 5)).collect();
        let region =
            Region::new(dims.iter().map(|d| d / 2).collect(), dims.clone()).expect("one rank");
        if let Ok(Some(s)) = r.get_slice(p, &region) {
            assert_eq!(s.shape(), region.len.as_slice());
            let n: u64 = region.len.iter().product();
            assert_eq!(s.data().len() as u64, n * s.dtype().size() as u64);
        }
    }
    for (n, region, bytes) in slices.iter().take(200) {
        match r.get(n) {
            Err(Error::Sliced { .. }) => {}
            other => assert!(!complete, "get of a tensor stored in slices: {other:?}"),
        }
        match r.get_slice(n, region) {
            Ok(Some(s)) => assert_eq!(
                s.data(),
                bytes.as_slice(),
                "get_slice and iteration disagree"
            ),
            other => assert!(!complete, "get_slice of a stored slice: {other:?}"),
        }
    }
    for (n, d) in names.iter().take(200) {
        // Until the iteration has seen (and order-checked) every key, a lookup's binary search
        // may decode restart entries the iteration did not reach, or be misled by keys out of
        // order, or duplicated, later in the block (with block checksums off): only a complete
        // iteration makes the lookup's answer predictable.
        match r.get(n) {
            Ok(Some(t)) => {
                if complete {
                    assert_eq!(t.data(), d.as_slice(), "get and iteration disagree");
                }
            }
            // A damaged hash index block (SPEC.md 4.5) may make a lookup miss or fail even
            // after a complete iteration (the iteration does not read that block); it can never
            // return another tensor (checked above), and `verify` must then refuse the file.
            Ok(None) => assert!(
                !complete || verify_fails(&r),
                "an iterated name is not found by get, and verify passes"
            ),
            Err(_) => assert!(
                !complete || verify_fails(&r),
                "get failed where a complete iteration succeeded, and verify passes"
            ),
        }
    }
    if let Ok(report) = r.verify_with(paramdex::VerifyOptions {
        load: None,
        threads: 1,
        progress: None,
    }) {
        assert!(complete || names.len() + slices.len() > 10_000);
        assert_eq!(report.tensors, r.len());
        for t in r.iter() {
            let t = t.expect("iteration after a passing verify");
            t.check_record()
                .expect("check_record after a passing verify");
            t.verify_crc().expect("tensor CRC after a passing verify");
            if t.dtype() == paramdex::DType::Bytes {
                t.bytes_value()
                    .expect("a bytes value's encoding after a passing verify");
            }
        }
    }
}

/// Whether a full verify (which checks the hash index block against every key) refuses the file.
fn verify_fails(r: &Reader) -> bool {
    r.verify_with(paramdex::VerifyOptions {
        load: None,
        threads: 1,
        progress: None,
    })
    .is_err()
}

/// The ranged reading of an input.
mod by_ranges {
    use super::*;
    use std::ops::Range;
    use std::sync::Arc;

    use paramdex::remote::{RangeRead, ReadAt, RemoteOptions, RequestStats};

    /// Bytes read by ranges, each read a copy: what an object in a bucket is to the readers.
    #[derive(Debug)]
    struct Ranged(Vec<u8>);

    impl ReadAt for Ranged {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }

        fn location(&self) -> &str {
            "<ranged>"
        }

        fn read(&self, range: Range<u64>) -> paramdex::Result<Vec<u8>> {
            let r = usize::try_from(range.start)
                .ok()
                .zip(usize::try_from(range.end).ok());
            r.and_then(|(a, b)| self.0.get(a..b))
                .map(<[u8]>::to_vec)
                .ok_or_else(|| Error::InvalidArgument(format!("range {range:?} outside")))
        }
    }

    impl RangeRead for Ranged {
        fn stats(&self) -> RequestStats {
            RequestStats::default()
        }
    }

    /// The variant of an error.
    fn variant(e: &Error) -> std::mem::Discriminant<Error> {
        std::mem::discriminant(e)
    }

    /// Whether a mapped lookup's result `a` and a ranged one's `b` may differ when the ranged
    /// reader's first read did not hold the hash index block, so that it binary-searches: the
    /// mapped reader then reads blocks the ranged one never reads (the metaindex, the hash index
    /// block, the data block a hash slot of a colliding name points to), and may refuse one
    /// of them as damaged whatever the ranged lookup finds; and for an absent name the binary
    /// search reads (and may refuse) a data block the hash index never sends the mapped
    /// reader to. Nothing damaged is returned either way.
    fn lookups_may_differ<T>(
        a: &paramdex::Result<Option<T>>,
        b: &paramdex::Result<Option<T>>,
    ) -> bool {
        let refused = |r: &paramdex::Result<Option<T>>, prefixes: &[&str]| match r {
            Err(Error::ChecksumMismatch { what, .. } | Error::Corrupt { what, .. }) => {
                prefixes.iter().any(|p| what.starts_with(p))
            }
            _ => false,
        };
        refused(a, &["hash index", "metaindex", "block"])
            || (matches!(a, Ok(None)) && refused(b, &["block"]))
    }

    /// Reads `data` by ranges and holds it to what the mapped reader `mapped` (opened with tensor
    /// and block checks on) read: the same open, lookups and verify.
    ///
    /// With `tail_bytes` smaller than the index, index blocks are read through the seam, and the
    /// hash index block is not used when the open's read does not hold it (lookups binary-search
    /// then, `Table::new_ranged`), and the two lookups may read different blocks
    /// ([`lookups_may_differ`]).
    fn ranged(data: &[u8], mapped: Result<&Reader, &Error>, names: &[Vec<u8>], tail_bytes: u64) {
        let opts = RemoteOptions {
            tail_bytes,
            ..Default::default()
        };
        let holds_all = tail_bytes >= data.len() as u64;
        let remote = Reader::from_range_read(Arc::new(Ranged(data.to_vec())), opts);
        let mapped = match (mapped, remote) {
            (Ok(m), Ok(r)) => (m, r),
            (Ok(m), Err(e)) => {
                // The one refusal of the ranged reader alone: a sharded checkpoint's index.
                assert!(
                    m.is_sharded() && matches!(e, Error::Unsupported(_)),
                    "opens mapped, not by ranges: {e}"
                );
                return;
            }
            (Err(a), Err(b)) => {
                assert_eq!(variant(a), variant(&b), "open: {a} / {b}");
                return;
            }
            (Err(a), Ok(_)) => panic!("opens by ranges, not mapped: {a}"),
        };
        let (m, r) = mapped;
        let mut probes: Vec<Vec<u8>> = names.iter().take(200).cloned().collect();
        probes.extend(data.chunks(7).take(8).map(|c| c.to_vec()));
        probes.push(b"a".to_vec());
        for p in &probes {
            // A tensor read whole: its data (checked) and its LoD (from its record's header).
            let a = m.get(p).and_then(|v| match v {
                Some(v) => {
                    v.verify_crc()?;
                    Ok(Some((v.data().to_vec(), v.lod()?.to_vec())))
                }
                None => Ok(None),
            });
            // The same view, holding the record it read (its data checked when read).
            let b = r.get(p).and_then(|v| match v {
                Some(v) => Ok(Some((v.data().to_vec(), v.lod()?.to_vec()))),
                None => Ok(None),
            });
            if !holds_all && lookups_may_differ(&a, &b) {
                continue;
            }
            match (&a, &b) {
                (Ok(x), Ok(y)) => assert_eq!(x, y, "get {p:?}"),
                (Err(x), Err(y)) => assert_eq!(variant(x), variant(y), "get {p:?}: {x} / {y}"),
                _ => panic!("get {p:?}: mapped {a:?}, by ranges {b:?}"),
            }
        }
        let mv = m.verify_with(paramdex::VerifyOptions {
            load: None,
            threads: 1,
            progress: None,
        });
        let rv = r.verify();
        match (&mv, &rv) {
            (Ok(x), Ok(y)) => assert_eq!(x, y, "verify reports"),
            (Err(_), Err(_)) => {}
            _ => panic!("verify: mapped {mv:?}, by ranges {rv:?}"),
        }
        if holds_all {
            // The same walk: every stored tensor and slice, in name order, with its data.
            // (name, where a slice sits, data) of each stored tensor or slice.
            type Walked = Vec<(Vec<u8>, Option<Vec<u64>>, Vec<u8>)>;
            let walk = |x: &Reader| -> paramdex::Result<Walked> {
                x.iter()
                    .take(300)
                    .map(|v| {
                        let v = v?;
                        let at = v.slice_start().map(<[u64]>::to_vec);
                        Ok((v.name().to_vec(), at, v.data().to_vec()))
                    })
                    .collect()
            };
            match (walk(m), walk(&r)) {
                (Ok(x), Ok(y)) => assert_eq!(x, y, "iter"),
                (Err(x), Err(y)) => assert_eq!(variant(&x), variant(&y), "iter: {x} / {y}"),
                (x, y) => panic!("iter: mapped {x:?}, by ranges {y:?}"),
            }
        }
    }

    /// Reads `data` by ranges, held against the mapped reader.
    pub fn check(data: &[u8]) {
        let opts = ReadOptions {
            verify_blocks: true,
            verify_tensors: true,
            block_cache_bytes: 1 << 16,
        };
        let mapped = Reader::from_bytes_with(data.to_vec(), opts);
        let names: Vec<Vec<u8>> = match &mapped {
            Ok(m) => m
                .iter()
                .map_while(|t| t.ok())
                .map(|t| t.name().to_vec())
                .collect(),
            Err(_) => Vec::new(),
        };
        // The whole input held at open (the hash index used as in the mapped file), and a tail
        // of 256 bytes (index blocks read through the seam).
        ranged(data, mapped.as_ref(), &names, u64::MAX);
        ranged(data, mapped.as_ref(), &names, 256);
    }
}

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
    run(data, true, true);
    run(data, false, false);
    by_ranges::check(data);
}
