"""epic deploy writing its CSV sinks, and keeping its work directory, on an S3-compatible object
store (moto's server on loopback): the outputs equal `epic run`'s, also after a crash inside a
sink commit or mid-stream."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import epic
from epic.cli import load_topology
from epic.storage import resolve
from s3_store import s3_server
from test_deploy import ROOT

pytestmark = [pytest.mark.spark]

TOPOLOGY = ROOT / "topologies" / "sensor_averages.py"
OUTPUTS = ("averages.csv", "late_readings.csv")


@pytest.fixture(scope="module")
def s3():
    """``s3://<fresh bucket>``; the AWS variables are in the environment the deploys inherit
    (Spark's Python workers must see them: they are set before each deploy's JVM starts)."""
    with s3_server() as root:
        yield root


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """`epic run`'s outputs of the topology, on the local disk."""
    out = tmp_path_factory.mktemp("ref")
    epic.run(load_topology(TOPOLOGY, params={"out": str(out)}))
    return {n: _lines((out / n).read_bytes()) for n in OUTPUTS}


def _deploy(wd, out, *, fuse=False, crash=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("EPIC_CRASH_AT", "EPIC_DRIVER_PGID")}
    if crash:
        env["EPIC_CRASH_AT"] = crash
    cmd = [sys.executable, "-m", "epic.spark.cli", "deploy", str(TOPOLOGY), "--workdir", str(wd),
           "--batch-rows", "500", "--no-progress", "--timeout", "240"] \
        + (["--fuse"] if fuse else []) + ["--", "--out", out]
    return subprocess.run(cmd, env=env, start_new_session=True, capture_output=True, text=True,
                          timeout=300)


def _failure(r) -> str:
    """The driver's own error lines first (Spark's traces are long), then the tail."""
    text = r.stdout + r.stderr
    mine = [ln for ln in text.splitlines()
            if ln.startswith(("error", "Error")) or "NodeFailure" in ln or "EpicError" in ln
            or "OutputError" in ln or "InputError" in ln or "OSError" in ln]
    return "\n".join(mine[:20]) + "\n...\n" + text[-2000:]


def _lines(data: bytes) -> tuple[str, list[str]]:
    """Header and sorted rows (a keyed node's partitions interleave their rows, as in
    tests/spark/test_deploy.py)."""
    lines = data.decode().splitlines()
    return (lines[0] if lines else ""), sorted(lines[1:])


def _read(uri):
    loc = resolve(uri)
    with loc.fs.open_input_stream(loc.path) as f:
        return _lines(f.read())


@pytest.mark.slow
def test_a_crash_inside_an_s3_sink_commit_is_recovered(s3, reference, tmp_path):
    """SIGKILL after the first part of a commit was copied; the rerun completes exactly once."""
    out = f"{s3}/crash"
    wd = tmp_path / "wd"
    first = _deploy(wd, out, crash="sink-commit:2")
    assert first.returncode == -9, (first.returncode, first.stderr[-3000:])
    assert not resolve(f"{out}/averages.csv").exists()  # only appears, whole, at the end
    parts = resolve(f"{out}/averages.csv.epic/parts")
    assert parts.list(), "the kill came after a part was copied, before the commit record"
    again = _deploy(wd, out)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    for n in OUTPUTS:
        assert _read(f"{out}/{n}") == reference[n], n


PARQUET_TOPOLOGY = '''
import epic

out = epic.param("out", "out")
t = topology = epic.Topology("pq_s3")
s = t.source("s", epic.iterator_source(
    [{"ts": i, "k": i % 5, "v": i * 0.25} for i in range(3000)],
    schema={"ts": "int64", "k": "int64", "v": "float64"}, time="ts", unit="s", batch_rows=250))
w = t.window("w", s, epic.tumbling(100), key="k", late="drop",
             aggregates=[epic.count("n"), epic.sum("v", name="sv")])
t.sink("pq", w, epic.parquet_sink(out + "/w.parquet"))
'''


