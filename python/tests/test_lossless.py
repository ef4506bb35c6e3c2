"""Lossless compression of tensor data from Python (issue 40, SPEC.md 3.4): ``save_file(...,
compress="lossless")``, ``Writer``, ``CheckpointManager`` and the DCP ``StorageWriter`` write
smaller files whose tensors read back byte for byte with no option; a bad ``compress`` value is
refused; a damaged compressed record is a CorruptError naming the tensor and chunk."""

import os

import numpy as np
import pytest

import paramdex
import paramdex.numpy as pnp
from conftest import need


def _weights(rows=2048, cols=512, seed=0):
    """Weights with a scale per row, as float32."""
    rng = np.random.default_rng(seed)
    scale = 0.02 * np.exp(0.5 * rng.standard_normal((rows, 1)))
    return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)


def _size(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path)


def test_numpy_save_file_compress_round_trips(tmp_path):
    w = _weights()
    t = {"w": w, "i": np.arange(4096, dtype=np.int32), "tiny": np.ones(3, np.float32)}
    plain, packed = tmp_path / "plain.pdx", tmp_path / "packed.pdx"
    pnp.save_file(t, plain)
    pnp.save_file(t, packed, compress="lossless")
    assert _size(packed) < 0.95 * _size(plain)
    for copy in (False, True):
        got = pnp.load_file(packed, copy=copy)
        for k, v in t.items():
            assert got[k].dtype == v.dtype and np.array_equal(got[k], v), (k, copy)
    with paramdex.safe_open(packed, framework="np") as f:
        assert np.array_equal(f.get_tensor("w"), w)
        assert np.array_equal(f.get_slice("w")[100:300, 7:9], w[100:300, 7:9])


def test_bad_compress_values_are_refused(tmp_path):
    t = {"w": _weights(64, 64)}
    with pytest.raises(ValueError, match="lossless"):
        pnp.save_file(t, tmp_path / "a.pdx", compress="zip")
    with pytest.raises(ValueError, match="safetensors"):
        pnp.save_file(t, tmp_path / "a.safetensors", compress="lossless")
    with pytest.raises(ValueError, match="lossless"):
        paramdex.Writer(tmp_path / "b.pdx", compress="gzip")


def test_writer_compress_and_damage_names_tensor_and_chunk(tmp_path):
    w = _weights(4096, 512)  # 8 MiB of float32: 8 chunks
    p = tmp_path / "a.pdx"
    with paramdex.Writer(p, compress="lossless") as wr:
        wr.add("w", w)
    with paramdex.safe_open(p, framework="np") as f:
        assert np.array_equal(f.get_tensor("w"), w)
    data = bytearray(p.read_bytes())
    # The file is the record (about 6 MiB of compressed data) and a small index: its middle
    # byte is inside a chunk's stored bytes, well past the record header and chunk table.
    data[len(data) // 2] ^= 0x20
    p.write_bytes(bytes(data))
    with pytest.raises(paramdex.CorruptError, match=r"tensor w: .*chunk \d"):
        with paramdex.safe_open(p, framework="np") as f:
            f.get_tensor("w")


def test_checkpoint_manager_compress(tmp_path):
    t = {"w": _weights(), "b": np.zeros(8, np.float32)}
    a = paramdex.CheckpointManager(tmp_path / "plain", sync=False)
    b = paramdex.CheckpointManager(tmp_path / "packed", sync=False, compress="lossless")
    a.save(1, t)
    b.save(1, t)
    assert _size(tmp_path / "packed") < 0.95 * _size(tmp_path / "plain")
    with b.restore() as f:
        for k, v in t.items():
            assert np.array_equal(f.get_tensor(k), v), k
    s = paramdex.CheckpointManager(tmp_path / "sharded", shards=2, sync=False, compress="lossless")
    s.save(1, t)
    with s.restore() as f:
        assert np.array_equal(f.get_tensor("w"), t["w"])


def test_torch_save_file_and_dcp_writer_compress(tmp_path):
    torch = need("torch")
    import torch.distributed.checkpoint as dcp

    import paramdex.torch as pt
    from paramdex.torch.dcp import StorageReader, StorageWriter

    w = torch.from_numpy(_weights()).to(torch.bfloat16)
    t = {"w": w, "b": torch.arange(10.0)}
    plain, packed = tmp_path / "plain.pdx", tmp_path / "packed.pdx"
    pt.save_file(t, plain)
    pt.save_file(t, packed, compress="lossless")
    assert _size(packed) < 0.8 * _size(plain)
    got = pt.load_file(packed)
    assert torch.equal(got["w"], w) and torch.equal(got["b"], t["b"])

    state = {"w": w.clone(), "b": t["b"].clone()}
    dcp.save(state, storage_writer=StorageWriter(tmp_path / "dcp-plain", sync=False))
    dcp.save(state, storage_writer=StorageWriter(tmp_path / "dcp", sync=False, compress="lossless"))
    assert _size(tmp_path / "dcp") < 0.8 * _size(tmp_path / "dcp-plain")
    into = {"w": torch.zeros_like(w), "b": torch.zeros(10)}
    dcp.load(into, storage_reader=StorageReader(tmp_path / "dcp"))
    assert torch.equal(into["w"], w) and torch.equal(into["b"], t["b"])
