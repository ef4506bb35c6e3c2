"""paramdex.torch.dcp: torch.distributed.checkpoint saving to and loading from paramdex sharded
checkpoints, with real gloo process groups on the CPU (torch.multiprocessing, spawn).

Jobs: 4 ranks save (DTensor Shard and Replicate, an optimizer after step(), non-tensor values,
async_save), 3 ranks load resharded; 2 ranks save and load the 4-rank checkpoint; 1 process
loads the 2-rank one; a rank killed mid-save leaves the previous checkpoint readable. Plus
incremental saves, hostile metadata, a damaged data file, the result read by other tools, and a
Garage bucket.
"""

import datetime
import json
import multiprocessing
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

from conftest import need

torch = need("torch")
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint import DefaultSavePlanner  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

import paramdex  # noqa: E402
from paramdex.torch.dcp import StorageReader, StorageWriter  # noqa: E402

# The Garage fixture of test_s3.py.
from test_s3 import BUCKET, garage  # noqa: E402,F401

JOB_SECONDS = 300


# --- the state every job saves or expects ----------------------------------------------------


def truth():
    """The state saved (full tensors), the same in every process."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.arange(12.0).reshape(2, 6)).sum().backward()
    opt.step()
    return {
        "emb": torch.arange(120.0).reshape(12, 10),
        "rep": torch.arange(5.0) + 0.5,
        "bf": (torch.arange(48.0).reshape(6, 8) / 4).to(torch.bfloat16),
        "model": model,
        "opt": opt,
        "extra": {"epoch": 3, "name": "run-7", "rng": torch.get_rng_state()},
    }


def fresh():
    """A different state of the same structure, to load into."""
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.5)
    model(torch.ones(2, 6)).sum().backward()
    opt.step()
    return model, opt


def dtensors(mesh, t, emb_p, rep_p, bf_p):
    from torch.distributed.tensor import distribute_tensor

    # src_data_rank=None: each rank takes its own chunk, no collective (gloo has no bf16 scatter).
    return {
        "emb": distribute_tensor(t["emb"], mesh, emb_p, src_data_rank=None),
        "rep": distribute_tensor(t["rep"], mesh, rep_p, src_data_rank=None),
        "bf": distribute_tensor(t["bf"], mesh, bf_p, src_data_rank=None),
    }


def save_state(mesh, placements):
    t = truth()
    s = dtensors(mesh, t, *placements)
    s["model"] = t["model"].state_dict()
    s["opt"] = t["opt"].state_dict()
    s["extra"] = t["extra"]
    return s


def load_and_check(mesh, placements, path):
    """Loads ``path`` into DTensors of ``placements`` and fresh model/optimizer; checks every
    value against the truth; returns nothing (raises on a difference)."""
    from torch.distributed.tensor import distribute_tensor

    t = truth()
    zeros = {k: torch.zeros_like(t[k]) for k in ("emb", "rep", "bf")}
    s = dtensors(mesh, zeros, *placements)
    model, opt = fresh()
    s["model"] = model.state_dict()
    s["opt"] = opt.state_dict()
    s["extra"] = {"epoch": 0, "name": "", "rng": torch.zeros_like(t["extra"]["rng"])}
    dcp.load(s, storage_reader=StorageReader(path))
    for k, p in zip(("emb", "rep", "bf"), placements):
        want = distribute_tensor(t[k], mesh, p, src_data_rank=None).to_local()
        got = s[k].to_local()
        assert got.dtype == want.dtype and torch.equal(got, want), (k, got, want)
    model.load_state_dict(s["model"])
    opt.load_state_dict(s["opt"])
    for a, b in zip(model.state_dict().values(), t["model"].state_dict().values()):
        assert torch.equal(a, b)
    ws, gs = t["opt"].state_dict(), opt.state_dict()
    assert ws["param_groups"] == gs["param_groups"]
    for i, st in ws["state"].items():
        for k, v in st.items():
            assert torch.equal(gs["state"][i][k], v), (i, k)
    assert s["extra"]["epoch"] == 3 and s["extra"]["name"] == "run-7"
    assert torch.equal(s["extra"]["rng"], t["extra"]["rng"])


# --- the jobs ----------------------------------------------------------------------------------


def _init(rank, world, store):
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (world,))


def job_save4(rank, world, store, d):
    from torch.distributed.tensor import Replicate, Shard

    mesh = _init(rank, world, store)
    s = save_state(mesh, ([Shard(0)], [Replicate()], [Shard(1)]))
    dcp.save(s, storage_writer=StorageWriter(os.path.join(d, "four")))
    f = dcp.async_save(s, storage_writer=StorageWriter(os.path.join(d, "four-async")))
    f.result()
    dist.destroy_process_group()


def job_load3(rank, world, store, d):
    from torch.distributed.tensor import Replicate, Shard

    mesh = _init(rank, world, store)
    for name in ("four", "four-async"):
        load_and_check(mesh, ([Shard(1)], [Replicate()], [Shard(0)]), os.path.join(d, name))
    dist.destroy_process_group()


def job_two(rank, world, store, d):
    from torch.distributed.tensor import Replicate, Shard

    mesh = _init(rank, world, store)
    s = save_state(mesh, ([Shard(1)], [Shard(0)], [Replicate()]))
    dcp.save(s, storage_writer=StorageWriter(os.path.join(d, "two")))
    # The 4-rank checkpoint on 2 ranks.
    load_and_check(mesh, ([Shard(0)], [Shard(0)], [Shard(0)]), os.path.join(d, "four"))
    dist.destroy_process_group()


class DyingPlanner(DefaultSavePlanner):
    """Rank 1 dies (SIGKILL-like: os._exit, no cleanup) at its second item."""

    n = 0

    def resolve_data(self, item):
        self.n += 1
        if dist.get_rank() == 1 and self.n == 2:
            os._exit(9)
        return super().resolve_data(item)


def job_killed(rank, world, store, d):
    from torch.distributed.tensor import Replicate, Shard

    mesh = _init(rank, world, store)
    path = os.path.join(d, "killed")
    s = save_state(mesh, ([Shard(0)], [Replicate()], [Shard(1)]))
    dcp.save(s, storage_writer=StorageWriter(path))
    dist.barrier()
    with torch.no_grad():
        s["emb"].mul_(-1)
    try:
        dcp.save(s, storage_writer=StorageWriter(path), planner=DyingPlanner())
    except Exception:
        # Rank 0 sees its peer gone: the save failed. Exit without the collectives' cleanup.
        os._exit(0)
    os._exit(1)  # the save must not have succeeded


def _run_then_leave(fn, *args):
    """Runs ``fn(*args)`` in a spawned rank, then leaves without the interpreter's teardown.

    An exception in ``fn`` fails the rank as before (exit code 1). Once ``fn`` has returned,
    every check has passed and the process group is destroyed; torch's gloo teardown has then
    aborted a rank ("terminate called without an active exception", exit code -6) in CI runs,
    which says nothing of the checkpoint under test.
    """
    fn(*args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_job(fn, world, d):
    """Runs ``fn(rank, world, store, d)`` on ``world`` spawned processes; their exit codes."""
    ctx = multiprocessing.get_context("spawn")
    store = os.path.join(d, f"store-{fn.__name__}")
    ps = [
        ctx.Process(target=_run_then_leave, args=(fn, r, world, store, d)) for r in range(world)
    ]
    for p in ps:
        p.start()
    for p in ps:
        p.join(JOB_SECONDS)
    codes = []
    for p in ps:
        if p.is_alive():
            p.kill()
            p.join()
        codes.append(p.exitcode)
    return codes


# --- tests -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The 4-rank (sync and async) and 2-rank checkpoints, loaded back on 3 and 2 ranks."""
    d = str(tmp_path_factory.mktemp("dcp"))
    assert run_job(job_save4, 4, d) == [0, 0, 0, 0]
    return d


