"""paramdex as a drop-in for safetensors (issue 29): the idioms of safetensors' own Python tests
(numpy, torch, slicing, metadata, shared tensors, errors, threads), each run against the real
safetensors package (the oracle) and against paramdex, which must give the same results and
raise the same exception types. Files written by one are read by the other."""

import importlib
import threading
from types import SimpleNamespace

import numpy as np
import pytest

import paramdex
import paramdex.numpy
from conftest import need, run_child

st = need("safetensors")
import safetensors.numpy  # noqa: E402

LIBS = {
    "safetensors": SimpleNamespace(
        top=st, np=safetensors.numpy, pt=lambda: importlib.import_module("safetensors.torch"), err=st.SafetensorError
    ),
    "paramdex": SimpleNamespace(
        top=paramdex,
        np=paramdex.numpy,
        pt=lambda: importlib.import_module("paramdex.torch"),
        err=paramdex.SafetensorError,
    ),
}


@pytest.fixture(params=sorted(LIBS))
def lib(request):
    return LIBS[request.param]


ARRAYS = {
    "test": np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4),
    "i64": np.array([[1, -2], [3, 4]], dtype=np.int64),
    "f16": np.arange(10, dtype=np.float16),
    "scalar": np.array(3.5, dtype=np.float64),
    "empty": np.zeros((0, 3), dtype=np.int32),
    "flag": np.array([True, False, True]),
    "u8": np.arange(7, dtype=np.uint8),
}


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


# -- numpy: bytes and files, both ways -------------------------------------------------------------


def test_numpy_save_load_bytes_are_read_by_the_other(lib):
    data = lib.np.save(ARRAYS, metadata={"k": "v"})
    assert isinstance(data, bytes)
    for reader in LIBS.values():
        got = reader.np.load(data)
        assert sorted(got) == sorted(ARRAYS)
        for k, v in ARRAYS.items():
            _same(got[k], v)
            assert got[k].flags.writeable


def test_numpy_save_is_the_safetensors_bytes():
    # The same writer (the safetensors crate): the same bytes, header and data.
    assert paramdex.numpy.save(ARRAYS, metadata={"a": "b"}) == safetensors.numpy.save(ARRAYS, metadata={"a": "b"})


def test_safetensors_file_name_writes_safetensors(lib, tmp_path):
    p = tmp_path / "model.safetensors"
    lib.np.save_file(ARRAYS, str(p), metadata={"framework": "np"})
    for reader in LIBS.values():
        with reader.top.safe_open(str(p), framework="np") as f:
            assert f.metadata() == {"framework": "np"}
            assert sorted(f.keys()) == sorted(ARRAYS)
            for k, v in ARRAYS.items():
                _same(f.get_tensor(k), v)
    with paramdex.safe_open(p) as f:
        assert f.format == "safetensors"


def test_other_names_write_paramdex_and_format_overrides(tmp_path):
    paramdex.numpy.save_file(ARRAYS, tmp_path / "m.pdx")
    paramdex.numpy.save_file(ARRAYS, tmp_path / "m.bin", format="safetensors")
    paramdex.numpy.save_file(ARRAYS, tmp_path / "m.safetensors", format="paramdex")
    formats = {}
    for n in ("m.pdx", "m.bin", "m.safetensors"):
        with paramdex.safe_open(tmp_path / n) as f:
            formats[n] = f.format
            for k, v in ARRAYS.items():
                _same(f.get_tensor(k), v)
    assert formats == {"m.pdx": "paramdex", "m.bin": "safetensors", "m.safetensors": "paramdex"}
    safetensors.numpy.load_file(str(tmp_path / "m.bin"))
    with pytest.raises(st.SafetensorError):
        safetensors.numpy.load_file(str(tmp_path / "m.safetensors"))
    pdx = paramdex.numpy.save(ARRAYS, format="paramdex")
    got = paramdex.numpy.load(pdx)
    for k, v in ARRAYS.items():
        _same(got[k], v)
    with pytest.raises(ValueError):
        paramdex.numpy.save(ARRAYS, format="npz")


