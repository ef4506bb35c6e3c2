//! Paddle record decoding over arbitrary bytes: one record, a walk over a combined stream, the
//! recovery scan, and the size fields of a merged parameter file (SPEC.md 9.1). A record that
//! decodes must lie inside the buffer, and re-encoding its fields must decode to the same
//! fields (the encoder and decoder agree); the size fields of a merged file that chain must
//! tile the buffer exactly, and hopping to record k must find what the table holds.

use std::path::Path;

use paramdex::interop::paddle::merged;
use paramdex::raw::record::{self, RecordSpec};

fn round_trip(h: &record::RecordHeader<'_>, data: &[u8]) {
    let lod = h.lod.to_vec();
    let spec = RecordSpec {
        dtype: h.dtype,
        dims: &h.dims,
        lod: &lod,
        name: h.name,
        data_crc: h.data_crc,
        full_shape: None,
        // A compressed record's header announces its stored bytes (SPEC.md 3.4).
        stored_len: (h.codec != 0).then_some(h.data_len),
    };
    for alignment in [1u64, 64] {
        let mut buf = Vec::new();
        let Ok(layout) = record::encode_header(&spec, 0, alignment, &mut buf) else {
            // Only a desc that grows past the limit with padding may fail here.
            continue;
        };
        assert_eq!(layout.header_len, buf.len());
        assert_eq!(buf.len() as u64 % alignment, 0);
        buf.extend_from_slice(data);
        let (h2, d2) = record::decode_record(&buf, 0).expect("re-encoded record must decode");
        assert_eq!(h2.dtype, h.dtype);
        assert_eq!(h2.dims, h.dims);
        assert_eq!(h2.lod.to_vec(), lod);
        assert_eq!(h2.name, h.name);
        assert_eq!(h2.data_crc, h.data_crc);
        assert_eq!(d2, data);
        assert_eq!(h2.header_len, layout.header_len);
    }
}

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
    // A header whose data_type paramdex does not know (issue 27): inside the buffer, its
    // dimensions and LoD bounded as a known record's, and a known type is never taken for one.
    if let Ok(Some(h)) = record::decode_foreign_header(data, 7) {
        assert!(h.header_len <= data.len());
        assert!(h.dims.len() <= record::MAX_RANK);
        assert!(h.lod.levels() as u64 <= record::MAX_LOD_LEVELS);
        assert!(
            paramdex::DType::from_paddle(h.code).is_none(),
            "code {}",
            h.code
        );
    }
    if let Ok((h, d)) = record::decode_record(data, 7) {
        assert!(h.header_len as u64 + h.data_len <= data.len() as u64);
        assert_eq!(d.len() as u64, h.data_len);
        assert_eq!(d, &data[h.header_len..h.header_len + d.len()]);
        assert!(h.dims.len() <= record::MAX_RANK);
        assert!(h.lod.levels() as u64 <= record::MAX_LOD_LEVELS);
        assert_eq!(Some(h.data_len), record::data_len(h.dtype, &h.dims));
        let _ = record::validate_lod(&h.lod.to_vec(), &h.dims);
        round_trip(&h, d);
    }
    let mut end = 0u64;
    for r in record::walk(data, 0) {
        match r {
            Ok((off, h, d)) => {
                assert_eq!(off, end, "records must be contiguous");
                end = off + h.record_len();
                assert!(end <= data.len() as u64);
                assert_eq!(d.len() as u64, h.data_len);
            }
            Err(_) => break,
        }
    }
    check_merged(data);
    let (found, _) = paramdex::raw::recovery::scan(data);
    let mut end = 0u64;
    for r in &found {
        assert_eq!(r.offset, end);
        end += r.header.record_len();
        assert!(r.header.name.is_some() && r.header.header_crc.is_some());
    }
    assert!(end <= data.len() as u64);
}

/// The size fields of `data` read as a merged parameter file.
fn check_merged(data: &[u8]) {
    let path = Path::new("<fuzz>");
    let _ = merged::claims(data);
    let Ok(table) = merged::record_table(data, path) else {
        return;
    };
    let mut end = 0u64;
    for r in &table {
        assert_eq!(r.size_offset, end, "size fields must be contiguous");
        assert_eq!(r.offset, end + merged::SIZE_FIELD_LEN);
        assert!(r.len >= merged::MIN_MERGED_RECORD_LEN && r.len <= merged::MAX_MERGED_RECORD_LEN);
        end = r.offset + r.len;
    }
    assert_eq!(end, data.len() as u64, "the sizes chain to the end");
    if let Some(last) = table.len().checked_sub(1) {
        for k in [0, last / 2, last] {
            let hopped = merged::hop(data, k as u64, path).expect("hop over a valid table");
            assert_eq!(hopped, Some(table[k]));
        }
    }
    assert_eq!(merged::hop(data, table.len() as u64, path).ok(), Some(None));
}
