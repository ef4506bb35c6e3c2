//! What an input that no format paramdex reads looks like, so that it is refused as "not a …
//! file" saying what it is ([`crate::Error::UnrecognizedFormat`] with its
//! [`LooksLike`]), never called damaged: one classification for local files, directories and
//! objects at a URL, from a bounded look at the first bytes ([`HEAD_LEN`]), the name, and for a
//! directory the names of at most [`MAX_ENTRIES_LOOKED_AT`] of its entries.
//!
//! Recognised: zip archives (a `torch.save` file by the names of its first entry), Python
//! pickles (a Paddle dygraph `.pdparams` / `.pdopt` by its name), and torch.distributed.checkpoint
//! (DCP) checkpoints (`FileSystemWriter`'s directory of a `.metadata` pickle and `*.distcp`
//! files, or one of those files).

use std::io::Read;
use std::path::Path;

use crate::error::{Error, LooksLike};

/// Bytes of the start of an input read to tell what it looks like: a zip's first local file
/// header with its entry name, a pickle's first opcodes.
pub(crate) const HEAD_LEN: usize = 4096;

/// Most entries of a directory whose names are looked at for `*.distcp` files.
pub(crate) const MAX_ENTRIES_LOOKED_AT: usize = 4096;

/// The inputs paramdex reads, as a "not …" message names them.
pub(crate) const READ_KINDS: &str =
    "a paramdex file, a safetensors file, a GGUF file, a torch.save file, a torch DCP \
     checkpoint, a TensorFlow checkpoint or a Paddle model/tensor file or dygraph pickle";

/// What a file named `name` (its last path component) whose first bytes are `head` looks
/// like, if it is a format recognised here. Used only once no format paramdex reads has
/// claimed the file.
pub(crate) fn looks_like(name: &str, head: &[u8]) -> Option<LooksLike> {
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    if ext == "distcp" {
        // DCP's data files: torch.save archives and raw bytes, one after another.
        return Some(LooksLike::TorchDcp);
    }
    if let Some(kind) = zip_kind(head) {
        return Some(kind);
    }
    pickle_protocol(head)?;
    Some(match (name, ext) {
        (".metadata", _) => LooksLike::TorchDcp,
        (_, "pdparams" | "pdopt") => LooksLike::PaddlePickle,
        _ => LooksLike::Pickle,
    })
}

/// The protocol of a Python pickle starting `head` (`80 02` to `80 05`: the PROTO opcode).
pub(crate) fn pickle_protocol(head: &[u8]) -> Option<u8> {
    match head {
        [0x80, proto @ 2..=5, ..] => Some(*proto),
        _ => None,
    }
}

/// A zip archive, from its first local file header: [`LooksLike::TorchZip`] when the first
/// entry's name is one that `torch.save` writes, [`LooksLike::Zip`] otherwise (an empty
/// archive, whose end record comes first, included).
fn zip_kind(head: &[u8]) -> Option<LooksLike> {
    match head {
        [b'P', b'K', 5, 6, ..] => return Some(LooksLike::Zip),
        [b'P', b'K', 3, 4, ..] => {}
        _ => return None,
    }
    // Local file header: name length at 26, extra field length at 28, name at 30.
    let name = head
        .get(26..28)
        .map(|n| usize::from(u16::from_le_bytes([n[0], n[1]])))
        .and_then(|n| head.get(30..30 + n));
    match name {
        Some(name) if is_torch_entry(name) => Some(LooksLike::TorchZip),
        _ => Some(LooksLike::Zip),
    }
}

/// Whether `name` is an entry `torch.save` writes in its archive `ARCHIVE/`: `data.pkl` (the
/// first), `data/N` (a storage), `version`, `.data/version`, `byteorder`, `.format_version`,
/// `.storage_alignment`.
fn is_torch_entry(name: &[u8]) -> bool {
    let Some(slash) = name.iter().position(|&b| b == b'/') else {
        return false;
    };
    let (archive, entry) = (&name[..slash], &name[slash + 1..]);
    !archive.is_empty()
        && (matches!(
            entry,
            b"data.pkl"
                | b"version"
                | b".data/version"
                | b"byteorder"
                | b".format_version"
                | b".storage_alignment"
        ) || entry
            .strip_prefix(b"data/")
            .is_some_and(|d| !d.is_empty() && d.iter().all(u8::is_ascii_digit)))
}

/// What the directory `dir` looks like: [`LooksLike::TorchDcp`] when it holds DCP's
/// `.metadata` pickle or a `*.distcp` file among its first [`MAX_ENTRIES_LOOKED_AT`] entries.
/// A directory that cannot be listed looks like nothing.
pub(crate) fn dir_looks_like(dir: &Path) -> Option<LooksLike> {
    let meta = dir.join(".metadata");
    if meta.is_file() && pickle_protocol(&read_head(&meta, 2)).is_some() {
        return Some(LooksLike::TorchDcp);
    }
    let distcp = std::fs::read_dir(dir)
        .ok()?
        .take(MAX_ENTRIES_LOOKED_AT)
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().ends_with(".distcp") && e.path().is_file());
    distcp.then_some(LooksLike::TorchDcp)
}

