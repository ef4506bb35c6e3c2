"""torch: tensors equal to what torch and safetensors load, every dtype round trip, the
copy-on-write zero-copy mapping, devices and writing torch tensors.

Without torch the whole module is skipped (a failure under PARAMDEX_REQUIRE_ALL=1): see
``conftest.need``."""

import numpy as np
import pytest

import paramdex

from conftest import need

torch = need("torch")
import paramdex.torch as pdt  # noqa: E402


# One-byte types torch neither computes in nor converts to (.to() and copy_ are not implemented
# for them): sampled as random bytes viewed as the type.
BYTE_VIEWED = {
    getattr(torch, n)
    for n in ("float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
              "int4", "uint4", "int2", "uint2")
    if hasattr(torch, n)
}


def sample(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype in BYTE_VIEWED:
        return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8).view(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        t = torch.randn(shape, generator=g, dtype=torch.float64) * 8
        if dtype.is_complex:
            return torch.complex(t, -t).to(dtype)
        return t.to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


DTYPES = list(pdt.TORCH_DTYPES.items())


def bits_equal(a, b):
    assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape), (a.dtype, b.dtype, a.shape, b.shape)
    if a.numel() == 0:
        return
    av = a.contiguous().reshape(-1).view(torch.uint8)
    bv = b.contiguous().reshape(-1).view(torch.uint8)
    assert torch.equal(av, bv)


@pytest.mark.parametrize("kind,dtype", DTYPES, ids=[k for k, _ in DTYPES])
def test_round_trip_every_dtype(tmp_path, kind, dtype):
    ts = {"a": sample(dtype, (3, 4)), "s": sample(dtype, ()), "e": sample(dtype, (0, 2))}
    p = tmp_path / "m.pdx"
    pdt.save_file(ts, p)
    got = pdt.load_file(p)
    for k in ts:
        bits_equal(got[k], ts[k])
    with paramdex.safe_open(p, framework="np") as f:
        assert f.info("a").dtype == kind


def test_equal_to_safetensors_torch_load(tmp_path):
    st = need("safetensors.torch")
    ts = {name: sample(dt, (5, 3), i) for i, (name, dt) in enumerate(DTYPES) if name not in ("uint16", "uint32", "uint64", "complex128", "int4", "uint4", "int2", "uint2")}
    sp = tmp_path / "m.safetensors"
    st.save_file(ts, str(sp))
    theirs = st.load_file(str(sp))
    pp = tmp_path / "m.pdx"
    pdt.save_file(theirs, pp)
    for path in (sp, pp):
        ours = pdt.load_file(path)
        assert sorted(ours) == sorted(theirs)
        for k in theirs:
            bits_equal(ours[k], theirs[k])
        with paramdex.safe_open(path, framework="pt") as f:
            bits_equal(f.get_slice("float32")[1:3, ::2], theirs["float32"][1:3, ::2])


def test_zero_copy_tensors_are_copy_on_write(tmp_path):
    p = tmp_path / "m.pdx"
    pdt.save_file({"w": torch.arange(1000, dtype=torch.float32)}, p)
    before = p.read_bytes()
    with paramdex.safe_open(p, framework="pt") as f:
        w = f.get_tensor("w")
        w2 = f.get_tensor("w")
        # Both tensors share the one private mapping of the file: no copy.
        assert w.untyped_storage().data_ptr() == w2.untyped_storage().data_ptr()
        assert w.untyped_storage().nbytes() == len(before)
    w[0] = 42.0  # writable; the write stays in this process
    assert p.read_bytes() == before
    assert w2[0] == 0.0 or w2[0] == 42.0  # same private pages (torch shares the storage)
    assert pdt.load_file(p)["w"][0] == 0.0


def test_torch_save_file_refuses_noncontiguous_and_accepts_grad_tensors(tmp_path):
    a = torch.arange(20, dtype=torch.float32).reshape(4, 5).t()
    g = torch.ones(3, requires_grad=True)
    # As safetensors: a non-contiguous tensor is refused, whatever the output format.
    with pytest.raises(ValueError, match="non contiguous"):
        pdt.save_file({"a": a, "g": g}, tmp_path / "m.pdx")
    a = a.contiguous()
    pdt.save_file({"a": a, "g": g}, tmp_path / "m.pdx", metadata={"framework": "pt"})
    got = pdt.load_file(tmp_path / "m.pdx")
    assert torch.equal(got["a"], a) and torch.equal(got["g"], g.detach())


def test_strings_are_refused_for_torch():
    path = f"{paramdex.__file__}"  # any file: unrecognized
    with pytest.raises(paramdex.UnrecognizedFormatError):
        paramdex.safe_open(path, framework="pt")


@pytest.mark.parametrize("name", ["model.pt", "ckpt.pt", "a_long_checkpoint_name.pt"])
def test_torch_save_files_are_read_not_called_corrupt(tmp_path, name):
    # A torch.save zip is read (without running its pickle), whatever its name (short archive
    # names were once taken for a damaged Paddle file and raised CorruptError).
    p = tmp_path / name
    w = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    torch.save({"w": w, "wt": w.t()}, p)
    with paramdex.safe_open(p, framework="pt") as f:
        assert sorted(f.keys()) == ["w", "wt"]
        assert torch.equal(f.get_tensor("w"), w)
        assert torch.equal(f.get_tensor("wt"), w.t().contiguous())


