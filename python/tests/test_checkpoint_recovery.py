"""CheckpointManager after a crash (issue 44) and bytes values in its saves (issue 37): a step
committed before its pointer moved is the latest (a resumed job saves the next step, never that
one again); what killed saves leave (temporaries of every writer, files of steps that do not
exist, pending shards) is removed, the abandoned temporaries when a manager opens, the rest by
the next save; a temporary a live writer holds is left alone."""

import fcntl
import os

import numpy as np
import pytest

import paramdex

STATE = b"\x00rng state\xff" * 10


def _tensors(step):
    return {"w": np.full(8, step, np.float32), "rng": STATE + bytes([step])}


def _recommit(path):
    """Puts an index in place again (a link and a rename, as a save commits it): it is then
    committed after the state file, as a save killed between its commit and the state file's
    update leaves it."""
    tmp = path + ".relink"
    os.link(path, tmp)
    os.rename(tmp, path)


@pytest.mark.parametrize("shards", [None, 2])
def test_a_step_committed_before_its_pointer_moved_is_the_latest(tmp_path, shards):
    d = str(tmp_path / "ckpts")
    m = paramdex.CheckpointManager(d, shards=shards, sync=False)
    for step in (1, 2):
        m.save(step, _tensors(step))
    state = open(os.path.join(d, "checkpoint"), "rb").read()
    m.save(3, _tensors(3))
    del m
    # The state file as the save of step 3 found it: step 3 committed, not recorded.
    with open(os.path.join(d, "checkpoint"), "wb") as f:
        f.write(state)
    _recommit(os.path.join(d, "ckpt-3.index"))

    m = paramdex.CheckpointManager(d, shards=shards, sync=False)
    assert m.steps() == [1, 2, 3]
    assert m.latest() == 3
    with m.restore() as f:
        assert (f.get_tensor("w") == 3).all()
    with pytest.raises(paramdex.CheckpointError, match="saved already"):
        m.save(3, _tensors(3))
    m.save(m.latest() + 1, _tensors(4))
    assert m.latest() == 4 and m.steps() == [1, 2, 3, 4]


def test_leftovers_of_every_kind_are_removed(tmp_path):
    d = str(tmp_path / "ckpts")
    m = paramdex.CheckpointManager(d, shards=2, sync=False)
    m.save(1, _tensors(1))
    del m

    def put(name, data=b"x" * 100):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)

    # Abandoned temporaries of every writer of the directory: removed when a manager opens.
    temporaries = [
        ".ckpt-4.data-00000-of-00002.pending.0a1b2c3d4e.pdx-tmp",  # a shard being written
        ".ckpt-4.data-00000-of-00001.0a1b2c3d4f.pdx-tmp",  # a single file being written
        ".ckpt-4.index.0a1b2c3d4g.tmp",  # a single file's index link
        ".ckpt-4.index.0a1b2c3d4h.pdx-tmp",  # a sharded index
        ".ckpt-4.refs-00001-of-00002.pending.0a1b2c3d4i.pdx-tmp",  # a references file
        ".checkpoint.0a1b2c3d4j.tmp",  # the state file
    ]
    # A committed step's pending leftovers, and files of a step before the newest committed
    # one that does not exist (a prune that died): removed when a manager opens.
    older = [
        "ckpt-1.refs-00001-of-00002.pending",
        "ckpt-1.data-00001-of-00002.pending",
        "ckpt-0.data-00000-of-00001",
        "ckpt-0.data-00000-of-00002.pending",
    ]
    temporaries += older
    # Files of a later step that does not exist (to a reader opening the directory, maybe a
    # save in progress): removed by the next save.
    uncommitted = [
        "ckpt-4.data-00000-of-00001",
        "ckpt-4.data-00000-of-00002.pending",
        "ckpt-4.data-00001-of-00002",
        "ckpt-4.refs-00000-of-00002.pending",
    ]
    # Not the manager's: kept.
    others = ["notes.txt", ".hidden", ".model.pdx.0a1b2c3d4e.pdx-tmp", "other-2.data-00000-of-00001"]
    for n in temporaries + uncommitted + others:
        put(n)
    # A temporary a live writer holds (its lock taken, as every paramdex writer does): kept.
    live = os.path.join(d, ".ckpt-3.data-00000-of-00002.pending.0a1b2c3d4k.pdx-tmp")
    held = open(live, "wb")
    fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

    m = paramdex.CheckpointManager(d, shards=2, sync=False)
    left = set(os.listdir(d))
    assert not left & set(temporaries), left & set(temporaries)
    assert set(uncommitted) <= left
    assert os.path.basename(live) in left
    assert m.steps() == [1] and m.latest() == 1

    m.save(2, _tensors(2))
    left = set(os.listdir(d))
    assert not left & set(uncommitted), left & set(uncommitted)
    assert set(others) <= left and os.path.basename(live) in left
    assert m.steps() == [1, 2]
    with m.restore(2) as f:
        assert (f.get_tensor("w") == 2).all() and f.get_tensor("rng") == STATE + b"\x02"
    fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    held.close()
    # Unlocked now: the next manager removes it.
    paramdex.CheckpointManager(d, shards=2, sync=False)
    assert os.path.basename(live) not in os.listdir(d)


@pytest.mark.parametrize("shards", [None, 2])
def test_bytes_values_saved_and_restored(tmp_path, shards):
    m = paramdex.CheckpointManager(tmp_path / "c", shards=shards, sync=False)
    m.save(1, {"w": np.arange(3, dtype=np.int32), "opt": b'{"lr": 0.1}', "ba": bytearray(b"\x00\x01")})
    m.save_async(2, {"w": np.arange(3, dtype=np.int32), "rng": memoryview(STATE), "empty": b""})
    m.wait()
    with m.restore(1) as f:
        assert f.get_tensor("opt") == b'{"lr": 0.1}' and f.get_tensor("ba") == b"\x00\x01"
        f.verify()
    with m.restore(2) as f:
        assert f.get_tensor("rng") == STATE and f.get_tensor("empty") == b""
        assert f.get_tensor("w").tolist() == [0, 1, 2]
