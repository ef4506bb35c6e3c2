//! `Reader` over arbitrary bytes: open, iterate, get every name found and some that are not,
//! prefix scans, LoD and record access, verify. Both with and without checksum verification.
//!
//! Invariants beyond "no panic": every view's data and record lie inside the file at the offsets
//! it reports; when iteration completes, `get` finds exactly the iterated names with the same
//! data; when `verify` passes, every tensor's record agrees with its entry and its CRC matches.

use paramdex::{ReadOptions, Reader, TensorView};

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
    assert!(r.records().len() <= data.len());
    let mut names: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut complete = true;
    for t in r.iter() {
        match t {
            Ok(t) => {
                check_view(data, &t);
                if let Some((prev, _)) = names.last() {
                    assert!(prev.as_slice() < t.name(), "names not strictly increasing");
                }
                names.push((t.name().to_vec(), t.data().to_vec()));
            }
            Err(_) => {
                complete = false;
                break;
            }
        }
        if names.len() > 10_000 {
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
            Ok(None) => {
                if complete {
                    assert!(
                        !names.iter().any(|(n, _)| n == p),
                        "get missed an iterated name"
                    );
                }
            }
            Err(_) => {}
        }
        let _ = r.prefix(p).take(100).count();
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
            Ok(None) => assert!(!complete, "an iterated name is not found by get"),
            Err(_) => assert!(!complete, "get failed where a complete iteration succeeded"),
        }
    }
    if let Ok(report) = r.verify_with(paramdex::VerifyOptions {
        threads: 1,
        progress: None,
    }) {
        assert!(complete || names.len() > 10_000);
        assert_eq!(report.tensors, r.len());
        for t in r.iter() {
            let t = t.expect("iteration after a passing verify");
            t.check_record()
                .expect("check_record after a passing verify");
            t.verify_crc().expect("tensor CRC after a passing verify");
        }
    }
}

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
    run(data, true, true);
    run(data, false, false);
}
