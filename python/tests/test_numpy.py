"""numpy: round trips of every dtype, zero-copy views, lifetime, names, metadata, slices,
the streaming Writer, errors, hostile inputs and threads."""

import datetime
import gc
import os
import threading

import numpy as np
import pytest

import paramdex
from paramdex import _paramdex
from paramdex._convert import numpy_dtype
from paramdex.numpy import load_file, save_file

from conftest import DATA, need

ALL = [name for name, _ in _paramdex.dtypes()]


def sample(kind, shape, seed=0):
    """An array of dtype ``kind`` with random bits (any bit pattern for floats: compared as
    bytes), bools as 0/1."""
    rng = np.random.default_rng(seed)
    dt = numpy_dtype(kind)
    n = int(np.prod(shape)) if shape else 1
    if kind == "bool":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    raw = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def same(a, b):
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


# Packed types (several values a byte): numpy has no dtype for them, so they arrive as their
# bytes (uint8) and are written with an explicit ``dtype=`` (Writer.add), not inferred.
PACKED = {"float4_e2m1fn_x2", "float6_e2m3fn_x4", "float6_e3m2fn_x4"}
INFERRED = [k for k in ALL if k not in PACKED]


def test_every_dtype_has_a_numpy_dtype():
    assert set(ALL) == {
        "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
        "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
        "float8_e4m3b11fnuz", "float8_e8m0fnu", "int4", "uint4", "int2", "uint2",
        "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn",
    } | PACKED
    for k in ALL:
        assert numpy_dtype(k).itemsize == dict(_paramdex.dtypes())[k]


@pytest.mark.parametrize("kind", sorted(PACKED))
def test_packed_dtypes_round_trip_as_their_bytes(tmp_path, kind):
    raw = np.arange(12, dtype=np.uint8).reshape(3, 4)
    p = tmp_path / "m.pdx"
    with paramdex.Writer(p) as w:
        w.add("t", raw, dtype=kind)
    with paramdex.safe_open(p, framework="np") as f:
        got = f.get_tensor("t")
        if kind == "float4_e2m1fn_x2":
            # numpy gets ml_dtypes' unpacked float4_e2m1fn (a copy): element 2i is byte i's low
            # nibble, element 2i + 1 its high nibble.
            ml = need("ml_dtypes")
            assert got.dtype == ml.float4_e2m1fn and got.shape == (3, 8)
            nibbles = got.view(np.uint8)
            assert (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).tobytes() == raw.tobytes()
            # Byte 7 (0x07) holds 6.0 (code 7: exponent 3, mantissa 1) then 0.0; byte 11 (0x0B)
            # holds -1.5 (sign, exponent 1, mantissa 1) then 0.0. The same from load_file.
            flat = got.reshape(-1).astype(np.float32).tolist()
            assert flat[14:16] == [6.0, 0.0] and flat[22:24] == [-1.5, 0.0]
            for copy in (False, True):
                again = paramdex.numpy.load_file(p, copy=copy)["t"]
                assert again.dtype == ml.float4_e2m1fn and again.view(np.uint8).tobytes() == nibbles.tobytes()
        else:
            assert got.dtype == np.uint8 and got.shape == (3, 4)
            assert got.tobytes() == raw.tobytes()
        assert f.get_slice("t").dtype == kind
        codes = {"float4_e2m1fn_x2": "F4", "float6_e2m3fn_x4": "F6_E2M3", "float6_e3m2fn_x4": "F6_E3M2"}
        assert f.get_slice("t").get_dtype() == codes[kind]


@pytest.mark.parametrize("kind", INFERRED)
@pytest.mark.parametrize("shape", [(3, 5), (), (0, 4), (7,)])
def test_round_trip_every_dtype(tmp_path, kind, shape):
    a = sample(kind, shape)
    p = tmp_path / "m.pdx"
    save_file({"t": a}, p)
    with paramdex.safe_open(p, framework="np") as f:
        b = f.get_tensor("t")
        info = f.info("t")
    same(a, b)
    assert info.dtype == kind and info.shape == shape and info.nbytes == a.nbytes
    same(a, load_file(p)["t"])


