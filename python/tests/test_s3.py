"""s3:// URLs through paramdex.safe_open against a real one-node Garage server on loopback.

The garage binary is named by the environment variable PARAMDEX_GARAGE (.ci/run sets it; one
that is set but not executable fails the test). Without it the test skips, saying why, except
under PARAMDEX_REQUIRE_ALL=1 (CI), where it fails.
The server is configured as tests/support/garage.rs configures its cluster (one node here,
replication factor 1): layout, an access key and a bucket through Garage's own CLI; the library
reaches it through the AWS_* environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP).
"""

import datetime
import hashlib
import hmac
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import paramdex
from paramdex.numpy import save_file

REGION = "garage"
BUCKET = "pdx"
# Each readiness step's limit: CI is a loaded 2-core machine.
READY_SECONDS = 60


def garage_binary():
    path = os.environ.get("PARAMDEX_GARAGE", "")
    why = None
    if not path:
        why = "PARAMDEX_GARAGE does not name a garage binary"
    elif not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"PARAMDEX_GARAGE={path} is not an executable file")
    if why is not None:
        if os.environ.get("PARAMDEX_REQUIRE_ALL") == "1":
            pytest.fail(f"{why}, and PARAMDEX_REQUIRE_ALL=1 forbids skipping the s3:// test")
        pytest.skip(f"{why}: the s3:// test against a real Garage server did NOT run")
    return path


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for(what, f):
    deadline = time.monotonic() + READY_SECONDS
    while True:
        v = f()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {READY_SECONDS} s waiting for {what}")
        time.sleep(0.2)