def test_four_ranks_save_three_load_resharded(saved):
    assert run_job(job_load3, 3, saved) == [0, 0, 0]
    names = sorted(os.listdir(os.path.join(saved, "four")))
    assert names == ["checkpoint", "dcp.data-00000-of-00004", "dcp.data-00001-of-00004",
                     "dcp.data-00002-of-00004", "dcp.data-00003-of-00004", "dcp.index"]


def test_two_ranks_save_and_load_then_one_process_loads(saved):
    assert run_job(job_two, 2, saved) == [0, 0]
    # One process, no process group: plain tensors take the whole of each DTensor.
    t = truth()
    model, opt = fresh()
    s = {
        "emb": torch.zeros(12, 10),
        "rep": torch.zeros(5),
        "bf": torch.zeros(6, 8, dtype=torch.bfloat16),
        "model": model.state_dict(),
        "opt": opt.state_dict(),
        "extra": {"epoch": 0, "name": "", "rng": torch.zeros_like(t["extra"]["rng"])},
    }
    dcp.load(s, storage_reader=StorageReader(os.path.join(saved, "two")), no_dist=True)
    for k in ("emb", "rep", "bf"):
        assert torch.equal(s[k], t[k]), k
    assert s["extra"]["name"] == "run-7"
    model.load_state_dict(s["model"])
    assert torch.equal(model[0].weight, t["model"][0].weight)