def test_serialize_tensor_spec_and_deserialize(lib, tmp_path):
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, 2], dtype=np.int16)}
    specs = {
        k: lib.top.TensorSpec(dtype=v.dtype.name, shape=v.shape, data_ptr=v.ctypes.data, data_len=v.nbytes)
        for k, v in arrays.items()
    }
    assert specs["a"].dtype == "F32" and specs["a"].shape == [2, 3] and specs["a"].data_len == 24
    data = lib.top.serialize(specs, metadata={"m": "1"})
    lib.top.serialize_file(specs, str(tmp_path / "x.safetensors"), metadata={"m": "1"})
    assert open(tmp_path / "x.safetensors", "rb").read() == bytes(data)
    for reader in LIBS.values():
        flat = reader.top.deserialize(bytes(data))
        assert sorted(n for n, _ in flat) == ["a", "b"]  # safetensors' order varies
        a = dict(flat)["a"]
        assert a["dtype"] == "F32" and a["shape"] == [2, 3]
        assert bytes(a["data"]) == arrays["a"].tobytes()
    with pytest.raises(lib.err):
        lib.top.TensorSpec(dtype="complex128", shape=[1], data_ptr=0, data_len=16)


def test_numpy_arrays_are_writable_and_private(lib, tmp_path):
    p = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(ARRAYS, str(p))
    before = p.read_bytes()
    got = lib.np.load_file(str(p))
    assert got["test"].flags.writeable
    got["test"][0, 0, 0] = 42.0
    assert got["test"][0, 0, 0] == 42.0
    with lib.top.safe_open(str(p), "np") as f:
        t = f.get_tensor("test")
        assert t.flags.writeable and t[0, 0, 0] == 0.0  # the write stayed private
    assert p.read_bytes() == before


def test_numpy_arrays_of_one_safe_open_are_independent(lib, tmp_path):
    p = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(ARRAYS, str(p))
    with lib.top.safe_open(str(p), framework="np") as f:
        a = f.get_tensor("test")
        a *= 2
        a[0, 0, 0] = 99.0
        b = f.get_tensor("test")
        np.testing.assert_array_equal(b, ARRAYS["test"])  # the writes to a are not seen
        b += 1
        np.testing.assert_array_equal(f.get_tensor("test"), ARRAYS["test"])
        assert a[0, 0, 0] == 99.0 and b.flags.writeable


def test_numpy_zero_copy_over_a_private_mapping(tmp_path):
    p = tmp_path / "m.pdx"
    paramdex.numpy.save_file(ARRAYS, p)
    with paramdex.safe_open(p) as f:
        a = f.get_tensor("test")
        assert a.flags.writeable and not a.flags.owndata  # a view, no copy
        a[1, 2, 3] = -1.0
        b = f.get_tensor("test")
        assert b[1, 2, 3] == 23.0  # asked again: its own array, as safetensors'
    with paramdex.safe_open(p, readonly=True) as f:
        c = f.get_tensor("test")
        assert not c.flags.writeable and c[1, 2, 3] == 23.0
    assert not paramdex.numpy.load_file(p, readonly=True)["test"].flags.writeable


# -- safe_open: the API, the dtype codes, the order of keys -----------------------------------------


def test_safe_open_api(lib, tmp_path):
    p = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(ARRAYS, str(p), metadata={"x": "y"})
    with lib.top.safe_open(str(p), framework="numpy", device="cpu", backend="pread") as f:
        assert f.keys() == sorted(ARRAYS)
        assert f.metadata() == {"x": "y"}
        tensors = f.get_tensors()
        assert sorted(tensors) == sorted(ARRAYS)
        for k, v in ARRAYS.items():
            _same(tensors[k], v)
        with st.safe_open(str(p), "np") as g:
            assert f.offset_keys() == g.offset_keys()


DTYPE_CODES = {
    "F32": np.float32,
    "F64": np.float64,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "U16": np.uint16,
    "U32": np.uint32,
    "U64": np.uint64,
    "BOOL": np.bool_,
    "C64": np.complex64,
}


