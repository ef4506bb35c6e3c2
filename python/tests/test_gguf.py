"""GGUF files written by llama.cpp's own Python package (``gguf``, gguf-py): every tensor type it
can write lists with its dtype and row-major shape and reads byte for byte; its metadata shows
every key; GGUF -> paramdex -> GGUF and safetensors -> GGUF (through the CLI) read back by
gguf-py with the same keys, values, value types, tensors and alignment."""

import os
import subprocess

import numpy as np
import pytest

import paramdex
from conftest import need

gguf = need("gguf")
Q = gguf.GGMLQuantizationType

PLAIN = {
    "float32": np.float32,
    "float16": np.float16,
    "float64": np.float64,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
}


def cli():
    """The paramdex binary tests/interop/run.sh builds (PARAMDEX), or one named by PARAMDEX_CLI."""
    c = os.environ.get("PARAMDEX_CLI") or os.environ.get("PARAMDEX")
    if not c:
        if os.environ.get("PARAMDEX_REQUIRE_ALL") == "1":
            pytest.fail("PARAMDEX_REQUIRE_ALL=1 but neither PARAMDEX nor PARAMDEX_CLI names the paramdex binary")
        pytest.skip("neither PARAMDEX nor PARAMDEX_CLI names the paramdex binary")
    return c


def write(path, tensors, kv=(), alignment=None):
    """A GGUF file by gguf-py: ``tensors`` maps a name to (array, raw_dtype or None)."""
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    for add in kv:
        add(w)
    for name, (arr, raw) in tensors.items():
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def every_type(rng):
    """A tensor of every type gguf-py writes: numpy's plain types as arrays, bf16 as its bits,
    every block type as random blocks (2 rows of 3 blocks)."""
    t = {f"plain.{n}": ((rng.standard_normal((3, 4)) * 10).astype(d), None) for n, d in PLAIN.items()}
    t["plain.bfloat16"] = (rng.integers(0, 1 << 16, (2, 5), dtype=np.uint16), Q.BF16)
    for q in Q:
        block, size = gguf.GGML_QUANT_SIZES[q]
        if block == 1:
            continue
        t[f"q.{q.name.lower()}"] = (rng.integers(0, 256, (2, 3 * size), dtype=np.uint8), q)
    return t


def fields(path):
    """(name, value types, value) of every key gguf-py reads, in file order, and the tensors by
    name (type, ne, bytes), and the alignment."""
    r = gguf.GGUFReader(str(path))
    kv = [(f.name, list(f.types), f.contents()) for f in r.fields.values() if not f.name.startswith("GGUF.")]
    ts = {t.name: (t.tensor_type, [int(d) for d in t.shape], t.data.tobytes()) for t in r.tensors}
    return kv, ts, r.alignment


def test_every_type_gguf_py_writes_lists_and_reads_byte_exact(tmp_path):
    rng = np.random.default_rng(0)
    tensors = every_type(rng)
    path = tmp_path / "every.gguf"
    kv = [
        lambda w: w.add_uint32("t.u32", 7),
        lambda w: w.add_token_list(["<s>", "a", "b"]),
        lambda w: w.add_array("t.nested", [[1, 2], ["x"]]),
    ]
    write(path, tensors, kv)
    with paramdex.safe_open(str(path), "np") as f:
        assert f.format == "gguf"
        assert sorted(f.keys()) == sorted(tensors)
        for name, (arr, raw) in tensors.items():
            info = f.info(name)
            got = f.get_tensor(name)
            if raw is None:
                assert info.dtype == np.dtype(arr.dtype).name, name
                assert info.shape == arr.shape
                np.testing.assert_array_equal(got, arr)
            elif raw == Q.BF16:
                assert info.dtype == "bfloat16" and info.shape == arr.shape
                assert got.view(np.uint16).tobytes() == arr.tobytes()
            else:
                block, size = gguf.GGML_QUANT_SIZES[raw]
                # ggml's name, row-major logical shape, the blocks as stored, as uint8.
                assert info.dtype == raw.name.lower(), name
                assert info.shape == (2, 3 * block)
                assert info.nbytes == arr.nbytes
                assert got.dtype == np.uint8 and got.tobytes() == arr.tobytes()
        m = f.metadata()
        assert m["t.u32"] == 7
        assert m["tokenizer.ggml.tokens"] == ["<s>", "a", "b"]
        assert m["t.nested"] == [[1, 2], ["x"]]
        assert m["general.architecture"] == "llama"
        assert ["t.u32", "uint32"] in m["paramdex.gguf.types"]
        assert f.verify().tensors == len(tensors)
    torch = need("torch")
    with paramdex.safe_open(str(path), "pt") as f:
        q = f.get_tensor("q.q4_k")
        assert q.dtype == torch.uint8 and bytes(q.numpy()) == tensors["q.q4_k"][0].tobytes()
        assert f.get_tensor("plain.float32").dtype == torch.float32