def test_a_file_replaced_under_its_name_is_not_mapped_by_torch(tmp_path):
    p = tmp_path / "m.pdx"
    pdt.save_file({"w": torch.zeros(64), "v": torch.ones(64)}, p)
    with paramdex.safe_open(p, framework="pt") as f:
        # Rewritten (renamed into place: a new file) after the open: torch must not map the new
        # file with the old file's offsets; the tensor is the bytes paramdex has mapped.
        pdt.save_file({"v": torch.full((64,), 7.0), "w": torch.full((64,), 5.0), "x": torch.zeros(9)}, p)
        w = f.get_tensor("w")
        assert torch.equal(w, torch.zeros(64))
        assert torch.equal(f.get_tensor("v"), torch.ones(64))


def test_load_file_copy_owns_its_memory_and_checks_as_it_copies(tmp_path):
    p = tmp_path / "m.pdx"
    ts = {k: sample(dt, (1200, 1000) if k == "float32" else (3, 4), i) for i, (k, dt) in enumerate(DTYPES)}
    ts["scalar"] = sample(torch.float64, ())
    ts["empty"] = sample(torch.bfloat16, (0, 5))
    pdt.save_file(ts, p)
    mapped = pdt.load_file(p)
    copied = pdt.load_file(p, copy=True)
    assert list(copied) == list(mapped) == sorted(ts)
    size = p.stat().st_size
    for k, t in ts.items():
        bits_equal(copied[k], t)
        bits_equal(mapped[k], t)
        # Its own storage (torch.empty), not the mapping of the whole file the default shares.
        assert copied[k].untyped_storage().nbytes() == t.nbytes
        if t.numel():
            assert mapped[k].untyped_storage().nbytes() == size
    copied["float32"][0, 0] = 1.0  # writable
    # One flipped byte of the large tensor: refused by both paths, not looked for unchecked.
    with paramdex.safe_open(p, framework="np", readonly=True) as f:
        lo, _ = f._mapping_range()
        off = f.get_tensor("float32").__array_interface__["data"][0] + 4_000_000 - lo
    b = bytearray(p.read_bytes())
    b[off] ^= 1
    p.write_bytes(bytes(b))
    for kw in ({}, {"copy": True}, {"copy": True, "threads": 1}):
        with pytest.raises(paramdex.CorruptError):
            pdt.load_file(p, **kw)
    assert pdt.load_file(p, checksums=False)["scalar"] == ts["scalar"]


def test_load_file_copy_of_a_sharded_checkpoint(tmp_path):
    m = paramdex.CheckpointManager(tmp_path / "ck", shards=3, sync=False)
    ts = {f"layer{i}.w": torch.arange(i * 50, i * 50 + 50, dtype=torch.float32).reshape(5, 10) for i in range(7)}
    m.save(1, ts)
    for kw in ({}, {"copy": True}):
        got = pdt.load_file(tmp_path / "ck", **kw)
        assert sorted(got) == sorted(ts)
        for k, t in ts.items():
            bits_equal(got[k], t)


def test_torch_low_precision_dtypes_from_a_safetensors_file_written_by_torch(tmp_path):
    """A safetensors file written by safetensors.torch holding torch's own low-precision
    dtypes (the MX scale float8_e8m0fnu, packed float4_e2m1fn_x2 with its byte-counting shape,
    the fnuz float8s) reaches torch with those dtypes and shapes, byte for byte, and numpy with
    ml_dtypes' types (float4_e2m1fn_x2 as its bytes, uint8); save_file writes them back from
    both."""
    st = need("safetensors.torch")
    ml = need("ml_dtypes")
    import paramdex.numpy as pdn

    names = [n for n in ("float8_e8m0fnu", "float4_e2m1fn_x2", "float8_e4m3fnuz", "float8_e5m2fnuz")
             if hasattr(torch, n)]
    assert names, "torch has none of the low-precision dtypes"
    tensors = {n: sample(getattr(torch, n), [2, 3], seed=i) for i, n in enumerate(names)}
    sp = tmp_path / "lowp.safetensors"
    st.save_file(tensors, str(sp))
    got = pdt.load_file(str(sp))
    for n, t in tensors.items():
        assert got[n].dtype == t.dtype and list(got[n].shape) == [2, 3], n
        assert got[n].view(torch.uint8).tolist() == t.view(torch.uint8).tolist(), n
    arrays = pdn.load_file(str(sp))
    for n, t in tensors.items():
        a = arrays[n]
        raw = t.view(torch.uint8).numpy()
        if n == "float4_e2m1fn_x2":
            # numpy has no packed type: ml_dtypes' unpacked float4_e2m1fn, a copy, the last
            # axis doubled (docs/python.md, "dtypes"); the same values as torch unpacks.
            assert a.dtype == ml.float4_e2m1fn and a.shape == (2, 6), (a.dtype, a.shape)
            nibbles = a.view(np.uint8)
            assert (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).tolist() == raw.tolist()
        else:
            assert a.dtype == getattr(ml, n) and a.shape == (2, 3), (n, a.dtype)
            assert a.view(np.uint8).tolist() == raw.tolist(), n
    # Written back by both flavours: the same bytes and dtypes.
    pdt.save_file(got, str(tmp_path / "t.pdx"))
    back = pdt.load_file(str(tmp_path / "t.pdx"))
    for n, t in tensors.items():
        assert back[n].dtype == t.dtype and back[n].view(torch.uint8).tolist() == t.view(torch.uint8).tolist(), n
    # numpy's float4_e2m1fn (unpacked) is written as such and read back the same.
    pdn.save_file({n: arrays[n] for n in names}, str(tmp_path / "n.pdx"))
    back = pdn.load_file(str(tmp_path / "n.pdx"))
    for n in names:
        assert back[n].dtype == arrays[n].dtype and back[n].tobytes() == arrays[n].tobytes(), n