def test_get_dtype_codes(lib, tmp_path):
    p = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({c: np.zeros(2, t) for c, t in DTYPE_CODES.items()}, str(p))
    with lib.top.safe_open(str(p), "np") as f:
        for code in DTYPE_CODES:
            assert f.get_slice(code).get_dtype() == code


def test_get_dtype_bf16_and_float8(lib, tmp_path):
    torch = need("torch")
    p = tmp_path / "m.safetensors"
    tensors = {"bf16": torch.zeros(2, dtype=torch.bfloat16), "f8": torch.zeros(2, dtype=torch.float8_e4m3fn)}
    LIBS["safetensors"].pt().save_file(tensors, str(p))
    with lib.top.safe_open(str(p), "pt") as f:
        assert f.get_slice("bf16").get_dtype() == "BF16"
        assert f.get_slice("f8").get_dtype() == "F8_E4M3"
        assert f.get_tensor("bf16").dtype == torch.bfloat16


# -- slicing: the same rules ------------------------------------------------------------------------

KEYS = [
    "[0]",
    "[-1]",
    "[1, 2]",
    "[0, 0, 0]",
    "[5]",
    "[-3]",
    "[:20]",
    "[:, :20]",
    "[[]]",
    "[None]",
    "[..., None]",
    "[::2]",
    "[:, ::2, 1::3]",
    "[::-1]",
    "[::0]",
    "[0, 0, 0, 0]",
    "[...]",
    "[..., 1]",
    "[1, ...]",
    "[..., ..., 1]",
    "[1.5]",
    "['a']",
    "[[0, 1]]",
    "[np.int64(1)]",
    "[()]",
    "[True]",
    "[:, 1:2]",
    "[2:]",
]


def _outcome(fn):
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return ("raise", type(e))
    return ("ok", np.asarray(r.numpy() if hasattr(r, "numpy") else r))


@pytest.mark.parametrize("framework", ["np", "pt"])
def test_slicing_rules_are_safetensors(framework, tmp_path):
    if framework == "pt":
        need("torch")
    p = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(ARRAYS, str(p))
    with st.safe_open(str(p), framework) as a, paramdex.safe_open(str(p), framework) as b:
        sa, sb = a.get_slice("test"), b.get_slice("test")
        for key in KEYS:
            ra = _outcome(lambda: eval("sa" + key))
            rb = _outcome(lambda: eval("sb" + key))
            assert ra[0] == rb[0], (key, ra, rb)
            if ra[0] == "ok":
                assert ra[1].shape == rb[1].shape, key
                np.testing.assert_array_equal(ra[1], rb[1])
            else:
                assert issubclass(rb[1], ra[1]), (key, ra[1], rb[1])
        for key in ("[...]", "[()]", "[0]"):
            ra = _outcome(lambda: eval("a.get_slice('scalar')" + key))
            rb = _outcome(lambda: eval("b.get_slice('scalar')" + key))
            assert ra[0] == rb[0], key
            if ra[0] == "raise":
                assert issubclass(rb[1], ra[1])
        assert sa.get_shape() == sb.get_shape() == [2, 3, 4]


def test_slices_outlive_their_handle(lib, tmp_path):
    p = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(ARRAYS, str(p))
    with lib.top.safe_open(str(p), "np") as f:
        s = f.get_slice("test")
    np.testing.assert_array_equal(s[1], ARRAYS["test"][1])


def test_slice_results_are_writable(lib, tmp_path):
    p = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(ARRAYS, str(p))
    with lib.top.safe_open(str(p), "np") as f:
        part = f.get_slice("test")[0]
        part[0, 0] = 9
        assert f.get_slice("test")[0][0, 0] == 0


# -- errors: the same types -------------------------------------------------------------------------