@pytest.mark.parametrize("readonly", [True, False])
def test_arrays_made_by_the_extension_are_the_buffer_path_arrays(tmp_path, readonly):
    # get_tensor's arrays come from numpy's C API in the extension (Store.load_array); the
    # Buffer path (Store.load + to_numpy) is what they must equal, dtype, shape, bytes and all.
    from paramdex._convert import to_numpy

    tensors = {f"{kind}/{i}": sample(kind, shape, i) for kind in INFERRED
               for i, shape in enumerate([(3, 5), (), (0, 4), (2, 1, 3)])}
    p = tmp_path / "m.pdx"
    save_file(tensors, p)
    with paramdex.safe_open(p, readonly=readonly) as f:
        got = {}
        for name, a in tensors.items():
            kind, shape, data = f._store.load(name)
            want = to_numpy(kind, shape, data)
            b = f.get_tensor(name)
            assert type(b) is np.ndarray and b.flags.c_contiguous, name
            same(want, b)
            same(a, b)
            # readonly: a view of the store's mapping; else of a private copy-on-write one.
            assert b.flags.writeable == (not readonly), name
            direct = f._store.load_array(name)
            same(a, direct)
            assert not direct.flags.writeable and not direct.flags.owndata
            assert direct.__array_interface__["data"][0] == data.address
            got[name] = b
    del f, direct, want, data
    gc.collect()
    # The arrays hold the store (or the private mapping) after the close.
    for name, a in tensors.items():
        same(a, got[name])
    if not readonly:
        got["float32/0"][0, 0] = 7.0  # a private page: the file is unchanged
        with paramdex.safe_open(p, readonly=True) as f:
            same(tensors["float32/0"], f.get_tensor("float32/0"))


def test_set_numpy_dtypes_refuses_unknown_names():
    with pytest.raises(ValueError, match="no dtype named"):
        _paramdex.set_numpy_dtypes([("float33", np.dtype("float32"))])
    with pytest.raises(TypeError):
        _paramdex.set_numpy_dtypes([("float32", "not a dtype")])


def test_bfloat16_and_float8_are_ml_dtypes(tmp_path):
    ml = need("ml_dtypes")
    a = np.array([1.5, -2.0, 0.25], dtype=ml.bfloat16)
    e = np.array([1.0, 448.0], dtype=ml.float8_e4m3fn)
    save_file({"b": a, "e": e}, tmp_path / "m.pdx")
    got = load_file(tmp_path / "m.pdx")
    assert got["b"].dtype == ml.bfloat16 and got["b"].tolist() == a.tolist()
    assert got["e"].dtype == ml.float8_e4m3fn and got["e"].astype(np.float32).tolist() == [1.0, 448.0]


def test_big_endian_and_strided_inputs_are_stored_little_endian(tmp_path):
    a = np.arange(12, dtype=">i4").reshape(3, 4)
    s = np.arange(40, dtype=np.float64).reshape(5, 8)[::2, 1::3]
    save_file({"a": a, "s": s}, tmp_path / "m.pdx")
    got = load_file(tmp_path / "m.pdx")
    assert got["a"].dtype == np.dtype("<i4") and (got["a"] == a).all()
    assert (got["s"] == s).all() and got["s"].flags.c_contiguous


def test_zero_copy_view_inside_the_mapping_and_read_only(tmp_path):
    p = tmp_path / "m.pdx"
    save_file({"w": np.arange(4096, dtype=np.float32), "b": np.ones(3, np.int64)}, p)
    with paramdex.safe_open(p, readonly=True) as f:
        lo, hi = f._mapping_range()
        for name in ("w", "b"):
            a = f.get_tensor(name)
            addr = a.__array_interface__["data"][0]
            assert lo <= addr and addr + a.nbytes <= hi, (lo, addr, hi)
            assert not a.flags.writeable and not a.flags.owndata
            with pytest.raises(ValueError):
                a[0] = 1
            with pytest.raises(ValueError):
                a.flags.writeable = True
        # The file's alignment (64 bytes by default) is the array's.
        assert f.get_tensor("w").__array_interface__["data"][0] % 64 == 0
        # Two reads of one tensor are views of the same bytes.
        assert f.get_tensor("w").__array_interface__["data"][0] == f.get_tensor("w").__array_interface__["data"][0]