def test_the_checkpoint_is_a_paramdex_sharded_checkpoint(saved):
    d = os.path.join(saved, "four")
    t = truth()
    f = paramdex.safe_open(d, framework="pt")
    keys = f.keys()
    assert "emb" in keys and "model.0.weight" in keys and "opt.state.0.exp_avg" in keys
    assert torch.equal(f.get_tensor("emb"), t["emb"])
    assert torch.equal(f.get_tensor("opt.state.0.exp_avg"), t["opt"].state_dict()["state"][0]["exp_avg"])
    assert torch.equal(f.get_slice("bf")[1:3, 2:7], t["bf"][1:3, 2:7])
    assert f.verify().tensors == len(keys)
    # The metadata is JSON, not a pickle.
    doc = json.loads(f.metadata()["dcp"])
    assert doc["format"] == "paramdex-dcp/1"
    # Non-tensor items are bytes values (the torch.save bytes DCP hands over).
    assert f.info("extra.epoch").dtype == "bytes"


def test_tensorflow_reads_it(saved):
    need("tensorflow", load=False)
    from conftest import run_child

    code = (
        "import sys, numpy as np, tensorflow as tf\n"
        "r = tf.train.load_checkpoint(sys.argv[1])\n"
        "m = r.get_variable_to_shape_map()\n"
        "assert m['emb'] == [12, 10], m\n"
        "assert (r.get_tensor('emb') == np.arange(120.0).reshape(12, 10)).all()\n"
        "print('ok')\n"
    )
    assert run_child(code, os.path.join(saved, "four")).strip().endswith("ok")


def test_a_killed_rank_leaves_the_previous_checkpoint(tmp_path):
    d = str(tmp_path)
    codes = run_job(job_killed, 2, d)
    assert codes[1] == 9 and codes[0] == 0, codes
    path = os.path.join(d, "killed")
    s = {"emb": torch.zeros(12, 10)}
    dcp.load(s, storage_reader=StorageReader(path), no_dist=True)
    assert torch.equal(s["emb"], truth()["emb"])  # the first save's, not the negated one
    f = paramdex.safe_open(path)
    assert f.verify().tensors > 0
    # A later save commits despite the dead save's leftovers (it names its own save id).
    dcp.save({"emb": -truth()["emb"]}, storage_writer=StorageWriter(path), no_dist=True)
    s = {"emb": torch.zeros(12, 10)}
    dcp.load(s, storage_reader=StorageReader(path), no_dist=True)
    assert torch.equal(s["emb"], -truth()["emb"])


class _DiesBeforeFinish(StorageWriter):
    """A coordinator that dies once every shard is written, before it commits the save."""

    def finish(self, metadata, results):
        raise RuntimeError("killed before finish")


def test_a_save_whose_coordinator_died_before_finish_loads_after_a_manual_merge(tmp_path):
    path = str(tmp_path / "step-60")
    s = {"w": torch.arange(20.0).reshape(4, 5), "extra": {"epoch": 3}, "model": torch.nn.Linear(3, 2)}
    with pytest.raises(CheckpointException):  # DCP wraps what finish raised
        dcp.save(s, storage_writer=_DiesBeforeFinish(path), no_dist=True)
    assert not os.path.exists(os.path.join(path, "dcp.index"))
    # What `paramdex verify DIR` advises: merge the pending shards.
    paramdex.merge_shards(os.path.join(path, "dcp"))
    got = {"w": torch.zeros(4, 5), "extra": {"epoch": 0}, "model": torch.nn.Linear(3, 2)}
    dcp.load(got, storage_reader=StorageReader(path), no_dist=True)
    assert torch.equal(got["w"], s["w"]) and got["extra"]["epoch"] == 3
    assert torch.equal(got["model"].weight, s["model"].weight)
    # And the run lists it as complete, the latest.
    run = paramdex.list_run(str(tmp_path))
    assert run["latest"]["name"] == "step-60", run


