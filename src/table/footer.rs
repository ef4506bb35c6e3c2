//! Block handles and the 48-byte table footer.

use super::{FOOTER_LEN, TABLE_MAGIC};
use crate::error::{Corruption, Error, Result};
use crate::format::{put_fixed64, put_varint64, Cursor};

/// Where a block lives: absolute file offset and stored length (excluding the 5-byte trailer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct BlockHandle {
    /// Absolute file offset of the block's first byte.
    pub offset: u64,
    /// Stored length of the block, not counting its trailer.
    pub size: u64,
}

impl BlockHandle {
    /// Largest encoded length of a handle: two 10-byte varints.
    pub const MAX_ENCODED_LEN: usize = 20;

    /// Appends the handle as `varint64 offset, varint64 size`.
    pub fn encode_to(&self, dst: &mut Vec<u8>) {
        put_varint64(dst, self.offset);
        put_varint64(dst, self.size);
    }

    /// Decodes a handle from the cursor. `None` if truncated or a varint is over-long or
    /// overflows 64 bits.
    pub fn decode(cur: &mut Cursor<'_>) -> Option<Self> {
        let offset = cur.varint64()?;
        let size = cur.varint64()?;
        Some(BlockHandle { offset, size })
    }
}

/// The table footer: handles of the metaindex and index blocks, then the magic number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// Handle of the metaindex block (the empty block in every TensorFlow table).
    pub metaindex: BlockHandle,
    /// Handle of the index block.
    pub index: BlockHandle,
}

/// Offset of the magic number inside the footer.
const MAGIC_POS: usize = FOOTER_LEN - 8;

impl Footer {
    /// Encodes the footer: both handles, zero padding up to byte 40, then the magic number as two
    /// little-endian fixed32 words (low word first).
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut v = Vec::with_capacity(FOOTER_LEN);
        self.metaindex.encode_to(&mut v);
        self.index.encode_to(&mut v);
        v.resize(MAGIC_POS, 0);
        put_fixed64(&mut v, TABLE_MAGIC); // low word first, as LevelDB writes two fixed32
        let mut out = [0u8; FOOTER_LEN];
        out.copy_from_slice(&v);
        out
    }

    /// Decodes a footer from exactly [`FOOTER_LEN`] bytes found at absolute `file_offset`.
    ///
    /// The magic number is checked first (as TensorFlow does), then the two handles are decoded
    /// from the start; the padding is ignored.
    pub fn decode(bytes: &[u8], file_offset: u64) -> Result<Footer> {
        if bytes.len() != FOOTER_LEN {
            return Err(Error::corrupt(
                "footer",
                file_offset,
                format!("footer is {} bytes, expected {FOOTER_LEN}", bytes.len()),
            ));
        }
        let magic_bytes = &bytes[MAGIC_POS..];
        let mut cur = Cursor::new(magic_bytes, file_offset.saturating_add(MAGIC_POS as u64));
        let lo = cur.u32_le();
        let hi = cur.u32_le();
        let magic = match (lo, hi) {
            (Some(lo), Some(hi)) => (u64::from(hi) << 32) | u64::from(lo),
            _ => 0,
        };
        if magic != TABLE_MAGIC {
            return Err(Error::Corrupt {
                what: "footer",
                offset: file_offset.saturating_add(MAGIC_POS as u64),
                kind: Corruption::BadMagic,
                detail: format!(
                    "bad magic number: found {}, expected 57fb808b247547db (not a LevelDB/TensorFlow table)",
                    crate::name::to_hex(magic_bytes)
                ),
            });
        }
        let mut cur = Cursor::new(&bytes[..MAGIC_POS], file_offset);
        let metaindex = BlockHandle::decode(&mut cur)
            .ok_or_else(|| Error::corrupt("footer", cur.offset(), "bad metaindex block handle"))?;
        let index = BlockHandle::decode(&mut cur)
            .ok_or_else(|| Error::corrupt("footer", cur.offset(), "bad index block handle"))?;
        Ok(Footer { metaindex, index })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_round_trip_and_golden() {
        let f = Footer {
            metaindex: BlockHandle {
                offset: 41,
                size: 8,
            },
            index: BlockHandle {
                offset: 54,
                size: 14,
            },
        };
        let b = f.encode();
        let mut want = vec![0x29, 0x08, 0x36, 0x0e];
        want.resize(40, 0);
        want.extend_from_slice(&[0x57, 0xfb, 0x80, 0x8b, 0x24, 0x75, 0x47, 0xdb]);
        assert_eq!(&b[..], &want[..]);
        assert_eq!(Footer::decode(&b, 73).unwrap(), f);

        let big = Footer {
            metaindex: BlockHandle {
                offset: u64::MAX,
                size: u64::MAX,
            },
            index: BlockHandle {
                offset: u64::MAX - 1,
                size: 1 << 40,
            },
        };
        assert_eq!(Footer::decode(&big.encode(), 0).unwrap(), big);
    }

    #[test]
    fn footer_rejects_bad_magic_and_handles() {
        let f = Footer {
            metaindex: BlockHandle { offset: 1, size: 2 },
            index: BlockHandle { offset: 3, size: 4 },
        };
        let mut b = f.encode();
        b[47] ^= 1;
        let e = Footer::decode(&b, 100).unwrap_err().to_string();
        assert!(e.contains("bad magic number"), "{e}");
        assert!(e.contains("57fb808b247547da"), "{e}");
        assert!(e.contains("offset 140"), "{e}");

        // Over-long varint in the first handle.
        let mut b = f.encode();
        b[..11].fill(0x80);
        let e = Footer::decode(&b, 0).unwrap_err().to_string();
        assert!(e.contains("metaindex"), "{e}");

        // Handles must not run into the magic.
        let mut b = f.encode();
        b[..40].fill(0xff);
        assert!(Footer::decode(&b, 0).is_err());

        assert!(Footer::decode(&f.encode()[..47], 0).is_err());
    }

    #[test]
    fn handle_decode_rejects_truncated() {
        let mut v = Vec::new();
        BlockHandle {
            offset: 300,
            size: 70000,
        }
        .encode_to(&mut v);
        for n in 0..v.len() {
            assert_eq!(BlockHandle::decode(&mut Cursor::new(&v[..n], 0)), None);
        }
        let mut c = Cursor::new(&v, 0);
        assert_eq!(
            BlockHandle::decode(&mut c),
            Some(BlockHandle {
                offset: 300,
                size: 70000
            })
        );
        assert_eq!(c.remaining(), 0);
    }
}