def test_arrays_outlive_the_safe_open_block_and_the_file_name(tmp_path):
    p = tmp_path / "m.pdx"
    want = np.arange(100000, dtype=np.float64)
    save_file({"w": want}, p)
    with paramdex.safe_open(p) as f:
        a = f.get_tensor("w")
        s = f.get_slice("w")
    del f
    gc.collect()
    os.remove(p)  # the mapping stays valid after the name is gone
    gc.collect()
    assert (a == want).all()
    b = a[10:20]
    del a
    gc.collect()
    assert (b == want[10:20]).all()
    # A slice keeps its own handle on the store, as in safetensors.
    assert (s[0:2] == want[0:2]).all()


def test_names_str_and_bytes(tmp_path):
    p = tmp_path / "m.pdx"
    names = {"plain": 1, "ünï/cödé": 2, b"\xff\xfe raw": 3, b"bytes.utf8": 4}
    save_file({n: np.array([v], np.int32) for n, v in names.items()}, p)
    with paramdex.safe_open(p) as f:
        keys = f.keys()
        assert sorted(keys, key=lambda k: k.encode() if isinstance(k, str) else k) == keys
        assert set(keys) == {"plain", "ünï/cödé", b"\xff\xfe raw", "bytes.utf8"}
        assert f.get_tensor(b"\xff\xfe raw")[0] == 3
        assert f.get_tensor("ünï/cödé")[0] == 2
        assert f.get_tensor("ünï/cödé".encode())[0] == 2
        assert f.get_tensor(b"bytes.utf8")[0] == 4
        assert b"\xff\xfe raw" in f and "plain" in f and "nope" not in f and 3 not in f
        assert len(f) == 4


def test_metadata_typed(tmp_path):
    p = tmp_path / "m.pdx"
    meta = {"format": "pt", "step": 12, "lr": 0.5, "ok": True, "blob": b"\x00\x01", "l": [1, "a"]}
    save_file({"a": np.zeros(2)}, p, metadata=meta)
    with paramdex.safe_open(p) as f:
        assert f.metadata() == meta
    save_file({"a": np.zeros(2)}, p)
    with paramdex.safe_open(p) as f:
        assert f.metadata() is None


def test_get_slice_matches_numpy_indexing(tmp_path):
    p = tmp_path / "m.pdx"
    a = np.arange(4 * 5 * 6, dtype=np.int32).reshape(4, 5, 6)
    save_file({"a": a}, p)
    keys = [
        (slice(None),), (slice(1, 3),), (1,), (-1,), (slice(None), 2), (Ellipsis, 1),
        (slice(None, None, 2), slice(1, None, 3)),
        (1, Ellipsis, slice(2, 4)), (slice(3, 1),), (slice(-2, None), -3, slice(None, None, 2)),
        (0, 0, 0), (Ellipsis,), (slice(2, 4),), ([],),
    ]
    with paramdex.safe_open(p) as f:
        s = f.get_slice("a")
        assert s.get_shape() == [4, 5, 6] and s.get_dtype() == "I32" and s.dtype == "int32"
        for k in keys:
            got = s[k]
            want = a[k]
            assert got.shape == want.shape, (k, got.shape, want.shape)
            assert (got == want).all(), k
        with pytest.raises(IndexError):
            s[4]
        with pytest.raises(IndexError):
            s[0, 0, 0, 0]
        with pytest.raises(TypeError):
            s["x"]
        # safetensors' rules (numpy and TensorFlow): no negative steps, no stop past the end.
        with pytest.raises(ValueError):
            s[::-1]
        with pytest.raises(IndexError):
            s[10:20]
        with pytest.raises(paramdex.SafetensorError):
            s[None]


def test_info_lod_verify_len(tmp_path):
    p = tmp_path / "m.pdx"
    save_file({"a": np.zeros((2, 3), np.float16), "b": np.ones(5, np.uint8)}, p)
    with paramdex.safe_open(p) as f:
        assert f.info("a") == paramdex.TensorInfo("float16", (2, 3), 12, [])
        assert f.lod("b") == []
        r = f.verify()
        assert r.tensors == 2 and r.data_bytes == 17 and r.checksums >= 2
        assert f.format == "paramdex"