def test_a_run_lists_its_steps_and_resumes_from_the_latest_complete(tmp_path):
    root = tmp_path / "runs"
    for step in (10, 20):
        dcp.save({"w": torch.full((3,), float(step))}, storage_writer=StorageWriter(root / f"step-{step}"), no_dist=True)
    with pytest.raises(CheckpointException):  # DCP wraps what finish raised
        dcp.save({"w": torch.full((3,), 30.0)}, storage_writer=_DiesBeforeFinish(root / "step-30"), no_dist=True)
    run = paramdex.list_run(root)
    assert [c["step"] for c in run["checkpoints"]] == [10, 20, 30]
    assert [c["complete"] for c in run["checkpoints"]] == [True, True, False]
    assert "merge-shards" in run["checkpoints"][2]["why_not"]
    assert run["latest"]["step"] == 20
    r = StorageReader.latest(root)
    assert r.checkpoint_id == str(root / "step-20")
    got = {"w": torch.zeros(3)}
    dcp.load(got, storage_reader=r, no_dist=True)
    assert torch.equal(got["w"], torch.full((3,), 20.0))
    (tmp_path / "nothing").mkdir()
    with pytest.raises(paramdex.NotFoundError):
        StorageReader.latest(tmp_path / "nothing")  # no step directory at all


def _small_state(seed):
    g = torch.Generator().manual_seed(seed)
    return {f"layer.{i}.w": torch.randn(8, 8, generator=g) for i in range(6)}


