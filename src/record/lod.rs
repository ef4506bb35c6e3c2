//! The LoD (level of detail) of a record: the zero-copy view of the levels a decoded header
//! holds ([`Lod`]), and the rules Paddle holds a LoD to against the tensor's shape
//! ([`validate_lod`]), which a writer checks before encoding one. Its own file because both
//! sides of the codec use it and neither owns it.

use smallvec::SmallVec;

/// Zero-copy view of a record's LoD: each level is its raw `u64` little-endian bytes inside the
/// buffer the record was decoded from.
#[derive(Clone, Debug, Default)]
pub struct Lod<'a> {
    /// One slice per level; each length is a multiple of 8 (checked by the decoder).
    pub(super) levels: SmallVec<[&'a [u8]; 2]>,
}

impl<'a> Lod<'a> {
    /// Number of levels (0 for ordinary parameters).
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// The offsets of level `i`; empty if there is no such level.
    pub fn level(&self, i: usize) -> impl ExactSizeIterator<Item = u64> + 'a {
        let bytes: &'a [u8] = self.levels.get(i).copied().unwrap_or(&[]);
        bytes.chunks_exact(8).map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c); // chunks_exact yields exactly 8 bytes
            u64::from_le_bytes(b)
        })
    }

    /// The raw little-endian bytes of level `i`, if it exists.
    pub fn level_bytes(&self, i: usize) -> Option<&'a [u8]> {
        self.levels.get(i).copied()
    }

    /// All levels, copied out.
    pub fn to_vec(&self) -> Vec<Vec<u64>> {
        (0..self.levels())
            .map(|i| self.level(i).collect())
            .collect()
    }

    /// Whether the record has no LoD.
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }
}

/// Checks a LoD against the tensor's shape, as Paddle requires: every level is non-empty (at
/// least `[0]`), starts at 0 and never decreases; the last offset of level `i` equals the number
/// of offsets of level `i + 1` minus 1; the last offset of the last level equals `dims[0]`. A
/// scalar cannot have a LoD. An empty LoD is always valid.
///
/// # Errors
///
/// A readable reason when the LoD is inconsistent.
pub fn validate_lod(lod: &[Vec<u64>], dims: &[u64]) -> std::result::Result<(), String> {
    if lod.is_empty() {
        return Ok(());
    }
    let Some(&rows) = dims.first() else {
        return Err("a scalar (rank 0) tensor cannot have a LoD".into());
    };
    for (i, level) in lod.iter().enumerate() {
        let (Some(&first), Some(&last)) = (level.first(), level.last()) else {
            return Err(format!("LoD level {i} is empty (it needs at least [0])"));
        };
        if first != 0 {
            return Err(format!("LoD level {i} starts at {first}, not 0"));
        }
        if let Some(w) = level.windows(2).position(|w| w[1] < w[0]) {
            return Err(format!(
                "LoD level {i} decreases at index {}: {} after {}",
                w + 1,
                level[w + 1],
                level[w]
            ));
        }
        let (limit, what) = match lod.get(i + 1) {
            Some(next) => {
                // Level i + 1 is checked for emptiness in the next round, but its sequence
                // count is needed now.
                let sequences = next.len().checked_sub(1).ok_or_else(|| {
                    format!("LoD level {} is empty (it needs at least [0])", i + 1)
                })?;
                (
                    sequences as u64,
                    format!("level {} holds {sequences} sequences", i + 1),
                )
            }
            None => (rows, format!("the first dimension is {rows}")),
        };
        if last != limit {
            return Err(format!(
                "LoD level {i} ends at {last}, but {what} (they must be equal)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_lod_rules() {
        assert_eq!(validate_lod(&[], &[]), Ok(()));
        assert_eq!(validate_lod(&[vec![0, 2, 5]], &[5, 1]), Ok(()));
        assert_eq!(
            validate_lod(&[vec![0, 2, 3], vec![0, 1, 4, 7]], &[7, 2]),
            Ok(())
        );
        assert_eq!(validate_lod(&[vec![0]], &[0]), Ok(()));
        assert!(validate_lod(&[vec![0, 1]], &[])
            .unwrap_err()
            .contains("scalar"));
        assert!(validate_lod(&[vec![]], &[0]).unwrap_err().contains("empty"));
        assert!(validate_lod(&[vec![1, 5]], &[5])
            .unwrap_err()
            .contains("starts at 1"));
        assert!(validate_lod(&[vec![0, 3, 2, 5]], &[5])
            .unwrap_err()
            .contains("decreases"));
        assert!(validate_lod(&[vec![0, 2, 4]], &[5])
            .unwrap_err()
            .contains("first dimension"));
        assert!(validate_lod(&[vec![0, 2, 3], vec![0, 1, 7]], &[7])
            .unwrap_err()
            .contains("level 1 holds 2 sequences"));
        // An empty level after a full one (Paddle's loader reads such a file): an error, not an
        // arithmetic underflow.
        assert_eq!(
            validate_lod(&[vec![0, 5], vec![]], &[5, 1]),
            Err("LoD level 1 is empty (it needs at least [0])".into())
        );
    }
}
