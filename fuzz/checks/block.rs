//! One block's decode, iteration and seek, over arbitrary bytes.
//!
//! Input: `[n: u8][target: n bytes][block bytes...]` (shorter inputs are all block). Invariants:
//! a block that iterates without error has strictly increasing keys, and `seek(t)` lands on the
//! first of them that is `>= t` (for the fuzzed target and for every key present).

use paramdex::raw::table::Block;

fn check_seek(block: &Block<'_>, entries: &[(Vec<u8>, Vec<u8>)], target: &[u8]) {
    let mut it = block.iter();
    it.seek(target)
        .expect("seek in a block that iterated cleanly must not fail");
    match entries.iter().find(|(k, _)| k.as_slice() >= target) {
        Some((k, v)) => {
            assert!(it.valid(), "seek missed an entry");
            assert_eq!(it.key(), k.as_slice());
            assert_eq!(it.value(), v.as_slice());
        }
        None => assert!(!it.valid(), "seek found an entry past the last key"),
    }
}

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
    let (target, contents) = match data.split_first() {
        Some((&n, rest)) if rest.len() >= usize::from(n) => rest.split_at(usize::from(n)),
        _ => (&[][..], data),
    };
    let Ok(block) = Block::parse(contents, 1000) else {
        return;
    };
    let mut it = block.iter();
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let complete = loop {
        match it.next() {
            Ok(true) => {
                let k = it.key().to_vec();
                if let Some((prev, _)) = entries.last() {
                    assert!(*prev < k, "block keys not strictly increasing");
                }
                entries.push((k, it.value().to_vec()));
            }
            Ok(false) => break true,
            Err(_) => break false,
        }
    };
    if block.is_empty() {
        assert!(entries.is_empty());
    }
    if !complete {
        let mut it = block.iter();
        let _ = it.seek(target);
        let _ = it.seek_to_first();
        return;
    }
    check_seek(&block, &entries, target);
    for (k, _) in entries.iter().take(64) {
        check_seek(&block, &entries, k);
    }
}