def test_errors(lib, tmp_path):
    p = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(ARRAYS, str(p))
    with pytest.raises(FileNotFoundError):
        lib.top.safe_open(str(tmp_path / "missing.safetensors"), "np")
    with pytest.raises(lib.err):
        lib.top.safe_open(str(p), "bogus")
    with pytest.raises(lib.err):
        lib.top.safe_open(str(p), "np", backend="nope")
    f = lib.top.safe_open(str(p), "np")
    with pytest.raises(lib.err):
        f.get_tensor("missing")
    with pytest.raises(lib.err):
        f.get_slice("missing")
    with pytest.raises(TypeError):
        f.get_tensor(1)
    f.__exit__(None, None, None)
    with pytest.raises(lib.err):
        f.keys()
    with pytest.raises(lib.err):
        f.get_tensor("test")
    with pytest.raises(lib.err):
        lib.np.load(b"garbage!garbage!")
    with pytest.raises(lib.err):
        lib.np.load(b"")
    (tmp_path / "g.safetensors").write_bytes(b"garbage123456789")
    with pytest.raises(lib.err):
        lib.np.load_file(str(tmp_path / "g.safetensors"))
    with pytest.raises(TypeError):
        lib.np.save_file(ARRAYS, str(tmp_path / "x.safetensors"), metadata={"k": 1})
    with pytest.raises(TypeError):
        lib.np.save_file({1: ARRAYS["test"]}, str(tmp_path / "x.safetensors"))
    with pytest.raises(lib.err):
        lib.np.save_file({"c": np.zeros(2, np.complex128)}, str(tmp_path / "x.safetensors"))
    with pytest.raises(lib.err):
        lib.np.save_file({"o": np.array([b"x"], dtype=object)}, str(tmp_path / "x.safetensors"))


def test_paramdex_errors_are_safetensors_errors(tmp_path):
    # Code written against safetensors catches paramdex's errors with its own class.
    assert issubclass(paramdex.ParamdexError, st.SafetensorError)
    assert issubclass(paramdex.CorruptError, st.SafetensorError)
    assert issubclass(paramdex.NotFoundError, KeyError)
    p = tmp_path / "m.pdx"
    paramdex.numpy.save_file(ARRAYS, p)
    with paramdex.safe_open(p) as f:
        with pytest.raises(st.SafetensorError):
            f.get_tensor("nope")
    with pytest.raises(paramdex.NoSuchFileError):
        paramdex.safe_open(tmp_path / "nope.pdx")


# -- threads ----------------------------------------------------------------------------------------


def test_one_handle_many_threads(lib, tmp_path):
    p = tmp_path / "m.safetensors"
    big = {f"t{i}": np.full((64, 33), i, dtype=np.float32) for i in range(16)}
    lib.np.save_file(big, str(p))
    errors = []
    with lib.top.safe_open(str(p), "np") as f:

        def work(i):
            try:
                for _ in range(20):
                    name = f"t{(i * 7) % 16}"
                    assert (f.get_tensor(name) == (i * 7) % 16).all()
                    assert f.get_slice(name)[3:5, ::4].shape == (2, 9)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert not errors, errors


# -- torch: save/load, refusals, shared tensors ------------------------------------------------------


def test_torch_save_load_both_ways(lib, tmp_path):
    torch = need("torch")
    pt = lib.pt()
    tensors = {"a": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.int64), "h": torch.ones(2, dtype=torch.bfloat16)}
    data = pt.save(tensors, metadata={"k": "v"})
    p = tmp_path / "m.safetensors"
    pt.save_file(tensors, str(p), metadata={"k": "v"})
    for reader in LIBS.values():
        for got in (reader.pt().load(data), reader.pt().load_file(str(p))):
            assert sorted(got) == sorted(tensors)
            for k, v in tensors.items():
                assert got[k].dtype == v.dtype and torch.equal(got[k], v)
    got = pt.load_file(str(p))
    got["a"].add_(1)  # writable
    assert torch.equal(pt.load_file(str(p))["a"], tensors["a"])


def test_torch_save_file_refusals(lib, tmp_path):
    torch = need("torch")
    pt = lib.pt()
    out = str(tmp_path / "x.safetensors")
    x = torch.zeros(4, 4)
    with pytest.raises(RuntimeError, match="save_model"):
        pt.save_file({"a": x, "b": x}, out)
    with pytest.raises(RuntimeError, match="save_model"):
        pt.save({"a": x, "b": x[:2]})
    with pytest.raises(ValueError, match="non contiguous"):
        pt.save_file({"a": x.t()}, out)
    with pytest.raises(ValueError, match="sparse"):
        pt.save_file({"a": x.to_sparse()}, out)
    with pytest.raises(ValueError):
        pt.save_file([x], out)
    with pytest.raises(ValueError):
        pt.save_file({"a": np.zeros(2)}, out)
    pt.save_file({"a": x[0], "b": x[1]}, out)  # views of one storage that do not overlap
    assert not (tmp_path / "x.pdx").exists()


