//! Near names for a name that is not there, as git suggests commands; and whether a near name
//! is the one asked for in another Unicode normalisation form (which looks identical).
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
//! The CLI's `get` and the Python package's `KeyError` both use this.

use unicode_normalization::{is_nfc, is_nfd, UnicodeNormalization};

/// At most this many suggestions.
pub const MAX_NEAR: usize = 5;

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

/// The few names of `names` nearest `wanted`: of the best rank found (module docs), at most
/// [`MAX_NEAR`], in the order they came (a store's names come in name order). The first error
/// of `names` is returned as it is.
pub fn near<E>(
    wanted: &[u8],
    names: impl IntoIterator<Item = Result<Vec<u8>, E>>,
) -> Result<Vec<Vec<u8>>, E> {
    let wanted = Wanted::new(wanted);
    // (rank, name), best first; ties in the order the names stream in.
    let mut best: Vec<(usize, Vec<u8>)> = Vec::new();
    for name in names {
        let name = name?;
        let Some(rank) = wanted.rank(&name) else {
            continue;
        };
        if best.len() == MAX_NEAR && best.last().is_some_and(|b| b.0 <= rank) {
            continue;
        }
        let at = best.partition_point(|b| b.0 <= rank);
        best.insert(at, (rank, name));
        best.truncate(MAX_NEAR);
    }
    // Only the nearest kind, as git does: a lookalike hides a typo's other readings.
    let top = best.first().map(|b| b.0);
    Ok(best
        .into_iter()
        .filter(|b| Some(b.0) == top)
        .map(|b| b.1)
        .collect())
}

/// A Unicode normalisation form a name is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NormalForm {
    /// Composed (`ü` one code point): what most keyboards and Linux file names give.
    Nfc,
    /// Decomposed (`u` + combining diaeresis): what macOS file names and some tools give.
    Nfd,
    /// Neither: some characters composed, some not.
    Mixed,
}

impl NormalForm {
    /// `NFC`, `NFD` or `mixed`.
    pub fn name(self) -> &'static str {
        match self {
            NormalForm::Nfc => "NFC",
            NormalForm::Nfd => "NFD",
            NormalForm::Mixed => "mixed",
        }
    }
}

/// The normalisation form of a UTF-8 name (NFC before NFD for a name that is both, as plain
/// ASCII is); `None` if the name is not UTF-8.
pub fn normal_form(name: &[u8]) -> Option<NormalForm> {
    let s = std::str::from_utf8(name).ok()?;
    Some(if is_nfc(s) {
        NormalForm::Nfc
    } else if is_nfd(s) {
        NormalForm::Nfd
    } else {
        NormalForm::Mixed
    })
}

/// When `given` and `stored` are different bytes for the same text under canonical
/// normalisation (they look identical: `über` composed and decomposed), the form of each
/// (given, stored).
pub fn normalisation_differs(given: &[u8], stored: &[u8]) -> Option<(NormalForm, NormalForm)> {
    if given == stored {
        return None;
    }
    let (g, s) = (
        std::str::from_utf8(given).ok()?,
        std::str::from_utf8(stored).ok()?,
    );
    if g.nfc().eq(s.nfc()) {
        Some((normal_form(given)?, normal_form(stored)?))
    } else {
        None
    }
}

/// Whether the name, shown by [`display`](super::display), is its own bytes: typed back as
/// shown, it is the same name. False for names with escapes (bytes that are not UTF-8, control
/// characters, a doubled backslash).
pub fn typeable(name: &[u8]) -> bool {
    std::str::from_utf8(name).is_ok_and(|s| super::display(name) == s)
}

/// The "did you mean" text for `wanted` and its [`near`] names (empty if there are none):
/// `did you mean a, b?`, and, for a near name that cannot be typed as shown, how to give its
/// bytes (`how_to_type(name)`, as `--hex 75cc88…` or `bytes.fromhex(…)`), saying so when it is
/// the name asked for in another normalisation form.
pub fn did_you_mean(
    wanted: &[u8],
    near: &[Vec<u8>],
    how_to_type: &dyn Fn(&[u8]) -> String,
) -> String {
    let shown: Vec<String> = near.iter().map(|n| super::display(n)).collect();
    let mut out = match shown.as_slice() {
        [] => return String::new(),
        [one] => format!("did you mean {one}?"),
        _ => format!("did you mean one of {}?", shown.join(", ")),
    };
    for n in near {
        if let Some((g, s)) = normalisation_differs(wanted, n) {
            out.push_str(&format!(
                " The stored name {} looks like the one given but differs in Unicode \
                 normalisation (stored {}, given {}); give its exact bytes: {}.",
                super::display(n),
                s.name(),
                g.name(),
                how_to_type(n)
            ));
        } else if !typeable(n) {
            out.push_str(&format!(
                " {} is shown with escapes; give its exact bytes: {}.",
                super::display(n),
                how_to_type(n)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn near_s(wanted: &str, list: &[&str]) -> Vec<String> {
        let mut v: Vec<&str> = list.to_vec();
        v.sort();
        near::<()>(
            wanted.as_bytes(),
            v.iter().map(|n| Ok(n.as_bytes().to_vec())),
        )
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
        assert_eq!(near_s("x", &refs).len(), MAX_NEAR);
    }

    #[test]
    fn an_error_of_the_names_is_returned() {
        let names = vec![Ok(b"a".to_vec()), Err("broken"), Ok(b"b".to_vec())];
        assert_eq!(near(b"a", names), Err("broken"));
    }

    #[test]
    fn says_when_the_near_name_differs_in_normalisation() {
        let nfd = "u\u{308}ber.bias".as_bytes().to_vec();
        let nfc = "\u{fc}ber.bias".as_bytes();
        assert_eq!(
            normalisation_differs(nfc, &nfd),
            Some((NormalForm::Nfc, NormalForm::Nfd))
        );
        assert_eq!(normalisation_differs(nfc, nfc), None);
        assert_eq!(normalisation_differs(b"uber.bias", &nfd), None);
        let hex = |n: &[u8]| format!("--hex {}", crate::name::to_hex(n));
        let msg = did_you_mean(nfc, std::slice::from_ref(&nfd), &hex);
        assert!(msg.starts_with("did you mean u\u{308}ber.bias? "), "{msg}");
        assert!(msg.contains("stored NFD, given NFC"), "{msg}");
        assert!(msg.contains("--hex 75cc88626572"), "{msg}");
        // A plain typo gets the plain question.
        let msg = did_you_mean(b"uber.bais", &[b"uber.bias".to_vec()], &hex);
        assert_eq!(msg, "did you mean uber.bias?");
        // A name shown with escapes says how to give its bytes.
        let msg = did_you_mean(b"a", &[b"a\x01".to_vec()], &hex);
        assert!(
            msg.contains("escapes") && msg.contains("--hex 6101"),
            "{msg}"
        );
    }
}