def test_writer_streams_and_aborts_on_exception(tmp_path):
    p = tmp_path / "big.pdx"
    with paramdex.Writer(p, metadata={"k": "v"}) as w:
        for i in range(50):
            w.add(f"layer{i:02}", np.full((10, 10), i, np.float32))
        assert len(w) == 50
    with paramdex.safe_open(p) as f:
        assert len(f) == 50 and f.get_tensor("layer07")[0, 0] == 7 and f.metadata() == {"k": "v"}

    q = tmp_path / "aborted.pdx"
    with pytest.raises(RuntimeError):
        with paramdex.Writer(q) as w:
            w.add("a", np.zeros(3))
            raise RuntimeError("boom")
    assert not q.exists()
    assert sorted(os.listdir(tmp_path)) == ["big.pdx"]  # no temporary file left either


def test_writer_errors_are_typed(tmp_path):
    w = paramdex.Writer(tmp_path / "m.pdx")
    w.add("a", np.zeros(3))
    with pytest.raises(paramdex.InvalidArgumentError) as e:
        w.add("a", np.zeros(3))
    assert isinstance(e.value, ValueError) and "duplicate" in str(e.value)
    with pytest.raises(paramdex.InvalidArgumentError):
        w.add("", np.zeros(3))
    with pytest.raises(TypeError):
        w.add(5, np.zeros(3))
    with pytest.raises(TypeError):
        w.add("o", np.array(["x"], dtype=object))
    w.abort()
    assert not (tmp_path / "m.pdx").exists()


def test_not_found_and_missing_file(tmp_path):
    p = tmp_path / "m.pdx"
    save_file({"a": np.zeros(1)}, p)
    with paramdex.safe_open(p) as f:
        with pytest.raises(KeyError) as e:
            f.get_tensor("nope")
        assert isinstance(e.value, paramdex.NotFoundError)
        assert "no tensor named nope" in str(e.value)
        with pytest.raises(paramdex.NotFoundError):
            f.info("nope")
        with pytest.raises(paramdex.NotFoundError):
            f.get_slice("nope")
    with pytest.raises(paramdex.ParamdexIOError) as e:
        paramdex.safe_open(tmp_path / "absent.pdx")
    assert isinstance(e.value, FileNotFoundError)
    with pytest.raises(ValueError):
        paramdex.safe_open(p, framework="caffe")


def test_hostile_inputs_raise_never_crash(tmp_path):
    p = tmp_path / "m.pdx"
    save_file({f"t{i}": np.arange(i + 100, dtype=np.float32) for i in range(20)}, p)
    good = p.read_bytes()
    bad = tmp_path / "bad.pdx"
    rng = np.random.default_rng(1)
    cuts = sorted(set(rng.integers(0, len(good), 40).tolist()) | {0, 1, 8, len(good) - 1})
    cases = [good[:n] for n in cuts]
    cases += [bytes(rng.integers(0, 256, n, dtype=np.uint8)) for n in (1, 64, 4096)]
    for i in range(40):  # single flipped bytes anywhere
        b = bytearray(good)
        b[int(rng.integers(0, len(b)))] ^= 0xFF
        cases.append(bytes(b))
    raised = 0
    for data in cases:
        bad.write_bytes(data)
        try:
            with paramdex.safe_open(bad) as f:
                f.verify()
                for k in f.keys():
                    f.get_tensor(k)
        except paramdex.ParamdexError:
            raised += 1
    assert raised >= len(cuts) + 3  # every truncation and all garbage is refused

    # A flipped data byte is found by get_tensor (checksum) and by verify.
    f0 = paramdex.safe_open(p, readonly=True)
    start, _ = f0._mapping_range()
    addr = f0.get_tensor("t5").__array_interface__["data"][0]
    off = addr - start
    f0.close()
    b = bytearray(good)
    b[off] ^= 1
    bad.write_bytes(bytes(b))
    with paramdex.safe_open(bad) as f:
        with pytest.raises(paramdex.CorruptError):
            f.get_tensor("t5")
        with pytest.raises(paramdex.CorruptError):
            f.verify()
        assert f.get_tensor("t6")[0] == 0  # the others still read


def test_threads_share_one_reader(tmp_path):
    p = tmp_path / "m.pdx"
    want = {f"t{i}": np.arange(i * 1000, (i + 1) * 1000, dtype=np.int64) for i in range(32)}
    save_file(want, p)
    errors = []
    with paramdex.safe_open(p) as f:
        def work(seed):
            try:
                rng = np.random.default_rng(seed)
                for _ in range(200):
                    k = f"t{int(rng.integers(0, 32))}"
                    assert (f.get_tensor(k) == want[k]).all()
                    assert (f.get_slice(k)[5:9] == want[k][5:9]).all()
                f.verify()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert not errors, errors


