"""paramdex.ShardWriter / merge_shards from Python: several writers of one save, slices of
global tensors, the index-only merge, incremental saves, and the merge's refusals."""

import os

import numpy as np
import pytest

import paramdex


def _save(prefix, emb, step, base=None):
    sid = paramdex.new_save_id()
    written = []
    for rank in range(3):
        with paramdex.ShardWriter(prefix, rank, 3, sid, base=base) as w:
            rows = slice(rank * 4, (rank + 1) * 4)
            written.append(w.add_slice("emb", emb[rows], global_shape=emb.shape, start=(rank * 4, 0)))
            written.append(w.add(f"rank{rank}.step", np.array(step, np.int64)))
            w.add_bytes(f"rank{rank}.state", bytes([rank]) * 5)
    report = paramdex.merge_shards(prefix, save_id=sid, num_shards=3, metadata={"step": step})
    assert report["save_id"] == sid
    return report, written


def test_three_writers_one_checkpoint(tmp_path):
    prefix = str(tmp_path / "ckpt")
    emb = np.arange(12 * 5, dtype=np.float32).reshape(12, 5)
    report, written = _save(prefix, emb, 7)
    assert report["tensors"] == 7 and report["slices"] == 3 and all(written)
    r = paramdex._paramdex.RegionReader(prefix)
    assert r.read_bytes(["rank2.state", "rank0.state"]) == [b"\x02" * 5, b"\x00" * 5]
    with paramdex.safe_open(prefix) as f:
        assert f.keys() == ["emb", "rank0.state", "rank0.step", "rank1.state", "rank1.step",
                            "rank2.state", "rank2.step"]
        assert f.info("rank1.state").dtype == "bytes"
        assert (f.get_tensor("emb") == emb).all()
        # A region across two writers' slices.
        assert (f.get_slice("emb")[3:9, 1:4] == emb[3:9, 1:4]).all()
        assert f.metadata() == {"step": 7}
        assert f.verify().tensors == 7
    assert sorted(os.listdir(tmp_path)) == [
        "ckpt.data-00000-of-00003", "ckpt.data-00001-of-00003", "ckpt.data-00002-of-00003", "ckpt.index",
    ]


def test_incremental_save_reuses_unchanged_slices(tmp_path):
    emb = np.arange(12 * 5, dtype=np.float32).reshape(12, 5)
    _save(str(tmp_path / "a"), emb, 1)
    emb2 = emb.copy()
    emb2[0, 0] = -1  # only rank 0's slice changed
    report, written = _save(str(tmp_path / "b"), emb2, 1, base=str(tmp_path / "a"))
    # rank 0 wrote its slice; ranks 1 and 2 reused theirs; every step scalar is unchanged.
    assert written == [True, False, False, False, False, False]
    assert report["reused_tensors"] == 5  # bytes values are written again (add_bytes)
    with paramdex.safe_open(str(tmp_path / "b")) as f:
        assert (f.get_tensor("emb") == emb2).all()


def test_merge_refuses_a_missing_shard_and_changes_nothing(tmp_path):
    prefix = str(tmp_path / "ckpt")
    sid = paramdex.new_save_id()
    for rank in (0, 2):
        with paramdex.ShardWriter(prefix, rank, 3, sid) as w:
            w.add(f"r{rank}", np.zeros(2, np.float32))
    with pytest.raises(paramdex.ShardError):
        paramdex.merge_shards(prefix, save_id=sid, num_shards=3)
    assert not os.path.exists(prefix + ".index")


def test_overlapping_slices_are_refused(tmp_path):
    prefix = str(tmp_path / "ckpt")
    sid = paramdex.new_save_id()
    for rank in range(2):
        with paramdex.ShardWriter(prefix, rank, 2, sid) as w:
            w.add_slice("x", np.zeros((3, 2), np.float32), global_shape=(4, 2), start=(rank, 0))
    with pytest.raises(paramdex.SliceError):
        paramdex.merge_shards(prefix, save_id=sid)


def test_an_aborted_shard_leaves_nothing(tmp_path):
    prefix = str(tmp_path / "ckpt")
    with pytest.raises(RuntimeError):
        with paramdex.ShardWriter(prefix, 0, 1, paramdex.new_save_id()) as w:
            w.add("x", np.zeros(2))
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        paramdex.ShardWriter(str(tmp_path / "c"), 0, 1, "not-hex")
    with pytest.raises(paramdex.InvalidArgumentError):
        paramdex.ShardWriter(str(tmp_path / "c"), 3, 2, paramdex.new_save_id())


def test_a_save_that_never_committed_is_named(tmp_path):
    prefix = str(tmp_path / "dcp")
    with paramdex.ShardWriter(prefix, 0, 2, paramdex.new_save_id()) as w:
        w.add("x", np.zeros(2, np.float32))
    for path in (prefix, str(tmp_path)):
        with pytest.raises(paramdex.ShardError, match="dcp.data-00000-of-00002.pending.*clean-shards"):
            paramdex.safe_open(path)