def test_gguf_to_paramdex_to_gguf_keeps_keys_types_values_and_tensors(tmp_path):
    rng = np.random.default_rng(1)
    tensors = {n: t for n, t in every_type(rng).items() if n.startswith("plain.")}
    src = tmp_path / "in.gguf"
    kv = [
        lambda w: w.add_uint8("k.u8", 200),
        lambda w: w.add_int16("k.i16", -3),
        lambda w: w.add_float32("k.f32", 0.1),
        lambda w: w.add_float64("k.f64", 0.1),
        lambda w: w.add_uint64("k.u64", 2**64 - 1),
        lambda w: w.add_bool("k.bool", False),
        lambda w: w.add_token_list([f"tok{i}" for i in range(1000)]),
        lambda w: w.add_token_scores([float(-i) for i in range(1000)]),
        lambda w: w.add_array("k.nested", [[1, 2], ["x", "y"], [[3.5]]]),
    ]
    write(src, tensors, kv, alignment=64)
    mid, back, direct = tmp_path / "mid.pdx", tmp_path / "back.gguf", tmp_path / "direct.gguf"
    subprocess.run([cli(), "convert", str(src), str(mid)], check=True, capture_output=True)
    subprocess.run([cli(), "convert", str(mid), str(back), "--to", "gguf"], check=True, capture_output=True)
    subprocess.run([cli(), "convert", str(src), str(direct), "--to", "gguf"], check=True, capture_output=True)
    want = fields(src)
    assert want[2] == 64
    for out in (back, direct):
        got = fields(out)
        assert got[0] == want[0]  # keys, value types, values, in file order
        assert got[1] == want[1]  # tensors: type, ne, bytes
        assert got[2] == 64


def test_block_tensors_round_trip_gguf_to_gguf(tmp_path):
    tensors = {n: t for n, t in every_type(np.random.default_rng(2)).items()}
    src, out = tmp_path / "q.gguf", tmp_path / "out.gguf"
    write(src, tensors)
    subprocess.run([cli(), "convert", str(src), str(out), "--to", "gguf"], check=True, capture_output=True)
    assert fields(out)[:2] == fields(src)[:2]
    # Outputs that cannot hold a block type refuse it by name, or leave it out when asked.
    st = tmp_path / "out.safetensors"
    p = subprocess.run([cli(), "convert", str(src), str(st), "--to", "safetensors"], capture_output=True, text=True)
    assert p.returncode != 0 and "ggml iq1_m tensor" in p.stderr and "safetensors output cannot hold" in p.stderr
    subprocess.run(
        [cli(), "convert", str(src), str(st), "--to", "safetensors", "--skip-unsupported"],
        check=True,
        capture_output=True,
    )
    with paramdex.safe_open(str(st), "np") as f:
        assert sorted(f.keys()) == sorted(n for n in tensors if n.startswith("plain."))


def test_safetensors_to_gguf_is_read_by_gguf_py(tmp_path):
    from paramdex.numpy import save_file

    rng = np.random.default_rng(3)
    arrays = {
        "embed.weight": rng.standard_normal((8, 4)).astype(np.float32),
        "norm.weight": rng.standard_normal(4).astype(np.float16),
        "ids": np.arange(5, dtype=np.int64),
    }
    src, out = tmp_path / "m.safetensors", tmp_path / "m.gguf"
    save_file(arrays, str(src), metadata={"format": "pt", "note": "hi"})
    subprocess.run([cli(), "convert", str(src), str(out), "--to", "gguf"], check=True, capture_output=True)
    r = gguf.GGUFReader(str(out))
    got = {t.name: t for t in r.tensors}
    assert sorted(got) == sorted(arrays)
    for name, arr in arrays.items():
        t = got[name]
        # gguf-py lists ggml's ne (innermost first).
        assert [int(d) for d in t.shape] == list(reversed(arr.shape))
        assert t.data.tobytes() == arr.tobytes()
    meta = {f.name: f.contents() for f in r.fields.values() if not f.name.startswith("GGUF.")}
    assert meta == {"format": "pt", "note": "hi"}