/// The error for the file or directory `path` when it looks like a format recognised here
/// ([`looks_like`], [`dir_looks_like`]); `None` when it looks like none of them.
pub(crate) fn refusal(path: &Path) -> Option<Error> {
    let meta = std::fs::metadata(path).ok()?;
    let shown = || path.display().to_string();
    if meta.is_dir() {
        return dir_looks_like(path).map(|kind| not_recognized(shown(), kind, &[]));
    }
    if !meta.is_file() {
        return None;
    }
    let head = read_head(path, HEAD_LEN);
    looks_like(&file_name(path), &head).map(|kind| not_recognized(shown(), kind, &head))
}

/// The last component of `path`, as text (lossy).
pub(crate) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The first `n` bytes of the file `path` (fewer if it is shorter; none if it cannot be read).
fn read_head(path: &Path, n: usize) -> Vec<u8> {
    let mut head = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        // A read error leaves what was read: the head only names what the file looks like.
        let _ = f.take(n as u64).read_to_end(&mut head);
    }
    head
}

/// The error for `path` (a file, directory or URL as shown) that looks like `kind`, not being
/// a format paramdex reads; `head` is its first bytes (for a pickle's protocol), or empty.
pub(crate) fn not_recognized(path: String, kind: LooksLike, head: &[u8]) -> Error {
    let seen = match pickle_protocol(head) {
        Some(p) => format!(" (protocol {p}, first bytes 80 {p:02x})"),
        None => String::new(),
    };
    let advice = match kind {
        LooksLike::TorchZip | LooksLike::Zip => {
            "paramdex does not read zip archives or run the pickle inside: load it with \
             torch.load(weights_only=True) and save the tensors with \
             safetensors.torch.save_file to read them here"
        }
        LooksLike::Pickle => {
            "paramdex runs no pickle: load it with what wrote it (paddle.load, \
             torch.load(weights_only=True)) and save the tensors with safetensors, or save a \
             Paddle model with paddle.jit.save to get a .pdiparams"
        }
        LooksLike::PaddlePickle => {
            "not a Paddle tensor stream: load it with paddle.load, or save the model with \
             paddle.jit.save / paddle.static.save_inference_model to get a .pdiparams"
        }
        LooksLike::TorchDcp => {
            "a DCP checkpoint is read as a whole: give its directory (or its .metadata file); \
             a directory of .distcp files without .metadata is a save that did not finish \
             (the coordinator writes .metadata last)"
        }
    };
    Error::UnrecognizedFormat {
        path,
        detail: format!("not {READ_KINDS}: this looks like {kind}{seen}; {advice}"),
        looks_like: Some(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A local file header of a stored entry named `name` (sizes in a data descriptor).
    fn local_header(name: &[u8]) -> Vec<u8> {
        let mut h = b"PK\x03\x04".to_vec();
        h.extend_from_slice(&[0, 0, 8, 8, 0, 0, 0, 0, 0, 0]);
        h.extend_from_slice(&[0; 12]);
        h.extend_from_slice(&(name.len() as u16).to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes());
        h.extend_from_slice(name);
        h
    }

    #[test]
    fn zips_pickles_and_dcp_files_are_told_apart() {
        for name in [&b"model/data.pkl"[..], b"a/data/0", b"archive/version"] {
            assert_eq!(
                looks_like("x.pt", &local_header(name)),
                Some(LooksLike::TorchZip)
            );
        }
        for name in [
            &b"data.pkl"[..],
            b"/data.pkl",
            b"a/data/",
            b"a/data/x",
            b"w.npy",
        ] {
            assert_eq!(
                looks_like("x.pt", &local_header(name)),
                Some(LooksLike::Zip)
            );
        }
        // The name cut off by the bytes read, the header cut short, an empty archive.
        let h = local_header(b"model/data.pkl");
        assert_eq!(looks_like("x", &h[..35]), Some(LooksLike::Zip));
        assert_eq!(looks_like("x", &h[..10]), Some(LooksLike::Zip));
        assert_eq!(looks_like("x", b"PK\x05\x06"), Some(LooksLike::Zip));
        assert_eq!(
            looks_like("x.pkl", b"\x80\x04\x95"),
            Some(LooksLike::Pickle)
        );
        assert_eq!(
            looks_like("m.pdopt", b"\x80\x02}"),
            Some(LooksLike::PaddlePickle)
        );
        assert_eq!(
            looks_like(".metadata", b"\x80\x04"),
            Some(LooksLike::TorchDcp)
        );
        assert_eq!(looks_like("__0_0.distcp", b""), Some(LooksLike::TorchDcp));
        for head in [
            &b""[..],
            b"\x80",
            b"\x80\x06",
            b"PK\x03",
            b"\0\0\0\0",
            b"{\"a\": 1}",
        ] {
            assert_eq!(looks_like("x.bin", head), None, "{head:?}");
        }
    }
}