def test_torch_helpers_agree(tmp_path):
    torch = need("torch")
    import safetensors.torch as sp
    import paramdex.torch as pp

    x = torch.zeros(4, 4)
    y = torch.zeros(3)
    sd = {"a": x, "b": x, "c": x[1], "d": y, "e": torch.empty(0)}
    assert pp.storage_ptr(x) == sp.storage_ptr(x) and pp.storage_size(x) == sp.storage_size(x)
    assert pp._find_shared_tensors(sd) == sp._find_shared_tensors(sd)
    shared = {"a": x, "b": x}
    assert pp._remove_duplicate_names(shared) == sp._remove_duplicate_names(shared)
    assert pp._remove_duplicate_names(shared, preferred_names=["b"]) == sp._remove_duplicate_names(
        shared, preferred_names=["b"]
    )
    assert pp._remove_duplicate_names(shared, discard_names=["a"]) == sp._remove_duplicate_names(
        shared, discard_names=["a"]
    )
    with pytest.raises(RuntimeError):
        pp._remove_duplicate_names({"a": x[0], "b": x[0]})


def _tied_model(torch):
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight  # tied

    torch.manual_seed(0)
    return Tied()


@pytest.mark.parametrize("writer", sorted(LIBS))
@pytest.mark.parametrize("reader", sorted(LIBS))
@pytest.mark.parametrize("suffix", [".safetensors", ".pdx"])
def test_save_model_load_model_shared_tensors(writer, reader, suffix, tmp_path):
    torch = need("torch")
    if suffix == ".pdx" and "safetensors" in (writer, reader):
        pytest.skip("safetensors reads and writes safetensors files only")
    p = str(tmp_path / ("m" + suffix))
    m = _tied_model(torch)
    with pytest.raises(RuntimeError):
        LIBS[writer].pt().save_file(m.state_dict(), p)
    LIBS[writer].pt().save_model(m, p)
    with paramdex.safe_open(p) as f:
        assert f.keys() == ["emb.weight"]
        assert f.metadata() == {"head.weight": "emb.weight"}
    m2 = _tied_model(torch)
    with torch.no_grad():
        m2.emb.weight.zero_()
    missing, unexpected = LIBS[reader].pt().load_model(m2, p)
    assert not missing and not unexpected
    assert torch.equal(m2.head.weight, m.emb.weight) and m2.head.weight is m2.emb.weight

    class Other(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(2))

    with pytest.raises(RuntimeError, match="Missing key"):
        LIBS[reader].pt().load_model(Other(), p)
    missing, unexpected = LIBS[reader].pt().load_model(Other(), p, strict=False)
    assert sorted(missing) == ["w"] and sorted(unexpected) == ["emb.weight"]


def test_save_model_force_contiguous(lib, tmp_path):
    torch = need("torch")

    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3, 5).t())

    m = T()
    p = str(tmp_path / "m.safetensors")
    with pytest.raises(ValueError, match="force_contiguous"):
        lib.pt().save_model(m, p, force_contiguous=False)
    lib.pt().save_model(m, p)
    assert torch.equal(LIBS["safetensors"].pt().load_file(p)["w"], m.w.detach())


def test_torch_slices(lib, tmp_path):
    torch = need("torch")
    p = tmp_path / "m.safetensors"
    t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    LIBS["safetensors"].pt().save_file({"t": t}, str(p))
    with lib.top.safe_open(str(p), "pt") as f:
        s = f.get_slice("t")
        assert torch.equal(s[:, 1:, ::2], t[:, 1:, ::2])
        assert torch.equal(s[None], t[None])
        assert s[[]].shape == (0, 3, 4)


# -- the other frameworks (child processes: TensorFlow and Paddle do not share one) ----------------