class Garage:
    def __init__(self, binary, directory):
        self.binary = binary
        self.dir = directory
        self.config = os.path.join(directory, "garage.toml")
        self.log = os.path.join(directory, "garage.log")
        s3, rpc, admin = free_ports(3)
        self.endpoint = f"http://127.0.0.1:{s3}"
        self.admin_port = admin
        with open(self.config, "w") as f:
            f.write(
                f'metadata_dir = "{directory}/meta"\n'
                f'data_dir = "{directory}/data"\n'
                'db_engine = "sqlite"\n'
                "replication_factor = 1\n"
                f'rpc_bind_addr = "127.0.0.1:{rpc}"\n'
                f'rpc_public_addr = "127.0.0.1:{rpc}"\n'
                f'rpc_secret = "{secrets.token_hex(32)}"\n'
                "\n[s3_api]\n"
                f's3_region = "{REGION}"\n'
                f'api_bind_addr = "127.0.0.1:{s3}"\n'
                'root_domain = ".s3.garage.localhost"\n'
                "\n[admin]\n"
                f'api_bind_addr = "127.0.0.1:{admin}"\n'
                f'admin_token = "{secrets.token_hex(16)}"\n'
            )
        os.chmod(self.config, 0o600)  # garage refuses a config (it holds a secret) others can read
        self.logf = open(self.log, "ab")
        env = dict(os.environ, NO_COLOR="1", RUST_LOG="garage=info")
        self.proc = subprocess.Popen(
            [binary, "-c", self.config, "server"], stdin=subprocess.DEVNULL, stdout=self.logf,
            stderr=subprocess.STDOUT, env=env,
        )

    def cli(self, *args):
        p = subprocess.run([self.binary, "-c", self.config, *args], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, NO_COLOR="1"))
        if p.returncode != 0:
            raise RuntimeError(f"garage {' '.join(args)}: {p.stderr.strip()}")
        return p.stdout

    def log_tail(self):
        with open(self.log, "rb") as f:
            return f.read()[-3000:].decode("utf-8", "replace")

    def setup(self):
        def node_id():
            try:
                return self.cli("node", "id", "-q").strip()
            except (RuntimeError, subprocess.TimeoutExpired):
                return None

        nid = wait_for("the node's id", node_id)

        # `node id` reads the node's key from its metadata directory and can answer before the
        # server listens; the layout commands need its RPC port, so wait for an RPC answer (on
        # a loaded machine the server starts seconds later: "Unable to connect to destination
        # RPC host").
        def rpc_up():
            try:
                self.cli("status")
                return True
            except (RuntimeError, subprocess.TimeoutExpired):
                return False

        wait_for("the node's RPC", rpc_up)
        self.cli("layout", "assign", "-z", "dc1", "-c", "1G", nid[:16])
        self.cli("layout", "apply", "--version", "1")
        key = self.cli("key", "create", "pdx-key")
        fields = dict(line.split(":", 1) for line in key.splitlines() if ":" in line)
        self.key_id = fields["Key ID"].strip()
        self.secret = fields["Secret key"].strip()
        self.cli("bucket", "create", BUCKET)
        self.cli("bucket", "allow", "--read", "--write", "--owner", BUCKET, "--key", "pdx-key")

        def healthy():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/health", timeout=5) as r:
                    return r.status == 200
            except (OSError, urllib.error.URLError):
                return False

        wait_for("GET /health to say the node is operational", healthy)

    def put(self, key, body):
        """PUT ``body`` as ``key`` in the bucket, signed with AWS Signature Version 4."""
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        host = self.endpoint.split("//", 1)[1]
        path = f"/{BUCKET}/{key}"
        payload = hashlib.sha256(body).hexdigest()
        headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
        signed = ";".join(sorted(headers))
        canonical = "\n".join(
            ["PUT", path, "", *(f"{k}:{headers[k]}" for k in sorted(headers)), "", signed, payload]
        )
        scope = f"{day}/{REGION}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        k = ("AWS4" + self.secret).encode()
        for part in (day, REGION, "s3", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
        auth = f"AWS4-HMAC-SHA256 Credential={self.key_id}/{scope}, SignedHeaders={signed}, Signature={sig}"
        req = urllib.request.Request(self.endpoint + path, data=body, method="PUT", headers={
            "x-amz-content-sha256": payload, "x-amz-date": amz_date, "Authorization": auth,
        })
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200, r.status

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.logf.close()


@pytest.fixture
def garage(tmp_path, monkeypatch):
    g = Garage(garage_binary(), str(tmp_path))
    try:
        try:
            g.setup()
        except Exception as e:
            raise AssertionError(f"starting garage failed: {e}\n--- garage.log ---\n{g.log_tail()}") from e
        for name, value in {
            "AWS_ENDPOINT_URL": g.endpoint,
            "AWS_ACCESS_KEY_ID": g.key_id,
            "AWS_SECRET_ACCESS_KEY": g.secret,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }.items():
            monkeypatch.setenv(name, value)
        yield g
    finally:
        g.stop()


def test_safe_open_reads_an_s3_url_from_garage(garage, tmp_path):
    want = {
        "emb": np.arange(4096, dtype=np.float32).reshape(64, 64),
        "bias": np.arange(7, dtype=np.int16),
        b"\xffraw": np.ones(3, np.uint8),
    }
    local = tmp_path / "m.pdx"
    save_file(want, local, metadata={"step": 3})
    # The first write may find the fresh node not quite ready: retried for a while.
    wait_for("the first PUT", lambda: _try_put(garage, "models/m.pdx", local.read_bytes()))
    url = f"s3://{BUCKET}/models/m.pdx"
    with paramdex.safe_open(url, framework="np") as f:
        assert f.keys() == ["bias", "emb", b"\xffraw"]
        assert f.metadata() == {"step": 3}
        for k, v in want.items():
            a = f.get_tensor(k)
            assert a.dtype == v.dtype and a.shape == v.shape and (a == v).all()
        assert (f.get_slice("emb")[10:12, ::8] == want["emb"][10:12, ::8]).all()
        assert f.verify().tensors == 3
        with pytest.raises(paramdex.NotFoundError):
            f.get_tensor("missing")
    from paramdex.numpy import load_file

    got = load_file(url)
    assert (got["emb"] == want["emb"]).all()
    with pytest.raises(paramdex.ParamdexError):
        paramdex.safe_open(f"s3://{BUCKET}/models/absent.pdx")


def _try_put(g, key, body):
    try:
        g.put(key, body)
        return True
    except (OSError, urllib.error.URLError):
        return False
