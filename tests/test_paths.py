"""Work directories and file outputs: plain paths and file:// URIs; other schemes refused."""

from __future__ import annotations

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
    """epic deploy -w hdfs://... stops at once with the reason, and creates nothing locally."""
    from epic.spark.runtime import deploy

    monkeypatch.chdir(tmp_path)
    t = epic.Topology("uri")
    s = t.source("s", epic.iterator_source([{"ts": 1}], schema={"ts": "int64"}, time="ts",
                                           unit="s"))
    t.sink("out", s, epic.collect_sink())
    with pytest.raises(EpicError, match="hdfs:// scheme is not supported"):
        deploy(t, "hdfs://nn/wd")
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


def test_deploy_refuses_an_object_store_work_directory_with_the_reason(tmp_path, monkeypatch):
    """epic deploy -w s3://... is refused before Spark, saying why and that sinks may use s3://."""
    from epic.spark.runtime import deploy

    monkeypatch.chdir(tmp_path)
    t = epic.Topology("uri")
    s = t.source("s", epic.iterator_source([{"ts": 1}], schema={"ts": "int64"}, time="ts",
                                           unit="s"))
    t.sink("out", s, epic.collect_sink())
    with pytest.raises(EpicError, match="memory-map .* checkpoints .* sinks may write to s3://"):
        deploy(t, "s3://bucket/wd")
    assert list(tmp_path.iterdir()) == []
