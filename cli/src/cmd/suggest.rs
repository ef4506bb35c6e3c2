//! Near names for a name that is not there (`get`), as git suggests commands.
//!
//! A name is near the one asked for when, best first:
//! 1. it is the same after Unicode compatibility normalisation (NFKC) and lower-casing
//!    (`Dense/Kernel` for `dense/kernel`, `café` for a decomposed `café`, `w1` for a
//!    fullwidth `ｗ１`);
//! 2. it starts with the name asked for and then a separator (`/`, `.`, `:`), compared the
//!    same way: `w1` → `w1/.ATTRIBUTES/VARIABLE_VALUE`, as TensorFlow 2 checkpoints name
//!    variables;
//! 3. it is within a small edit distance, compared the same way (optimal string alignment:
//!    insertions, deletions, substitutions, adjacent transpositions; one edit for names up to
//!    4 characters, two up to 12, three beyond).
//!
//! The names are streamed: only the few best candidates are kept, whatever the store holds.

use paramdex::interop::TensorInfos;
use paramdex::Result;
use unicode_normalization::UnicodeNormalization;

/// At most this many suggestions.
pub const MAX: usize = 5;

/// The key names are compared by for lookalikes: NFKC, then lower case.
fn fold(s: &str) -> String {
    if s.is_ascii() {
        s.to_ascii_lowercase()
    } else {
        s.nfkc().collect::<String>().to_lowercase()
    }
}

/// Edits allowed for a name of `len` characters.
fn max_edits(len: usize) -> usize {
    match len {
        0..=4 => 1,
        5..=12 => 2,
        _ => 3,
    }
}

/// A lower bound of the edit distance between two strings: the larger count of characters
/// one has and the other has not (as multisets), over ASCII bytes; costs one pass, so the
/// exact distance is computed only for names that may be near.
fn bag_distance(a: &[u8], b: &[u8]) -> usize {
    let mut h = [0i32; 256];
    for &x in a {
        h[usize::from(x)] += 1;
    }
    for &x in b {
        h[usize::from(x)] -= 1;
    }
    let (mut pos, mut neg) = (0usize, 0usize);
    for v in h {
        if v > 0 {
            pos += v as usize;
        } else {
            neg += (-v) as usize;
        }
    }
    // A multibyte character counts for up to 4 bytes: scale down so the bound stays a bound.
    let bound = pos.max(neg);
    if a.is_ascii() && b.is_ascii() {
        bound
    } else {
        bound / 4
    }
}

/// The few names of `names` nearest `wanted`: of the best rank found (above), at most [`MAX`],
/// in name order.
pub fn near(wanted: &[u8], names: TensorInfos<'_>) -> Result<Vec<Vec<u8>>> {
    let wanted_fold = fold(&String::from_utf8_lossy(wanted));
    let wanted_chars = wanted_fold.chars().count();
    let limit = max_edits(wanted_chars);
    // (rank, name): rank 0 lookalike, 1 prefix, 1 + d edit distance d.
    let mut best: Vec<(usize, Vec<u8>)> = Vec::new();
    let worst = |best: &Vec<(usize, Vec<u8>)>| {
        if best.len() < MAX {
            usize::MAX
        } else {
            best.last().map_or(usize::MAX, |b| b.0)
        }
    };
    for t in names {
        let name = t?.name;
        let f = fold(&String::from_utf8_lossy(&name));
        let rank = if f == wanted_fold {
            Some(0)
        } else if f.len() > wanted_fold.len()
            && f.starts_with(&wanted_fold)
            && matches!(f.as_bytes()[wanted_fold.len()], b'/' | b'.' | b':')
        {
            Some(1)
        } else if f.chars().count().abs_diff(wanted_chars) <= limit
            && bag_distance(f.as_bytes(), wanted_fold.as_bytes()) <= limit
        {
            let d = strsim::osa_distance(&f, &wanted_fold);
            (d <= limit).then_some(1 + d)
        } else {
            None
        };
        let Some(rank) = rank else { continue };
        // Names stream in order, so a tie never displaces an earlier name.
        if rank >= worst(&best) {
            continue;
        }
        let at = best.partition_point(|b| b.0 <= rank);
        best.insert(at, (rank, name));
        best.truncate(MAX);
    }
    // Only the nearest kind, as git does: a lookalike hides a typo's other readings.
    let top = best.first().map(|b| b.0);
    Ok(best
        .into_iter()
        .filter(|b| Some(b.0) == top)
        .map(|b| b.1)
        .collect())
}

#[cfg(test)]
mod tests {
    use paramdex::interop::{Kind, TensorInfo};

    use super::*;

    fn names(list: &[&str]) -> TensorInfos<'static> {
        let mut v: Vec<TensorInfo> = list
            .iter()
            .map(|n| TensorInfo {
                name: n.as_bytes().to_vec(),
                kind: Kind::String,
                shape: vec![],
                lod: vec![],
                nbytes: 0,
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Box::new(v.into_iter().map(Ok))
    }

    fn near_s(wanted: &str, list: &[&str]) -> Vec<String> {
        near(wanted.as_bytes(), names(list))
            .unwrap()
            .into_iter()
            .map(|n| String::from_utf8(n).unwrap())
            .collect()
    }

    #[test]
    fn finds_the_kinds_of_near_names() {
        let list = [
            "w1/.ATTRIBUTES/VARIABLE_VALUE",
            "w10/.ATTRIBUTES/VARIABLE_VALUE",
            "Dense/Kernel",
            "model.layers.0.weight",
            "model.layers.1.weight",
            "caf\u{e9}",
            "unrelated",
        ];
        assert_eq!(near_s("w1", &list), ["w1/.ATTRIBUTES/VARIABLE_VALUE"]);
        assert_eq!(near_s("dense/kernel", &list), ["Dense/Kernel"]);
        // Fullwidth letters and a decomposed é are lookalikes.
        assert_eq!(
            near_s("ｗ１", &list)[0],
            "w1/.ATTRIBUTES/VARIABLE_VALUE".to_string()
        );
        assert_eq!(near_s("cafe\u{301}", &list), ["caf\u{e9}"]);
        assert_eq!(
            near_s("model.layers.0.wieght", &list),
            ["model.layers.0.weight"]
        );
        assert_eq!(
            near_s("model.layers.2.weight", &list),
            ["model.layers.0.weight", "model.layers.1.weight"]
        );
        assert!(near_s("zzzzzzzz", &list).is_empty());
    }

    #[test]
    fn keeps_at_most_a_few() {
        let many: Vec<String> = (0..100).map(|i| format!("x{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let got = near_s("x", &refs);
        assert_eq!(got.len(), MAX);
    }
}
