"""Work directories and file outputs: plain paths and file:// URIs; other schemes refused."""

from __future__ import annotations

import os

import pytest

import epic
from epic.errors import EpicError, SpecError
from epic.paths import local_path


def test_file_uris_are_local_paths():
    """file:///abs and file://localhost/abs are the local path; plain paths pass unchanged."""
    assert local_path("file:///data/wd") == "/data/wd"
    assert local_path("file://localhost/data/a%20b") == "/data/a b"
    assert local_path("out/a.csv") == "out/a.csv"


@pytest.mark.parametrize("uri", ["hdfs://nn:8020/wd", "s3://bucket/wd", "gs://b/x",
                                 "file://otherhost/x"])
def test_other_schemes_are_refused_with_the_reason(uri):
    """A scheme epic cannot write to is refused, naming it, never a local dir named 'hdfs:'."""
    with pytest.raises(SpecError, match="scheme is not supported|is not local"):
        local_path(uri, "work directory")


def test_sinks_take_file_uris(tmp_path):
    """csv_sink('file:///...') writes to that path."""
    out = tmp_path / "o.csv"
    t = epic.Topology("uri")
    s = t.source("s", epic.iterator_source([{"ts": 1, "v": 2}], schema={"ts": "int64",
                                            "v": "int64"}, time="ts", unit="s"))
    t.sink("out", s, epic.csv_sink(f"file://{out}"))
    epic.run(t)
    assert out.read_text().splitlines() == ["ts,v", "1,2"]
    with pytest.raises(SpecError, match="ftp:// scheme"):
        epic.csv_sink("ftp://host/o.csv")


def test_deploy_refuses_an_unsupported_work_directory_before_spark(tmp_path, monkeypatch):
    """epic deploy -w hdfs://... without libhdfs here stops at once with pyarrow's reason, and
    creates nothing locally (ftp:// is refused as a scheme epic does not know)."""
    from epic.spark.runtime import deploy

    monkeypatch.chdir(tmp_path)
    t = epic.Topology("uri")
    s = t.source("s", epic.iterator_source([{"ts": 1}], schema={"ts": "int64"}, time="ts",
                                           unit="s"))
    t.sink("out", s, epic.collect_sink())
    with pytest.raises(EpicError, match="hdfs:// store cannot be opened through pyarrow"):
        deploy(t, "hdfs://nn/wd")
    with pytest.raises(EpicError, match="ftp:// scheme is not supported"):
        deploy(t, "ftp://host/wd")
    assert list(tmp_path.iterdir()) == []


def test_conf_option_needs_key_value(tmp_path):
    """epic deploy --conf without '=' is refused, naming the option, before Spark starts."""
    from typer.testing import CliRunner

    from epic.cli import app

    topo = tmp_path / "t.py"
    topo.write_text("import epic\n"
                    "t = epic.Topology('t')\n"
                    "s = t.source('s', epic.iterator_source([], schema={'ts': 'int64'}, "
                    "time='ts', unit='s'))\n"
                    "t.sink('o', s, epic.collect_sink())\n")
    r = CliRunner().invoke(app, ["deploy", str(topo), "-w", str(tmp_path / "wd"),
                                 "--conf", "spark.executor.memory"])
    assert r.exit_code == 1
    assert "--conf 'spark.executor.memory': expected key=value" in r.output
    assert "--conf" in CliRunner().invoke(app, ["deploy", "--help"]).output


def test_remote_work_directories_keep_their_uri_and_checkpoints_stay_local(tmp_path,
                                                                          monkeypatch):
    """-w s3://b/wd is kept as a URI (never a local dir 's3:'); its Spark checkpoints go to a
    stable driver-local directory derived from it; --checkpoint-dir must be local."""
    from epic.paths import workdir_path
    from epic.spark.runtime import _driver_dir, default_checkpoint_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert workdir_path("s3://b/wd/") == "s3://b/wd"
    d = default_checkpoint_dir("s3://b/wd")
    assert d == default_checkpoint_dir("s3://b/wd") != default_checkpoint_dir("s3://b/wd2")
    assert d.startswith(str(tmp_path / "cache" / "epic" / "checkpoints" / "b_wd-"))
    assert _driver_dir("s3://b/wd", None) == d and os.path.isdir(d)
    assert _driver_dir("/data/wd", None) == "/data/wd"   # a local work dir: the classic layout
    with pytest.raises(EpicError, match="--checkpoint-dir .*s3:// scheme is not supported"):
        _driver_dir("s3://b/wd", "s3://b/ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]


def test_a_restart_without_the_drivers_checkpoints_is_refused(tmp_path):
    """A remote work dir's deploy.json names a deploy; a checkpoint dir that does not hold it
    (another machine, a wiped cache) is refused, naming where the checkpoints are; stale
    checkpoints of a work dir that no longer has a deploy are refused too."""
    import json

    from epic.spark.runtime import OWNER, _check_driver_dir

    ck = tmp_path / "ck"
    ck.mkdir()
    wd = "s3://b/wd"
    existing = {"id": "d1", "checkpoint_dir": "/home/a/ck", "driver_host": "hostA"}
    with pytest.raises(EpicError, match="on its driver's disk: /home/a/ck on host hostA.*"
                                        "--checkpoint-dir /home/a/ck"):
        _check_driver_dir(wd, str(ck), existing)
    (ck / OWNER).write_text(json.dumps({"id": "d1", "workdir": wd}))
    _check_driver_dir(wd, str(ck), existing)            # the same deploy: resumes
    with pytest.raises(EpicError, match="holds deploy d2"):
        _check_driver_dir(wd, str(ck), {**existing, "id": "d2"})
    _check_driver_dir(wd, str(ck), None)                # no checkpoints yet: a fresh start
    (ck / "checkpoints" / "q").mkdir(parents=True)
    with pytest.raises(EpicError, match="holds no deploy"):
        _check_driver_dir(wd, str(ck), None)
    _check_driver_dir(str(tmp_path), str(tmp_path), None)   # a local work dir: its own
    with pytest.raises(EpicError, match="rerun it without --checkpoint-dir"):
        _check_driver_dir(str(tmp_path), str(ck), {"id": "d3"})   # deployed without the option
