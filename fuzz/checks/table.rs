//! Footer + table open over arbitrary bytes, full iteration, and a lookup of every key found.
//!
//! Invariants checked beyond "no panic": a table that iterates without error yields strictly
//! increasing keys, and `get` and `seek` of each of them find exactly that entry (through a
//! hash index block that `check_hash_index` accepts, or without one; a hashed `get` through a
//! block it rejects returns that entry, nothing or an error, never another value).

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
    let verified = table.verify_all_blocks().is_ok();
    // A hash index block (SPEC.md 4.5) that `check_hash_index` accepts maps every key to its
    // entry; one it rejects may make `get` miss a key or fail, but never return another
    // entry's value.
    let hash_ok = opts.hash_index && table.check_hash_index().is_ok();
    let strict = !opts.hash_index || !table.has_hash_index().unwrap_or(true) || hash_ok;
    if verified && opts.hash_index {
        assert!(
            hash_ok,
            "verify_all_blocks accepted a hash index check_hash_index rejects"
        );
    }
    if !complete {
        return;
    }
    for (k, v) in &entries {
        let got = table.get(k, |value, _| value.to_vec());
        if strict {
            let got = got.expect("get of a key that iteration found must not fail");
            assert_eq!(got.as_ref(), Some(v), "get disagrees with iteration");
        } else if let Ok(Some(got)) = got {
            assert_eq!(&got, v, "a hashed get returned another entry's value");
        }
        let searched = table
            .get_by_search(k, |value, _| value.to_vec())
            .expect("a binary search for a key that iteration found must not fail");
        assert_eq!(
            searched.as_ref(),
            Some(v),
            "get_by_search disagrees with iteration"
        );
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
            hash_index: true,
        },
    );
    run(
        data,
        TableReadOptions {
            hash_index: false,
            ..TableReadOptions::default()
        },
    );
}
