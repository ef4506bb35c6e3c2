"""Bytes values (SPEC.md 6.1) from Python: ``save_file`` (numpy and torch flavours) and
``Writer.add`` store ``bytes`` under a name beside tensors; ``get_tensor``, ``load_file`` (views
and ``copy=True``) give ``bytes`` back; ``keys()`` and ``info`` list them as ``bytes``."""

import os

import numpy as np
import pytest

import paramdex
import paramdex.numpy as pn
from paramdex import CorruptError

from conftest import need

STATE = bytes(range(256)) * 3


def test_numpy_round_trip(tmp_path):
    p = str(tmp_path / "a.pdx")
    pn.save_file({"w": np.arange(4, dtype=np.float32), "state": STATE, "ba": bytearray(b"\x00\xff"),
                  "mv": memoryview(b"view"), "empty": b""}, p)
    for copy in (False, True):
        d = pn.load_file(p, copy=copy)
        assert d["state"] == STATE and isinstance(d["state"], bytes)
        assert d["ba"] == b"\x00\xff" and d["mv"] == b"view" and d["empty"] == b""
        assert np.array_equal(d["w"], np.arange(4, dtype=np.float32))
    with paramdex.safe_open(p) as f:
        assert f.keys() == ["ba", "empty", "mv", "state", "w"]
        assert f.get_tensor("state") == STATE
        i = f.info("state")
        assert (i.dtype, i.shape, i.nbytes) == ("bytes", (), len(STATE))
        f.verify()
    with paramdex.safe_open(p, checksums=False) as f:
        assert f.get_tensor("state") == STATE


def test_torch_round_trip(tmp_path):
    torch = need("torch")
    import paramdex.torch as pt

    p = str(tmp_path / "t.pdx")
    pt.save_file({"w": torch.ones(2, 3), "opt/param_groups": b'{"lr": 0.1}'}, p)
    for copy in (False, True):
        d = pt.load_file(p, copy=copy)
        assert d["opt/param_groups"] == b'{"lr": 0.1}'
        assert torch.equal(d["w"], torch.ones(2, 3))
    with paramdex.safe_open(p, framework="pt") as f:
        assert f.get_tensor("opt/param_groups") == b'{"lr": 0.1}'


def test_a_corrupt_value_is_an_error(tmp_path):
    p = str(tmp_path / "c.pdx")
    pn.save_file({"state": STATE}, p)
    raw = bytearray(open(p, "rb").read())
    at = raw.find(STATE[:64])
    # The length field (varint 768 = 80 06), just before the 4-byte length checksum.
    assert raw[at - 6:at - 4] == b"\x80\x06"
    raw[at - 5] = 0x07  # the length lies
    open(p, "wb").write(raw)
    with paramdex.safe_open(p) as f:
        with pytest.raises(CorruptError):
            f.get_tensor("state")
    with pytest.raises(CorruptError):
        pn.load_file(p)


# Through the safetensors-style writers (output by file name): kept in a paramdex file, refused
# by a safetensors output, which holds tensors only.
def test_numpy_save_file_keeps_bytes_values_in_a_paramdex_file(tmp_path):
    p = tmp_path / "state.pdx"
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "rng": b"\x00\x01state\xff"}
    pn.save_file(state, p)
    got = pn.load_file(p)
    assert got["rng"] == b"\x00\x01state\xff"
    np.testing.assert_array_equal(got["w"], state["w"])
    with paramdex.safe_open(p, framework="np") as f:
        assert sorted(f.keys()) == ["rng", "w"]
        assert f.get_tensor("rng") == b"\x00\x01state\xff"
    # In memory too.
    back = pn.load(pn.save(state, format="paramdex"))
    assert back["rng"] == state["rng"]


@pytest.mark.parametrize("how", ["file", "bytes"])
def test_a_safetensors_output_refuses_a_bytes_value_by_name(tmp_path, how):
    state = {"w": np.zeros(2, dtype=np.float32), "step": b"1200"}
    with pytest.raises(ValueError, match="'step' is a bytes value"):
        if how == "file":
            pn.save_file(state, tmp_path / "m.safetensors")
        else:
            pn.save(state)
    assert not (tmp_path / "m.safetensors").exists()


def test_torch_save_file_keeps_bytes_values_beside_tensors(tmp_path):
    torch = need("torch")
    import paramdex.torch as pt

    p = tmp_path / "t.pdx"
    pt.save_file({"w": torch.ones(3), "opt": bytearray(b"param_groups")}, p)
    got = pt.load_file(p)
    assert got["opt"] == b"param_groups"
    assert torch.equal(got["w"], torch.ones(3))
    with pytest.raises(ValueError, match="'opt' is a bytes value"):
        pt.save_file({"w": torch.ones(3), "opt": b"x"}, tmp_path / "t.safetensors")