FRAMEWORK_CHILD = r"""
import sys, numpy as np
fw = sys.argv[1]; d = sys.argv[2]
import importlib
ours = importlib.import_module("paramdex." + fw)
theirs = importlib.import_module("safetensors." + fw)
if fw == "paddle":
    import paddle
    make = lambda a: paddle.to_tensor(a)
    back = lambda t: t.numpy()
else:
    import tensorflow as tf
    make = tf.convert_to_tensor
    back = lambda t: t.numpy()
arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], dtype=np.int64)}
tensors = {k: make(v) for k, v in arrays.items()}
# safetensors.tensorflow replaces the values of the dict it is given: each call gets a copy.
ours.save_file(dict(tensors), d + "/o.safetensors", metadata={"k": "v"})
theirs.save_file(dict(tensors), d + "/t.safetensors", metadata={"k": "v"})
for lib in (ours, theirs):
    for f in ("o", "t"):
        got = lib.load_file(d + "/" + f + ".safetensors")
        for k, v in arrays.items():
            np.testing.assert_array_equal(back(got[k]), v)
    for data in (ours.save(dict(tensors)), theirs.save(dict(tensors))):
        got = lib.load(data)
        for k, v in arrays.items():
            np.testing.assert_array_equal(back(got[k]), v)
assert ours.save(dict(tensors)) == theirs.save(dict(tensors))
ours.save_file(dict(tensors), d + "/o.pdx")
got = ours.load_file(d + "/o.pdx")
np.testing.assert_array_equal(back(got["a"]), arrays["a"])
if fw == "paddle":  # bfloat16 and float8, which Paddle's numpy() does not give as themselves
    low = {
        "h": paddle.to_tensor([1.5, -2.0, 3.25], dtype="float32").astype("bfloat16"),
        "e": paddle.to_tensor([0.5, 2.0], dtype="float32").astype("float8_e4m3fn"),
    }
    assert ours.save(dict(low)) == theirs.save(dict(low))
    for lib in (ours, theirs):
        got = lib.load(ours.save(dict(low)))
        for k, v in low.items():
            assert got[k].dtype == v.dtype, (k, got[k].dtype)
            assert (got[k].astype("float32").numpy() == v.astype("float32").numpy()).all(), k
print("ok")
"""


@pytest.mark.parametrize("fw", ["tensorflow", "paddle"])
def test_framework_modules(fw, tmp_path):
    need(fw, load=False)
    assert run_child(FRAMEWORK_CHILD, fw, str(tmp_path)).strip().endswith("ok")


def test_safe_open_handle_of_file_objects(lib, tmp_path):
    p = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(ARRAYS, str(p))
    with open(p, "rb") as fh:
        with lib.top._safe_open_handle(fh, framework="np", device="cpu") as f:
            for k, v in ARRAYS.items():
                _same(f.get_tensor(k), v)
    if lib.top is paramdex:
        # A file object that names no local file is read into memory.
        import io

        with paramdex._safe_open_handle(io.BytesIO(p.read_bytes()), "np") as f:
            _same(f.get_tensor("test"), ARRAYS["test"])


def test_missing_file_message_is_safetensors(lib, tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        lib.top.safe_open(str(tmp_path / "nofile"), framework="np")
    assert str(e.value) == f"No such file or directory: {tmp_path / 'nofile'}"


def test_sharded_checkpoint_opened_by_its_index_gives_its_tensors(tmp_path):
    # The private mappings (numpy and torch) map only the file the store opened: a tensor in a
    # data file of a checkpoint opened by PREFIX.index comes from the store (the data file's
    # bytes), never from the index's bytes at the data file's offset.
    m = paramdex.CheckpointManager(tmp_path, shards=2)
    want = {f"w{i}": np.full((100,), i, np.float32) for i in range(6)}
    m.save(1, want)
    index = tmp_path / "ckpt-1.index"
    for fw in ("np", "pt"):
        if fw == "pt":
            need("torch")
        with paramdex.safe_open(index, fw) as f:
            for k, v in want.items():
                got = np.asarray(f.get_tensor(k))
                np.testing.assert_array_equal(got, v)