def test_incremental_save_reuses_unchanged_tensors(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    s = _small_state(0)
    dcp.save(s, storage_writer=StorageWriter(a), no_dist=True)
    with torch.no_grad():
        s["layer.2.w"].add_(1)
    dcp.save(s, storage_writer=StorageWriter(b, base=a), no_dist=True)
    r = paramdex._paramdex.RegionReader(os.path.join(b, "dcp"))
    assert len(r.tensors()) == 6
    # The data file of b holds only the changed tensor; the rest is in a's (linked).
    names = os.listdir(b)
    assert any(".data-00001-of-00002" in n for n in names), names
    got = {k: torch.zeros(8, 8) for k in s}
    dcp.load(got, storage_reader=StorageReader(b), no_dist=True)
    for k in s:
        assert torch.equal(got[k], s[k]), k


def test_dtypes_round_trip_byte_exact(tmp_path):
    s = {
        "f16": torch.randn(5).half(),
        "bf16": torch.randn(5).bfloat16(),
        "f8": torch.randn(5).to(torch.float8_e4m3fn),
        "f8e5": torch.randn(5).to(torch.float8_e5m2),
        "i8": torch.arange(-3, 3, dtype=torch.int8),
        "u8": torch.arange(6, dtype=torch.uint8),
        "b": torch.tensor([True, False]),
        "c64": torch.randn(3, dtype=torch.complex64),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "view": torch.arange(24.0).reshape(4, 6)[:, 1:4],  # a non-contiguous view
        "u16": torch.arange(6).to(torch.uint16),
        "u64": torch.arange(6).to(torch.uint64),
        "c128": torch.randn(3, dtype=torch.complex128),
    }
    bits8 = torch.randint(0, 255, (2, 4), dtype=torch.uint8)
    for name in ("float8_e8m0fnu", "float4_e2m1fn_x2"):  # torch 2.15's newer types, as raw bits
        if hasattr(torch, name):
            s[name] = bits8.clone().view(getattr(torch, name))
    dcp.save(s, storage_writer=StorageWriter(str(tmp_path)), no_dist=True)
    # Zeroed destinations of each dtype, made through bytes (not every dtype has zeros_like).
    got = {
        k: torch.zeros(v.numel() * v.element_size(), dtype=torch.uint8).view(v.dtype).reshape(v.shape)
        for k, v in s.items()
    }
    dcp.load(got, storage_reader=StorageReader(str(tmp_path)), no_dist=True)
    for k, v in s.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        bits = lambda t: t.contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
        assert torch.equal(bits(got[k]), bits(v)), k


def test_loading_into_a_non_contiguous_destination(tmp_path):
    s = {"w": torch.arange(30.0).reshape(5, 6)}
    dcp.save(s, storage_writer=StorageWriter(str(tmp_path)), no_dist=True)
    big = torch.zeros(5, 12)
    dst = {"w": big[:, ::2]}
    dcp.load(dst, storage_reader=StorageReader(str(tmp_path)), no_dist=True)
    assert torch.equal(big[:, ::2], s["w"]) and big[:, 1::2].abs().sum() == 0


def _hostile(tmp_path, doc, bytes_tensor=None):
    """A checkpoint whose DCP metadata is ``doc`` (a str, or None for no key)."""
    prefix = str(tmp_path / "dcp")
    sid = paramdex.new_save_id()
    with paramdex.ShardWriter(prefix, 0, 1, sid) as w:
        w.add("w", np.zeros(3, np.float32))
        if bytes_tensor is not None:
            w.add("x", bytes_tensor)
    paramdex.merge_shards(prefix, save_id=sid, metadata={} if doc is None else {"dcp": doc})
    return str(tmp_path)


def _doc(**kw):
    d = {"format": "paramdex-dcp/1", "version": "1.0.0", "properties": {},
         "storage_meta": None}
    d.update(kw)
    return json.dumps(d)


BOMB = zlib.compress(b"[" + b" " * (300 << 20) + b"]", 9).hex()


@pytest.mark.parametrize(
    "doc,bt,says",
    [
        (None, None, "missing"),
        ("{not json", None, "not JSON"),
        (json.dumps([1, 2]), None, "not a paramdex-dcp/1"),
        (_doc(format="other/9"), None, "not a paramdex-dcp/1"),
        (_doc(properties={"w": {"evil": 1}}), None, "'properties'"),
        (_doc(storage_meta={"checkpoint_id": 5}), None, "'storage_meta'"),
        (_doc(planner_data_zlib_hex="zz"), None, "planner data"),
        (_doc(planner_data_zlib_hex=BOMB), None, "planner data"),
        (_doc(planner_data_zlib_hex=zlib.compress(b'{"w":[{"a":1}]}').hex()), None, "malformed"),
        (_doc(version=7), None, "'version'"),
    ],
)
def test_hostile_metadata_is_refused(tmp_path, doc, bt, says):
    d = _hostile(tmp_path, doc, bt)
    with pytest.raises(paramdex.CorruptError, match=says):
        StorageReader(d).read_metadata()


def test_damaged_data_is_refused(tmp_path):
    s = {"w": torch.arange(4096.0)}
    dcp.save(s, storage_writer=StorageWriter(str(tmp_path)), no_dist=True)
    data = str(tmp_path / "dcp.data-00000-of-00001")
    f = paramdex.safe_open(str(tmp_path))
    _, off, _ = f._store.data_location("w")
    with open(data, "r+b") as fh:
        fh.seek(off + 100)
        b = fh.read(1)
        fh.seek(off + 100)
        fh.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(dcp.api.CheckpointException) as e:
        dcp.load({"w": torch.zeros(4096)}, storage_reader=StorageReader(str(tmp_path)), no_dist=True)
    ((cause, _),) = e.value.failures.values()  # (exception, its traceback) per rank
    assert isinstance(cause, paramdex.CorruptError) and "checksum mismatch of tensor w" in str(cause)


def test_cli_reads_it(saved):
    # The release binary tests/interop/run.sh builds (PARAMDEX), or one named by PARAMDEX_CLI.
    cli = os.environ.get("PARAMDEX_CLI") or os.environ.get("PARAMDEX")
    if not cli:
        if os.environ.get("PARAMDEX_REQUIRE_ALL") == "1":
            pytest.fail("PARAMDEX_REQUIRE_ALL=1 but neither PARAMDEX nor PARAMDEX_CLI names the paramdex binary")
        pytest.skip("neither PARAMDEX nor PARAMDEX_CLI names the paramdex binary")
    d = os.path.join(saved, "four")
    out = subprocess.run([cli, "ls", d], capture_output=True, text=True, check=True).stdout
    assert "opt.state.0.exp_avg" in out
    subprocess.run([cli, "verify", d], capture_output=True, text=True, check=True)


def test_garage_bucket(garage):  # noqa: F811
    url = f"s3://{BUCKET}/runs/step-1"
    s = {"w": torch.arange(20.0).reshape(4, 5), "n": {"k": 3}}
    dcp.save(s, storage_writer=StorageWriter(url), no_dist=True)
    got = {"w": torch.zeros(4, 5), "n": {"k": 0}}
    dcp.load(got, storage_reader=StorageReader(url), no_dist=True)
    assert torch.equal(got["w"], s["w"]) and got["n"]["k"] == 3
    f = paramdex.safe_open(url + "/dcp", framework="pt")
    assert torch.equal(f.get_tensor("w"), s["w"])
    # The bucket prefix of step directories is a run: its latest complete checkpoint opens.
    run = paramdex.list_run(f"s3://{BUCKET}/runs")
    assert run["latest"]["path"] == url, run
    assert StorageReader.latest(f"s3://{BUCKET}/runs").checkpoint_id == url


def test_incremental_save_in_a_garage_bucket(garage):  # noqa: F811
    a, b = f"s3://{BUCKET}/inc/a", f"s3://{BUCKET}/inc/b"
    s = _small_state(0)
    dcp.save(s, storage_writer=StorageWriter(a), no_dist=True)
    with torch.no_grad():
        s["layer.2.w"].add_(1)
    dcp.save(s, storage_writer=StorageWriter(b, base=a), no_dist=True)
    got = {k: torch.zeros(8, 8) for k in s}
    dcp.load(got, storage_reader=StorageReader(b), no_dist=True)
    for k in s:
        assert torch.equal(got[k], s[k]), k
    # The same reuse through the shard writer: unchanged tensors are not written.
    c = f"s3://{BUCKET}/inc/c"
    w = paramdex.ShardWriter(c, 0, 1, paramdex.new_save_id(), base=f"{b}/dcp", sync=False)
    assert w.add("layer.0.w", s["layer.0.w"].numpy()) is False
    assert w.add("layer.2.w", s["layer.2.w"].numpy()) is False
    assert w.add("new", np.arange(4, dtype=np.int32)) is True
    st = w.finish()
    assert st["tensors"] == 1 and st["reused_tensors"] == 2
    rep = paramdex.merge_shards(c)
    assert rep["reused_tensors"] == 2
    with paramdex.safe_open(c, framework="pt") as f:
        assert torch.equal(f.get_tensor("layer.2.w"), s["layer.2.w"])
        assert f.verify().tensors == 3
    # A local base for a bucket save is refused.
    with pytest.raises(ValueError):
        StorageWriter(f"s3://{BUCKET}/inc/d", base="/tmp/somewhere")


def test_dcp_to_torch_save_and_back(tmp_path):
    from paramdex.torch.dcp import dcp_to_torch_save, torch_save_to_dcp

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    s = {"model": model.state_dict(), "extra": {"step": 7, "lr": 0.5}}
    d = str(tmp_path / "step-7")
    dcp.save(s, storage_writer=StorageWriter(d), no_dist=True)
    pt = str(tmp_path / "model.pt")
    dcp_to_torch_save(d, pt)
    got = torch.load(pt, weights_only=True)
    assert got["extra"] == {"step": 7, "lr": 0.5}
    assert set(got["model"]) == set(s["model"])
    for k, v in s["model"].items():
        assert torch.equal(got["model"][k], v), k
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    # And back: a torch.save file to a checkpoint DCP loads.
    back = str(tmp_path / "back")
    torch_save_to_dcp(pt, back)
    fresh_model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    loaded = {"model": fresh_model.state_dict(), "extra": {"step": 0, "lr": 0.0}}
    dcp.load(loaded, storage_reader=StorageReader(back), no_dist=True)
    assert loaded["extra"]["step"] == 7
    for k, v in s["model"].items():
        assert torch.equal(loaded["model"][k], v), k


def test_storage_reader_says_what_a_wrong_path_holds(tmp_path):
    fs = str(tmp_path / "fs")
    dcp.save({"w": torch.ones(2)}, storage_writer=dcp.FileSystemWriter(fs), no_dist=True)
    with pytest.raises(paramdex.ParamdexError, match="FileSystemReader"):
        StorageReader(fs).read_metadata()
    root = tmp_path / "runs"
    dcp.save({"w": torch.ones(2)}, storage_writer=StorageWriter(root / "step-1"), no_dist=True)
    with pytest.raises(paramdex.ParamdexError, match=r"StorageReader.latest\(ROOT\).*step-1"):
        StorageReader(root).read_metadata()
    with pytest.raises(paramdex.ParamdexError, match="give its directory"):
        StorageReader(str(root / "step-1" / "dcp.index")).read_metadata()


def test_scalar_items_are_metadata_too(tmp_path):
    d = str(tmp_path / "step-3")
    s = {"w": torch.ones(2), "extra": {"epoch": 3, "lr": 0.5, "name": "run-7", "rng": torch.get_rng_state()}}
    dcp.save(s, storage_writer=StorageWriter(d), no_dist=True)
    m = paramdex._paramdex.RegionReader(os.path.join(d, "dcp")).metadata()
    assert m["extra.epoch"] == 3 and m["extra.lr"] == 0.5 and m["extra.name"] == "run-7", m
    assert "extra.rng" not in m and "dcp" in m