def test_checkpoint_manager(tmp_path):
    m = paramdex.CheckpointManager(tmp_path / "ckpts", keep_last=2, sync=False)
    with pytest.raises(paramdex.CheckpointError):
        m.latest()
    w = np.arange(10, dtype=np.float32)
    m.save(1, {"w": w}, metadata={"loss": 0.5})
    blocked = m.save_async(2, {"w": w + 1, "b": np.ones(2, np.int8)})
    assert blocked >= 0
    m.save_async(3, {"w": w + 2})
    m.wait()
    assert m.steps() == [2, 3] and m.latest() == 3
    with m.restore() as f:
        assert (f.get_tensor("w") == w + 2).all()
    with m.restore(2) as f:
        assert (f.get_tensor("w") == w + 1).all() and f.get_tensor("b").tolist() == [1, 1]
    with pytest.raises(paramdex.CheckpointError):
        m.restore(1)
    with pytest.raises(paramdex.CheckpointError):
        m.save(3, {"w": w})
    # The directory and DIR@STEP open with safe_open too.
    with paramdex.safe_open(tmp_path / "ckpts") as f:
        assert (f.get_tensor("w") == w + 2).all()
    with paramdex.safe_open(f"{tmp_path / 'ckpts'}@2") as f:
        assert (f.get_tensor("w") == w + 1).all()


def test_checkpoint_manager_keeps_by_every_rule_of_ckpt_prune(tmp_path):
    """Issue 30, defect 8: the keep rules of ``paramdex ckpt --prune`` (every K steps, every
    span of time, the best M by a metadata number), and ``prune`` on demand."""
    w = np.zeros(2, np.float32)
    m = paramdex.CheckpointManager(tmp_path / "steps", keep_every_steps=10, sync=False)
    for step in (5, 10, 15, 20, 25):
        m.save(step, {"w": w})
    assert m.steps() == [5, 10, 20, 25]  # the lowest of each ten, and the latest

    m = paramdex.CheckpointManager(tmp_path / "best", keep_best=("loss", 2, False), sync=False)
    for step, loss in ((1, 0.9), (2, 0.1), (3, 0.5), (4, 0.3)):
        m.save(step, {"w": w}, metadata={"loss": loss})
    assert m.steps() == [2, 4]
    m = paramdex.CheckpointManager(tmp_path / "acc", keep_best=("acc", 1), sync=False)
    for step, acc in ((1, 0.5), (2, 0.9), (3, 0.7), (4, 0.6)):
        m.save(step, {"w": w}, metadata={"acc": acc})
    assert m.steps() == [2, 4]  # higher is better by default; the latest is never deleted

    # One span of a century holds every save: its earliest and the latest stay.
    for every in (datetime.timedelta(days=36500), 36500 * 86400.0):
        d = tmp_path / f"time{int(isinstance(every, float))}"
        m = paramdex.CheckpointManager(d, keep_every=every, sync=False)
        for step in (1, 2, 3):
            m.save(step, {"w": w})
        assert m.steps() == [1, 3]

    # prune on demand: the rules given, or the manager's own.
    d = tmp_path / "demand"
    m = paramdex.CheckpointManager(d, sync=False)
    for step in range(1, 7):
        m.save(step, {"w": w})
    assert m.steps() == [1, 2, 3, 4, 5, 6]  # no rule keeps everything
    r = m.prune(keep_last=2, dry_run=True)
    assert isinstance(r, paramdex.PruneReport)
    assert sorted(r.deleted) == [1, 2, 3, 4] and sorted(r.kept) == [5, 6] and r.bytes > 0
    assert m.steps() == [1, 2, 3, 4, 5, 6]  # a dry run deletes nothing
    r = m.prune(keep_every_steps=3)
    assert sorted(r.deleted) == [2, 4, 5] and m.steps() == [1, 3, 6]
    with pytest.raises(ValueError, match="prune needs a policy"):
        m.prune()
    del m
    m = paramdex.CheckpointManager(d, keep_last=1, sync=False)
    r = m.prune()
    assert sorted(r.deleted) == [1, 3] and m.steps() == [6]

    # Rules that would keep nothing, or are not what they say, are refused.
    with pytest.raises(ValueError):
        paramdex.CheckpointManager(tmp_path / "x", keep_every_steps=0)
    for bad in (0, -5.0, float("nan"), datetime.timedelta(0)):
        with pytest.raises(ValueError):
            paramdex.CheckpointManager(tmp_path / "x", keep_every=bad)
    with pytest.raises(TypeError):
        paramdex.CheckpointManager(tmp_path / "x", keep_every="1h")
    for bad in (("loss",), ["loss", 2], ("loss", "2"), ("loss", -1)):
        with pytest.raises(TypeError):
            paramdex.CheckpointManager(tmp_path / "x", keep_best=bad)


