//! Footer + table open over arbitrary bytes, full iteration, and a lookup of every key found.
//!
//! Invariants checked beyond "no panic": a table that iterates without error yields strictly
//! increasing keys, and `get` and `seek` of each of them find exactly that entry.

use paramdex::raw::table::{Table, TableReadOptions};

fn run(data: &[u8], opts: TableReadOptions) {
    let Ok(table) = Table::open(data, opts) else {
        return;
    };
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut it = table.iter();
    let complete = loop {
        match it.next() {
            Ok(true) => {
                let (k, v) = (it.key().to_vec(), it.value().to_vec());
                if let Some((prev, _)) = entries.last() {
                    assert!(*prev < k, "iteration keys not strictly increasing");
                }
                entries.push((k, v));
            }
            Ok(false) => break true,
            Err(_) => {
                // After an error the iterator stays failed.
                assert!(!it.valid());
                assert!(it.next().is_err());
                break false;
            }
        }
    };
    let _ = table.verify_all_blocks();
    if !complete {
        return;
    }
    for (k, v) in &entries {
        let got = table
            .get(k, |value, _| value.to_vec())
            .expect("get of a key that iteration found must not fail");
        assert_eq!(got.as_ref(), Some(v), "get disagrees with iteration");
        let mut s = table.iter();
        s.seek(k).expect("seek to an iterated key must not fail");
        assert!(s.valid() && s.key() == k.as_slice() && s.value() == v.as_slice());
    }
}

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
    run(data, TableReadOptions::default());
    run(
        data,
        TableReadOptions {
            verify_checksums: false,
            cache_capacity: 0,
        },
    );
}
