"""`epic deploy` gives the same results as `epic run`: example topologies and window transcripts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import epic
from epic.cli import load_topology
from epic.errors import EpicError
from epic.spark.launcher import Launcher
from epic.spark.runtime import deploy, read_status
from epic.testing import load_transcripts, rows_key

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
TRANSCRIPTS = load_transcripts(ROOT / "tests" / "transcripts" / "windows.yaml")

# Example topologies and the parameters that keep them quick (fewer replicas: fewer queries).
EXAMPLES = {
    "sensor_averages": {},
    "monitoring": {},
    "parallel_split": {"replicas": "2", "events": "20000"},
}


def _csv_lines(path: Path) -> tuple[str, list[str]]:
    lines = path.read_text().splitlines()
    return (lines[0] if lines else ""), sorted(lines[1:])


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_equals_run(spark, tmp_path, name):
    """Every CSV an example writes under deploy is epic run's file, rows sorted, byte for byte."""
    params = EXAMPLES[name]
    ref = load_topology(ROOT / "topologies" / f"{name}.py",
                        params={**params, "out": str(tmp_path / "ref")})
    dep = load_topology(ROOT / "topologies" / f"{name}.py",
                        params={**params, "out": str(tmp_path / "dep")})
    epic.run(ref)
    if name == "parallel_split":  # its queries start three at a time (docs/deploy.md)
        spark.conf.set(Launcher.STARTING_CONF, "3")
    try:
        result = deploy(dep, str(tmp_path / "wd"), spark=spark, timeout=240)
    finally:
        spark.conf.unset(Launcher.STARTING_CONF)
    assert result.status["state"] == "finished"
    files = sorted((tmp_path / "ref").glob("*.csv"))
    assert files
    for f in files:
        assert _csv_lines(tmp_path / "dep" / f.name) == _csv_lines(f), f.name
    assert read_status(str(tmp_path / "wd"))["state"] == "finished"


def _transcript_topology(tr):
    batches = [payload for kind, payload in tr.batches() if kind == "rows"]
    t = epic.Topology(f"transcript_{tr.name}")
    s = t.source("input", epic.iterator_source(batches, schema=tr.schema, time=tr.time,
                                               unit=tr.unit))
    w = t.window("window", s, tr.window_spec(), key=tr.key, aggregates=tr.aggregate_specs())
    t.sink("out", w, epic.collect_sink())
    return t


def _same_rows(got: list[dict], want: list[dict]) -> bool:
    if len(got) != len(want):
        return False
    for a, b in zip(sorted(got, key=rows_key), sorted(want, key=rows_key)):
        if a.keys() != b.keys():
            return False
        for k in a:
            x, y = a[k], b[k]
            if isinstance(x, float) or isinstance(y, float):
                if not math.isclose(x, y, rel_tol=1e-9, abs_tol=0.0) and not (x == y):
                    return False
            elif x != y:
                return False
    return True


@pytest.mark.parametrize("tr", TRANSCRIPTS, ids=[t.name for t in TRANSCRIPTS])
def test_transcript_equals_run(spark, tmp_path, tr):
    """A transcript's rows (watermark steps skipped) give epic run's output under deploy."""
    topo = _transcript_topology(tr)
    want = epic.run(topo).collected["out"].to_pylist()
    result = deploy(_transcript_topology(tr), str(tmp_path / "wd"), spark=spark, timeout=120)
    got = result.collected["out"].to_pylist()
    assert _same_rows(got, want)
    # And the transcript's golden rows where every step was rows (nothing to skip).
    if all("rows" in s or s.get("end") for s in tr.steps):
        assert _same_rows(got, [dict(r) for r in tr.expected])


def test_node_failure_is_named(spark, tmp_path):
    """A user function raising stops the deploy with the node, the function and the batch."""
    t = epic.Topology("failing")
    s = t.source("nums", epic.iterator_source([{"ts": i, "v": i} for i in range(10)],
                                              schema={"ts": "int64", "v": "int64"}, time="ts",
                                              unit="s"))

    def explode(b):
        raise ValueError("boom")

    m = t.map("explode", s, explode, schema={"ts": "int64", "v": "int64"})
    t.sink("out", m, epic.collect_sink())
    with pytest.raises(epic.EpicError, match=r"node 'explode': user function explode raised "
                                             r"ValueError: boom \(input batch \d+\)"):
        deploy(t, str(tmp_path / "wd"), spark=spark, timeout=120)
    assert read_status(str(tmp_path / "wd"))["state"] == "failed"