def test_key_error_says_did_you_mean(tmp_path):
    """Issue 30, defects 5 and 8: a missing name's KeyError names the near names, and says how
    to give a name stored in another Unicode normalisation form (it looks identical)."""
    p = tmp_path / "m.pdx"
    nfd = "u\u0308ber.bias"
    save_file({"model.layers.0.weight": np.zeros(1), nfd: np.ones(1)}, p)
    with paramdex.safe_open(p) as f:
        with pytest.raises(KeyError) as e:
            f.get_tensor("model.layers.0.wieght")
        assert "; did you mean model.layers.0.weight?" in str(e.value)
        with pytest.raises(KeyError) as e:
            f.get_slice("\u00fcber.bias")
        msg = str(e.value)
        assert "differs in Unicode normalisation (stored NFD, given NFC)" in msg, msg
        hexname = nfd.encode().hex()
        assert f"bytes.fromhex('{hexname}')" in msg, msg
        assert f.get_tensor(bytes.fromhex(hexname)).tolist() == [1.0]
        with pytest.raises(KeyError) as e:
            f.get_tensor("nothing_like_it")
        assert "did you mean" not in str(e.value)


def test_checksums_false_skips_the_data_check_only(tmp_path):
    p = tmp_path / "m.pdx"
    save_file({"a": np.arange(64, dtype=np.int32), "b": np.ones(8)}, p)
    with paramdex.safe_open(p, readonly=True) as f:
        start, _ = f._mapping_range()
        off = f.get_tensor("a").__array_interface__["data"][0] - start
    b = bytearray(p.read_bytes())
    b[off] ^= 1
    p.write_bytes(bytes(b))
    with paramdex.safe_open(p, checksums=False, readonly=True) as f:
        a = f.get_tensor("a")  # handed out as mapped: the damage is not looked for
        assert a[0] == 1 and not a.flags.writeable
        lo, hi = f._mapping_range()
        assert lo <= a.__array_interface__["data"][0] < hi
        with pytest.raises(paramdex.NotFoundError):
            f.get_tensor("zz")
        with pytest.raises(paramdex.CorruptError):
            f.verify()
    with pytest.raises(paramdex.CorruptError):
        load_file(p)
    assert load_file(p, checksums=False)["a"][1] == 1
    # With checksums on, get_tensor checks the tensor's CRC32C in every mode.
    for readonly in (True, False):
        with paramdex.safe_open(p, readonly=readonly) as f:
            with pytest.raises(paramdex.CorruptError):
                f.get_tensor("a")
            assert f.get_tensor("b").tolist() == [1.0] * 8


def test_sharded_checkpoints_read_through_safe_open(tmp_path):
    m = paramdex.CheckpointManager(tmp_path / "ck", shards=3, incremental=True, sync=False)
    ts = {f"layer{i}.w": np.arange(i * 50, i * 50 + 50, dtype=np.float32).reshape(5, 10) for i in range(7)}
    m.save(10, ts)
    ts2 = dict(ts, **{"layer0.w": ts["layer0.w"] + 1})
    m.save(20, ts2)  # incremental: unchanged tensors linked from step 10
    for path in (m.restore(), paramdex.safe_open(tmp_path / "ck"), paramdex.safe_open(f"{tmp_path / 'ck'}@10")):
        with path as f:
            want = ts2 if "@10" not in f.path else ts
            assert sorted(f.keys()) == sorted(want)
            for k, v in want.items():
                assert (f.get_tensor(k) == v).all()
                assert (f.get_slice(k)[1:3, ::4] == v[1:3, ::4]).all()
            assert f.verify().tensors == len(want)