@pytest.mark.slow   # ~30 s (the default tier was 601.5 s in session 34)
def test_deploy_writes_parquet_and_topic_sinks_to_s3(s3, tmp_path):
    """A Parquet sink and a topic sink on s3:// (the topic's segments committed by copy, its
    markers, its end of stream) hold `epic run`'s rows once one deploy of both ends."""
    import pyarrow.parquet as pq
    from epic.topics import Topic

    topo = tmp_path / "pq_tp_s3.py"
    topo.write_text(PARQUET_TOPOLOGY + TOPIC_SINK)
    epic.run(load_topology(topo, params={"out": str(tmp_path / "ref")}))
    env = {k: v for k, v in os.environ.items() if k not in ("EPIC_CRASH_AT", "EPIC_DRIVER_PGID")}
    r = subprocess.run([sys.executable, "-m", "epic.spark.cli", "deploy", str(topo), "--workdir",
                        str(tmp_path / "wd"), "--batch-rows", "500", "--no-progress",
                        "--timeout", "240", "--", "--out", f"{s3}/both"],
                       env=env, start_new_session=True, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, _failure(r)
    key = [("k", "ascending"), ("window_start", "ascending")]
    loc = resolve(f"{s3}/both/w.parquet")
    with loc.open_input() as f:
        got = pq.read_table(f)
    ref = pq.read_table(tmp_path / "ref" / "w.parquet")
    assert got.num_rows == ref.num_rows > 0
    assert got.sort_by(key).equals(ref.sort_by(key))
    topic = Topic.open(f"{s3}/both/w")
    assert topic.status().eos
    got = topic.read_table().sort_by(key)
    ref = Topic.open(tmp_path / "ref" / "w").read_table().sort_by(key)
    assert got.num_rows == ref.num_rows > 0
    assert got.equals(ref)


# one deploy writes both sinks (test_deploy_writes_parquet_and_topic_sinks_to_s3): a topology
# per sink cost a JVM start each (~20 s)
TOPIC_SINK = '''
t.sink("tp", w, epic.topic_sink(out + "/w"))
'''


@pytest.mark.slow
def test_a_fresh_deploy_replaces_an_s3_output(s3, reference, tmp_path):
    """A second deploy (fresh work directory) writing the same s3:// outputs replaces them, as
    `epic run` does: the first deploy's parts and record are not mistaken for its own."""
    out = f"{s3}/twice"
    for wd in ("wd1", "wd2"):
        r = _deploy(tmp_path / wd, out)
        assert r.returncode == 0, _failure(r)
    for n in OUTPUTS:
        assert _read(f"{out}/{n}") == reference[n], n


# -- a work directory on S3 -------------------------------------------------------------------

def _deploy_wd(wd, out, tmp_path, *, fuse=False, crash=None, checkpoint_dir=None):
    """Deploy sensor_averages with ``--workdir wd`` (an s3:// URI), CSV outputs in ``out``;
    the default checkpoint directory under ``tmp_path/cache`` (XDG_CACHE_HOME)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("EPIC_CRASH_AT", "EPIC_DRIVER_PGID")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    if crash:
        env["EPIC_CRASH_AT"] = crash
    cmd = [sys.executable, "-m", "epic.spark.cli", "deploy", str(TOPOLOGY), "--workdir", wd,
           "--batch-rows", "500", "--no-progress", "--timeout", "240"] \
        + (["--fuse"] if fuse else []) \
        + (["--checkpoint-dir", str(checkpoint_dir)] if checkpoint_dir else []) \
        + ["--", "--out", str(out)]
    return subprocess.run(cmd, env=env, start_new_session=True, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)


def _local_outputs(out):
    return {n: _lines((out / n).read_bytes()) for n in OUTPUTS}


@pytest.mark.slow
def test_deploy_with_its_work_directory_on_s3(s3, reference, tmp_path):
    """Unfused (every node a query: topics between them on S3, the keyed window's snapshots on
    S3, a source's spool on S3): `epic run`'s rows; Spark's checkpoints in the driver-local
    default directory, named in deploy.json; nothing local named after the URI."""
    import json

    from epic.spark.runtime import default_checkpoint_dir
    from epic.spark.status import read_status

    wd = f"{s3}/wd-queries"
    r = _deploy_wd(wd, tmp_path / "out", tmp_path)
    assert r.returncode == 0, _failure(r)
    assert _local_outputs(tmp_path / "out") == reference
    loc = resolve(wd)
    names = {fi.base_name for fi in loc.list()}
    assert {"deploy.json", "status.json", "spark-conf.json", "topics", "state",
            "stats"} <= names, names
    assert "checkpoints" not in names and "spool" not in names
    assert loc.join("state", "avg_60s").list(), "the window's snapshots are on S3"
    manifest = json.loads(loc.join("deploy.json").read_bytes())
    ckpt = str(tmp_path / "cache" / "epic" / "checkpoints" / default_checkpoint_dir(wd)
               .rsplit("/", 1)[-1])
    assert manifest["checkpoint_dir"] == ckpt
    assert sorted(os.listdir(os.path.join(ckpt, "checkpoints")))
    assert f"Spark checkpoints in {ckpt}" in r.stderr
    assert read_status(wd)["state"] == "finished"   # epic status s3://...
    assert not (tmp_path / "s3:").exists()


@pytest.mark.slow
def test_a_deploy_on_s3_killed_mid_stream_recovers_exactly_once(s3, reference, tmp_path):
    """Fused, work directory and CSV sinks on S3, SIGKILLed after a keyed window's third
    snapshot: a rerun without the driver's checkpoints (another --checkpoint-dir) is refused,
    naming where they are; the rerun from the same machine completes with `epic run`'s header
    and rows in every sink's object, each once, no temp object left. (Also the suite's test of
    fused CSV sinks on S3: test_a_crash_inside_an_s3_sink_commit_is_recovered deploys unfused.)"""
    wd = f"{s3}/wd-crash"
    out = f"{s3}/wd-crash-out"
    first = _deploy_wd(wd, out, tmp_path, fuse=True, crash="node-state:3")
    assert first.returncode == -9, (first.returncode, _failure(first))
    assert resolve(f"{wd}/state").list(), "the kill came after snapshots were written"
    other = _deploy_wd(wd, out, tmp_path, fuse=True, checkpoint_dir=tmp_path / "elsewhere")
    assert other.returncode == 1
    said = " ".join(other.stderr.split())   # rich wraps the message
    assert "whose Spark checkpoints" in said and f"--checkpoint-dir {tmp_path}/cache/" in said, \
        said[-2000:]
    again = _deploy_wd(wd, out, tmp_path, fuse=True)
    assert again.returncode == 0, _failure(again)
    for n in OUTPUTS:
        assert _read(f"{out}/{n}") == reference[n], n
        meta = resolve(f"{out}/{n}.epic")
        assert [fi.base_name for fi in meta.join("_tmp").list()] == []
        assert b'"eos": true' in meta.join("commit.json").read_bytes()
    assert not (tmp_path / "s3:").exists()
