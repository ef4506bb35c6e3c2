"""The safetensors test idioms, run against paramdex.safe_open on a .safetensors file written
by the safetensors package and on a .pdx holding the same tensors."""

import numpy as np
import pytest

import paramdex
from paramdex.numpy import save_file as pdx_save

from conftest import need

TENSORS = {
    "test": np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4),
    "test2": np.zeros((2, 2), dtype=np.int64),
    "test3": np.arange(10, dtype=np.float16),
    "scalar": np.array(3.5, dtype=np.float64),
    "empty": np.zeros((0, 3), dtype=np.int32),
    "flag": np.array([True, False, True]),
}
META = {"framework": "pt", "format": "np"}


@pytest.fixture(params=["safetensors", "pdx"])
def path(request, tmp_path):
    if request.param == "safetensors":
        st = need("safetensors.numpy")
        p = tmp_path / "model.safetensors"
        st.save_file(TENSORS, str(p), metadata=META)
    else:
        p = tmp_path / "model.pdx"
        pdx_save(TENSORS, p, metadata=META)
    return p


def test_keys_and_get_tensor(path):
    with paramdex.safe_open(path, framework="np") as f:
        assert sorted(f.keys()) == sorted(TENSORS)
        for k in f.keys():
            got = f.get_tensor(k)
            assert got.dtype == TENSORS[k].dtype and got.shape == TENSORS[k].shape
            np.testing.assert_array_equal(got, TENSORS[k])


def test_metadata(path):
    with paramdex.safe_open(path, framework="np") as f:
        assert f.metadata() == META


def test_slice(path):
    data = TENSORS["test"]
    with paramdex.safe_open(path, framework="np") as f:
        slice_ = f.get_slice("test")
        assert slice_.get_shape() == [2, 3, 4]
        assert slice_.get_dtype() == "F32"
        np.testing.assert_array_equal(slice_[:], data[:])
        np.testing.assert_array_equal(slice_[:, :, 1:2], data[:, :, 1:2])
        np.testing.assert_array_equal(slice_[:, :, :2], data[:, :, :2])
        np.testing.assert_array_equal(slice_[..., :2], data[..., :2])
        np.testing.assert_array_equal(slice_[1, ...], data[1, ...])
        np.testing.assert_array_equal(slice_[:, 0], data[:, 0])
        np.testing.assert_array_equal(slice_[-1:, -2], data[-1:, -2])
        np.testing.assert_array_equal(slice_[0, 1, 2], data[0, 1, 2])
        np.testing.assert_array_equal(slice_[:, ::2, 1::2], data[:, ::2, 1::2])
        np.testing.assert_array_equal(f.get_slice("scalar")[...], TENSORS["scalar"])
        np.testing.assert_array_equal(f.get_slice("empty")[:, 1:], TENSORS["empty"][:, 1:])


def test_get_tensor_outside_the_block_and_missing_names(path):
    with paramdex.safe_open(path, framework="np") as f:
        t = f.get_tensor("test")
        with pytest.raises(KeyError):
            f.get_tensor("missing")
    np.testing.assert_array_equal(t, TENSORS["test"])


def test_writable_private_views_or_read_only_views(path):
    with paramdex.safe_open(path, framework="np") as f:
        t = f.get_tensor("test")
        assert t.flags.writeable and not t.flags.owndata
    with paramdex.safe_open(path, framework="np", readonly=True) as f:
        t = f.get_tensor("test")
        assert not t.flags.writeable


def test_numpy_load_file_equals_safetensors_load_file(path):
    st = need("safetensors.numpy")
    ours = paramdex.numpy.load_file(path)
    if str(path).endswith(".safetensors"):
        theirs = st.load_file(str(path))
        assert sorted(ours) == sorted(theirs)
        for k in theirs:
            np.testing.assert_array_equal(ours[k], theirs[k])
            assert ours[k].dtype == theirs[k].dtype