def test_load_file_copy_gives_writable_arrays_checked_as_copied(tmp_path):
    p = tmp_path / "m.pdx"
    want = {
        "a": np.arange(3_000_000, dtype=np.float32).reshape(3000, 1000),  # > 4 MiB: two threads
        "b": np.array(7, np.int64),
        "e": np.zeros((0, 3), np.float16),
        b"\xff": np.arange(5, dtype=np.uint8),
    }
    save_file(want, p)
    views = load_file(p)
    for threads in (0, 1, 2):
        got = load_file(p, copy=True, threads=threads)
        assert list(got) == list(views) == ["a", "b", "e", b"\xff"]
        for k, v in want.items():
            assert got[k].dtype == v.dtype and got[k].shape == v.shape and (got[k] == v).all()
            assert got[k].flags.writeable and got[k].flags.c_contiguous
    assert not views["a"].flags.owndata  # the default: views
    with paramdex.safe_open(p, readonly=True) as f:
        lo, hi = f._mapping_range()
        a = f.get_tensor("a")
        # One byte near the end of the large tensor, to be flipped below.
        off = a.__array_interface__["data"][0] + a.nbytes - 3 - lo
    addr = got["a"].__array_interface__["data"][0]
    assert not lo <= addr < hi  # a copy, not a view of the file
    got["a"][0, 0] = -1.0
    assert load_file(p)["a"][0, 0] == 0.0
    # The flipped byte is found as it is copied, by the default path (verify first) too, and
    # not looked for with checksums=False.
    del views, a
    b = bytearray(p.read_bytes())
    b[off] ^= 1
    p.write_bytes(bytes(b))
    for kw in ({"copy": True}, {"copy": True, "threads": 1}, {}):
        with pytest.raises(paramdex.CorruptError):
            load_file(p, **kw)
    assert load_file(p, checksums=False)["b"] == 7


@pytest.mark.parametrize("path", ["slices.pdx", "sharded/ckpt", "incremental/ckpt"])
def test_load_file_of_sliced_and_sharded_checkpoints(path):
    path = os.path.join(DATA, "native", "v2", path)
    with paramdex.safe_open(path) as f:
        want, failed = {}, None
        for k in f.keys():
            try:
                want[k] = f.get_tensor(k)
            except paramdex.ParamdexError as e:
                failed = type(e)
    for kw in ({}, {"copy": True}, {"checksums": False}):
        if failed is not None:  # a partial tensor: refused however it is loaded
            with pytest.raises(failed):
                load_file(path, **kw)
            continue
        got = load_file(path, **kw)
        assert list(got) == list(want)
        for k, v in want.items():
            assert got[k].dtype == v.dtype and got[k].shape == v.shape and (got[k] == v).all(), k


def test_store_load_into_refuses_bad_destinations(tmp_path):
    p = tmp_path / "m.pdx"
    save_file({"a": np.arange(16, dtype=np.int32), "b": np.ones(4, np.int8)}, p)
    st = _paramdex.Store(str(p))
    ok = np.empty(64, np.uint8)
    st.load_into(["a", b"b"], [ok, np.empty(4, np.uint8)], 1)
    assert (ok.view(np.int32) == np.arange(16)).all()
    with pytest.raises(ValueError, match="writable"):
        st.load_into(["a"], [np.frombuffer(bytes(64), np.uint8)])
    with pytest.raises(ValueError, match="overlap"):
        st.load_into(["a", "a"], [ok, ok])
    with pytest.raises(ValueError, match="C-contiguous"):
        st.load_into(["b"], [np.empty(8, np.uint8)[::2]])
    with pytest.raises(paramdex.InvalidArgumentError):
        st.load_into(["a"], [np.empty(63, np.uint8)])
    with pytest.raises(paramdex.InvalidArgumentError):
        st.load_into(["a", "b"], [ok])
    with pytest.raises(paramdex.NotFoundError):
        st.load_into(["zz"], [ok])
    st2 = _paramdex.Store(os.path.join(DATA, "safetensors", "model.safetensors"))
    assert st2.native_tensors() is None
    with pytest.raises(ValueError, match="not a paramdex file"):
        st2.load_into([], [])


def test_abort_uploads_in_flight_names_what_it_aborted():
    # Nothing written to s3:// here: nothing to abort. (tests/remote_interrupt.rs and
    # cli/tests/remote_interrupt.rs abort real uploads.)
    assert paramdex.abort_uploads_in_flight(1.0) == []
    with pytest.raises(ValueError):
        paramdex.abort_uploads_in_flight(-1)
