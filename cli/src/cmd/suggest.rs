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

/// A lower bound of the edit distance between two strings: the larger count of bytes one has
/// and the other has not (as multisets; an edit changes at most one character, at most 4
/// bytes, on each side). One pass, so the exact distance is computed only for names that may
/// be near.
fn bag_distance(a: &[u8], b: &[u8]) -> usize {
    let mut h = [0i32; 256];
    for &x in a {
        h[usize::from(x)] += 1;
    }
    for &x in b {
        h[usize::from(x)] -= 1;
    }
    let (mut pos, mut neg) = (0usize, 0usize);
    for &x in a.iter().chain(b) {
        let v = std::mem::take(&mut h[usize::from(x)]);
        if v > 0 {
            pos += v as usize;
        } else {
            neg += v.unsigned_abs() as usize;
        }
    }
    let bound = pos.max(neg);
    if a.is_ascii() && b.is_ascii() {
        bound
    } else {
        bound / 4
    }
}

/// The name asked for, as names are compared with it.
struct Wanted {
    /// NFKC, lower case.
    fold: String,
    chars: usize,
    /// Edits allowed.
    limit: usize,
}

impl Wanted {
    fn new(wanted: &[u8]) -> Wanted {
        let fold = fold(&String::from_utf8_lossy(wanted));
        let chars = fold.chars().count();
        Wanted {
            chars,
            limit: max_edits(chars),
            fold,
        }
    }

    /// How near `name` is (0 lookalike, 1 prefix, 1 + d at edit distance d), if near at all.
    /// ASCII names, the common case, are compared without allocating unless they may be a
    /// typo's reading.
    fn rank(&self, name: &[u8]) -> Option<usize> {
        let w = self.fold.as_bytes();
        let folded;
        let (f, chars): (&[u8], usize) = if name.is_ascii() && self.fold.is_ascii() {
            if name.eq_ignore_ascii_case(w) {
                return Some(0);
            }
            if name.len() > w.len()
                && name[..w.len()].eq_ignore_ascii_case(w)
                && matches!(name[w.len()], b'/' | b'.' | b':')
            {
                return Some(1);
            }
            if name.len().abs_diff(w.len()) > self.limit {
                return None;
            }
            folded = name.to_ascii_lowercase();
            (&folded, name.len())
        } else {
            folded = fold(&String::from_utf8_lossy(name)).into_bytes();
            if folded == w {
                return Some(0);
            }
            if folded.len() > w.len()
                && folded.starts_with(w)
                && matches!(folded[w.len()], b'/' | b'.' | b':')
            {
                return Some(1);
            }
            let chars = String::from_utf8_lossy(&folded).chars().count();
            (&folded, chars)
        };
        if chars.abs_diff(self.chars) > self.limit || bag_distance(f, w) > self.limit {
            return None;
        }
        let d = strsim::osa_distance(&String::from_utf8_lossy(f), &self.fold);
        (d <= self.limit).then_some(1 + d)
    }
}

/// The few names of `names` nearest `wanted`: of the best rank found (above), at most [`MAX`],
/// in name order.
pub fn near(wanted: &[u8], names: TensorInfos<'_>) -> Result<Vec<Vec<u8>>> {
    let wanted = Wanted::new(wanted);
    // (rank, name), best first; ties in the order the names stream in (name order).
    let mut best: Vec<(usize, Vec<u8>)> = Vec::new();
    for t in names {
        let name = t?.name;
        let Some(rank) = wanted.rank(&name) else {
            continue;
        };
        if best.len() == MAX && best.last().is_some_and(|b| b.0 <= rank) {
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