def test_unwritable_workdir(spark, tmp_path):
    """An unwritable work directory is refused before any query starts."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")  # chmod would not stop root; a file in the path does
    t = _transcript_topology(TRANSCRIPTS[0])
    with pytest.raises(epic.EpicError, match="not writable"):
        deploy(t, str(blocker / "wd"), spark=spark)


def test_starting_queries_setting_must_be_a_number(spark, tmp_path):
    """``spark.epic.startingQueries`` that is not a number stops the deploy, naming it."""
    t = load_topology(ROOT / "topologies" / "sensor_averages.py",
                      params={"out": str(tmp_path / "dep")})
    spark.conf.set(Launcher.STARTING_CONF, "many")
    try:
        with pytest.raises(EpicError, match="spark.epic.startingQueries='many'"):
            deploy(t, str(tmp_path / "wd"), spark=spark, timeout=60)
    finally:
        spark.conf.unset(Launcher.STARTING_CONF)


@pytest.mark.slow   # ~25 s: the live source runs until the stop
def test_epic_stop_ends_a_live_deploy_and_its_status_says_so(spark, tmp_path):
    """`epic stop` on a live deploy: it exits with status `stopped` (`epic status` while it ran
    said `running`), a second `epic stop` is refused, and the rows it committed are whole ones."""
    import threading
    import time as _t

    from typer.testing import CliRunner

    from epic.cli import app

    def live_rows():   # nested: shipped by value (the test module is not on the workers' path)
        import time

        i = 0
        while True:   # unbounded, 1 ms of event time apart, a few hundred rows a second
            yield {"ts": i, "v": i % 7}
            i += 1
            if i % 50 == 0:
                time.sleep(0.1)

    t = epic.Topology("live_stop")
    s = t.source("s", epic.iterator_source(live_rows, schema={"ts": "int64", "v": "int64"},
                                           time="ts", unit="ms", bounded=False))
    out = tmp_path / "o.csv"
    t.sink("out", s, epic.csv_sink(str(out)))
    wd = str(tmp_path / "wd")
    seen = {}

    def stop_when_rows_are_out():   # the deploy runs in this test's thread (its session's)
        deadline = _t.monotonic() + 90
        while _t.monotonic() < deadline:
            if out.exists() and len(out.read_text().splitlines()) > 100:
                break
            _t.sleep(0.2)
        seen["state"] = read_status(wd)["state"]
        seen["stop"] = CliRunner().invoke(app, ["stop", wd])

    th = threading.Thread(target=stop_when_rows_are_out)
    th.start()
    try:
        result = deploy(t, wd, spark=spark, timeout=120)
    finally:
        th.join(120)
    assert seen["state"] == "running"
    assert seen["stop"].exit_code == 0, seen["stop"].output
    assert result.status["state"] == "stopped"
    assert read_status(wd)["state"] == "stopped"
    r = CliRunner().invoke(app, ["stop", wd])
    assert r.exit_code == 1 and "no deploy is running" in r.output
    lines = out.read_text().splitlines()
    ts = [int(x.split(",")[0]) for x in lines[1:]]
    assert ts == list(range(len(ts))) and len(ts) > 100   # a prefix, each row once


def test_accumulator_server_is_quiet_when_the_jvm_hangs_up(spark, capsys):
    """A deploy's session: pyspark's accumulator server prints no traceback for a connection the
    JVM ended (EOFError, as when epic stop ends the session), but still does for other errors."""
    server = spark.sparkContext._accumulatorServer
    for exc, printed in ((EOFError(), False), (ConnectionResetError(), False),
                         (ValueError("bad token"), True)):
        try:
            raise exc
        except Exception:
            server.handle_error(None, ("127.0.0.1", 1))
        err = capsys.readouterr().err
        assert (type(exc).__name__ in err) == printed, err
