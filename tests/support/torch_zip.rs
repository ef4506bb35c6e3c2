//! Files shaped as PyTorch and torch.distributed.checkpoint write them, built with the standard
//! library only (inputs paramdex must refuse as foreign, never call corrupt): a `torch.save`
//! zip archive laid out as PyTorch's writer lays it out (stored entries, version-needed 0,
//! flags 0x0808 with a data descriptor after each entry, DOS time and date 0, data aligned to
//! 64 bytes by an `FB` extra field, then the central directory and its end record), a bare
//! pickle, and a DCP `FileSystemWriter` directory.
//!
//! Shared by the library's and the CLI's tests: `#[path = ".../tests/support/torch_zip.rs"]`.
#![allow(dead_code)]

use std::fs;
use std::path::Path;

/// CRC-32 (IEEE, reflected), as zip stores it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A zip archive of `entries` (name, bytes), stored, as PyTorch's writer writes it.
pub fn zip(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        let offset = out.len() as u32;
        let crc = crc32(data);
        // Pad so that the data starts on a 64-byte boundary: an extra field "FB" of zeros.
        let fixed = out.len() + 30 + name.len() + 4;
        let pad = (64 - fixed % 64) % 64;
        let mut extra = b"FB".to_vec();
        extra.extend_from_slice(&(pad as u16).to_le_bytes());
        extra.resize(4 + pad, b'Z');
        out.extend_from_slice(b"PK\x03\x04");
        out.extend_from_slice(&0u16.to_le_bytes()); // version needed
        out.extend_from_slice(&0x0808u16.to_le_bytes()); // flags: data descriptor, UTF-8
        out.extend_from_slice(&0u16.to_le_bytes()); // stored
        out.extend_from_slice(&[0; 4]); // DOS time and date
        out.extend_from_slice(&[0; 12]); // crc, sizes: in the data descriptor
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&extra);
        out.extend_from_slice(data);
        out.extend_from_slice(b"PK\x07\x08");
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());

        central.extend_from_slice(b"PK\x01\x02");
        central.extend_from_slice(&0u16.to_le_bytes()); // version made by
        central.extend_from_slice(&0u16.to_le_bytes()); // version needed
        central.extend_from_slice(&0x0808u16.to_le_bytes());
        central.extend_from_slice(&0u16.to_le_bytes());
        central.extend_from_slice(&[0; 4]);
        central.extend_from_slice(&crc.to_le_bytes());
        central.extend_from_slice(&(data.len() as u32).to_le_bytes());
        central.extend_from_slice(&(data.len() as u32).to_le_bytes());
        central.extend_from_slice(&(name.len() as u16).to_le_bytes());
        central.extend_from_slice(&[0; 12]); // extra, comment, disk, attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let cd_offset = out.len() as u32;
    let n = entries.len() as u16;
    out.extend_from_slice(&central);
    out.extend_from_slice(b"PK\x05\x06");
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// The pickle `torch.save` writes as `data.pkl` for `{"w": tensor}`: its first opcodes (PROTO
/// 2, EMPTY_DICT, ...) and a STOP; paramdex never runs it.
pub fn pickle(protocol: u8) -> Vec<u8> {
    let mut p = vec![0x80, protocol, b'}', b'q', 0, b'X', 1, 0, 0, 0, b'w'];
    p.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\nq\x01.");
    p
}

/// The bytes of a `torch.save` file written to `path` (whose stem names the archive, as
/// PyTorch names it): `STEM/data.pkl`, `STEM/byteorder`, `STEM/data/0` holding `storage`
/// bytes, `STEM/version`, `STEM/.data/serialization_id`.
pub fn torch_save(path: &Path, storage: &[u8]) -> Vec<u8> {
    let stem = path.file_stem().unwrap().to_str().unwrap();
    let entries = vec![
        (format!("{stem}/data.pkl"), pickle(2)),
        (format!("{stem}/byteorder"), b"little".to_vec()),
        (format!("{stem}/data/0"), storage.to_vec()),
        (format!("{stem}/version"), b"3\n".to_vec()),
        (
            format!("{stem}/.data/serialization_id"),
            b"1234567890123456789012345678901234567890".to_vec(),
        ),
    ];
    let bytes = zip(&entries);
    fs::write(path, &bytes).unwrap();
    bytes
}

/// A DCP `FileSystemWriter` directory at `dir`: `.metadata` (a pickle) and `__0_0.distcp`
/// (a tensor's `torch.save` archive named `archive`, as DCP writes each tensor).
pub fn dcp_dir(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(".metadata"), pickle(4)).unwrap();
    let entries = vec![
        ("archive/data.pkl".to_string(), pickle(2)),
        ("archive/data/0".to_string(), vec![0u8; 64]),
        ("archive/version".to_string(), b"3\n".to_vec()),
    ];
    fs::write(dir.join("__0_0.distcp"), zip(&entries)).unwrap();
}
