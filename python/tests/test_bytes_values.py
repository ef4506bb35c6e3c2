"""Bytes values beside tensors through the safetensors-style save functions: kept in a paramdex
file, refused by a safetensors output (which holds tensors only)."""

import numpy as np
import pytest

import paramdex
import paramdex.numpy as pnp
from conftest import need


def test_numpy_save_file_keeps_bytes_values_in_a_paramdex_file(tmp_path):
    p = tmp_path / "state.pdx"
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "rng": b"\x00\x01state\xff"}
    pnp.save_file(state, p)
    got = pnp.load_file(p)
    assert got["rng"] == b"\x00\x01state\xff"
    np.testing.assert_array_equal(got["w"], state["w"])
    with paramdex.safe_open(p, framework="np") as f:
        assert sorted(f.keys()) == ["rng", "w"]
        assert f.get_tensor("rng") == b"\x00\x01state\xff"
    # In memory too.
    back = pnp.load(pnp.save(state, format="paramdex"))
    assert back["rng"] == state["rng"]


@pytest.mark.parametrize("how", ["file", "bytes"])
def test_a_safetensors_output_refuses_a_bytes_value_by_name(tmp_path, how):
    state = {"w": np.zeros(2, dtype=np.float32), "step": b"1200"}
    with pytest.raises(ValueError, match="'step' is a bytes value"):
        if how == "file":
            pnp.save_file(state, tmp_path / "m.safetensors")
        else:
            pnp.save(state)
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
