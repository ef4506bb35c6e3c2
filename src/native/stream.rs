//! Streaming one tensor into a [`Writer`]: [`Writer::begin`] writes the record header and
//! returns a [`TensorWriter`] that takes the data bytes through `std::io::Write`, checksumming
//! them as they pass; `finish` patches the record's checksum field.

use std::io::Write;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{crc32c_extend, mask_crc};
use crate::name;
use crate::native::region::Region;
use crate::native::writer::Writer;

/// A tensor being streamed into a [`Writer`]; see [`Writer::begin`].
pub struct TensorWriter<'w> {
    writer: &'w mut Writer,
    name: Vec<u8>,
    dtype: DType,
    shape: Vec<u64>,
    lod_levels: usize,
    record_offset: u64,
    header_len: usize,
    crc_offset: u64,
    expected: u64,
    written: u64,
    crc: u32,
    finished: bool,
}

impl Writer {
    /// Starts a tensor whose data arrives in chunks (for tensors larger than memory).
    /// Write exactly the byte count of `shape` and `dtype` into the returned [`TensorWriter`],
    /// then call [`TensorWriter::finish`]. Dropping it unfinished makes this writer unusable.
    pub fn begin(
        &mut self,
        name: impl AsRef<[u8]>,
        dtype: DType,
        shape: &[u64],
        lod: &[Vec<u64>],
    ) -> Result<TensorWriter<'_>> {
        let name = name.as_ref();
        let record = self.begin_record(name, dtype, shape, lod)?;
        Ok(TensorWriter {
            name: name.to_vec(),
            dtype,
            shape: shape.to_vec(),
            lod_levels: lod.len(),
            record_offset: record.record_offset,
            header_len: record.header_len,
            crc_offset: record.crc_offset,
            expected: record.data_len,
            written: 0,
            crc: 0,
            finished: false,
            writer: self,
        })
    }

    /// Starts a slice whose data arrives in chunks: the streamed form of
    /// [`Writer::add_slice`], with the same checks, made before anything is written. Write
    /// exactly the bytes of `region` (row-major) into the returned [`TensorWriter`], then call
    /// [`TensorWriter::finish`]. A region that is the whole tensor starts an ordinary tensor.
    pub fn begin_slice(
        &mut self,
        name: impl AsRef<[u8]>,
        dtype: DType,
        full_shape: &[u64],
        region: &Region,
    ) -> Result<TensorWriter<'_>> {
        let name = name.as_ref();
        let Some(plan) = self.check_slice(name, dtype, full_shape, region)? else {
            return self.begin(name, dtype, full_shape, &[]);
        };
        let record = self.begin_slice_record(&plan, dtype, full_shape, region)?;
        Ok(TensorWriter {
            name: plan.key,
            dtype,
            shape: region.len.clone(),
            lod_levels: 0,
            record_offset: record.record_offset,
            header_len: record.header_len,
            crc_offset: record.crc_offset,
            expected: record.data_len,
            written: 0,
            crc: 0,
            finished: false,
            writer: self,
        })
    }
}

impl TensorWriter<'_> {
    /// Bytes still expected.
    pub fn remaining(&self) -> u64 {
        self.expected - self.written
    }

    /// Completes the tensor: checks the byte count and records its checksum and index entry.
    ///
    /// An error leaves the writer unusable (its record is half there): every later call on it
    /// is [`Error::WriterUnusable`] naming this tensor.
    pub fn finish(mut self) -> Result<()> {
        if self.written != self.expected {
            let detail = format!(
                "expected {} data bytes, got {}",
                self.expected, self.written
            );
            self.fail(format!("finish() {detail}"));
            return Err(Error::InvalidTensor {
                name: name::display(&self.name),
                detail,
            });
        }
        let masked = mask_crc(self.crc);
        if let Err(e) = self.writer.patch_crc(self.crc_offset, masked) {
            self.fail(e.to_string());
            return Err(e);
        }
        let w = &mut *self.writer;
        let entry = w.index_entry(
            self.dtype,
            &self.shape,
            self.lod_levels,
            self.record_offset,
            self.header_len,
            self.expected,
            masked,
        );
        let name = std::mem::take(&mut self.name);
        w.push_entry(&name, &entry);
        self.finished = true;
        Ok(())
    }
}

impl Write for TensorWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() as u64 > self.remaining() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "tensor {}: {} more bytes than its shape holds",
                    name::display(&self.name),
                    buf.len() as u64 - self.remaining()
                ),
            ));
        }
        if let Err(e) = self.writer.write_raw(buf) {
            self.fail(e.to_string());
            return Err(match e {
                Error::Io { source, .. } => source,
                other => std::io::Error::other(other.to_string()),
            });
        }
        self.crc = crc32c_extend(self.crc, buf);
        self.written += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl TensorWriter<'_> {
    /// Makes the writer unusable because this tensor failed (`why`), naming the tensor; an
    /// earlier reason stays.
    fn fail(&mut self, why: String) {
        let tensor = name::display(&self.name);
        self.writer.poison_stream(tensor, why);
    }
}

impl Drop for TensorWriter<'_> {
    fn drop(&mut self) {
        if !self.finished {
            // After a failure this keeps the failure's reason (`fail` gave it first).
            self.fail("dropped before finish()".into());
        }
    }
}
