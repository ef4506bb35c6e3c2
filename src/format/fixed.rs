//! LevelDB's little-endian fixed-width integers.

/// Appends `v` as a little-endian fixed32.
pub fn put_fixed32(dst: &mut Vec<u8>, v: u32) {
    dst.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` as a little-endian fixed64.
pub fn put_fixed64(dst: &mut Vec<u8>, v: u64) {
    dst.extend_from_slice(&v.to_le_bytes());
}

/// Reads a little-endian fixed32 at `pos`, if 4 bytes are there.
pub fn get_fixed32(src: &[u8], pos: usize) -> Option<u32> {
    let end = pos.checked_add(4)?;
    let b: [u8; 4] = src.get(pos..end)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

/// Reads a little-endian fixed64 at `pos`, if 8 bytes are there.
pub fn get_fixed64(src: &[u8], pos: usize) -> Option<u64> {
    let end = pos.checked_add(8)?;
    let b: [u8; 8] = src.get(pos..end)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}
