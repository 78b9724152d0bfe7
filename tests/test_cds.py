"""The JVM class archive (epic/spark/cds.py): when a deploy's JVM options use it, and that a
deploy whose archive is unusable still runs."""

import os
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest

from epic.spark import cds

BASE = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(cds.CDS_ENV, raising=False)
    monkeypatch.delenv("JAVA_TOOL_OPTIONS", raising=False)
    path = cds.archive_path(BASE)
    if path is None:
        pytest.skip("no java")
    assert path.startswith(str(tmp_path / "cache" / "epic" / "jvm"))
    return path


def _opts(conf):
    return conf.get("spark.driver.extraJavaOptions", "")


def test_a_deploy_uses_the_archive_only_when_it_is_there(cache, monkeypatch):
    assert cds.cds_options(None, BASE, False) == BASE          # none yet: unchanged
    os.makedirs(os.path.dirname(cache))
    with open(cache, "wb") as f:
        f.write(b"archive")
    got = _opts(cds.cds_options("local[2]", BASE, False))
    assert got.startswith("-XX:TieredStopAtLevel=1 ") and f"-XX:SharedArchiveFile={cache}" in got
    assert "-Xlog:cds=off" in got                               # a mismatch is dropped silently
    # left alone: another master, a running JVM, the user's own archive options, turned off
    assert cds.cds_options("spark://h:7077", BASE, False) == BASE
    assert cds.cds_options(None, BASE, True) == BASE
    mine = {"spark.driver.extraJavaOptions": "-Xshare:off"}
    assert cds.cds_options(None, mine, False) == mine
    monkeypatch.setenv(cds.CDS_ENV, "0")
    assert cds.cds_options(None, BASE, False) == BASE
    monkeypatch.setenv(cds.CDS_ENV, "record:/tmp/x.jsa")
    assert "-XX:ArchiveClassesAtExit=/tmp/x.jsa" in _opts(cds.cds_options(None, BASE, False))


def test_the_archive_is_per_jvm_flags_not_per_property(cache):
    other = {"spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}
    prop = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -Dfoo=bar"}
    assert cds.archive_key(other) != cds.archive_key(BASE)
    assert cds.archive_key(prop) == cds.archive_key(BASE)
    assert cds.archive_key({**BASE, "spark.jars": "x.jar"}) != cds.archive_key(BASE)


@pytest.mark.slow   # ~20 s: a deploy in a JVM of its own
def test_a_deploy_runs_with_a_corrupt_archive(tmp_path):
    """An archive that is not one (a truncated or foreign file) must not stop a deploy: the JVM
    starts without it (its CDS log is off) and the output is whole."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop(cds.CDS_ENV, None)
    code = textwrap.dedent(f"""
        import os, sys
        from epic.spark import cds, cds_setup
        path = cds.archive_path(cds_setup.deploy_conf())
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(os.urandom(1 << 16))
        import numpy as np, pyarrow as pa, epic
        from epic.spark.runtime import deploy
        t = epic.Topology("cds_corrupt")
        src = t.source("s", epic.iterator_source(
            [pa.table({{"k": np.arange(1000) % 4, "t": np.arange(1000), "v": np.ones(1000)}})],
            schema=pa.schema([("k", pa.int64()), ("t", pa.int64()), ("v", pa.float64())]),
            time="t", unit="s"))
        w = t.window("w", src, epic.tumbling(100), key="k", aggregates=[epic.count("n")])
        t.sink("out", w, epic.parquet_sink({str(tmp_path / "out.parquet")!r}))
        deploy(t, {str(tmp_path / "work")!r}, fuse=True)
        import json
        conf = json.load(open({str(tmp_path / "work" / "spark-conf.json")!r}))
        assert path in conf["spark.driver.extraJavaOptions"], conf["spark.driver.extraJavaOptions"]
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    t = pq.read_table(tmp_path / "out.parquet")
    assert t.num_rows == 40 and sorted(set(t.column("n").to_pylist())) == [25]
