"""Issue 12, "nothing lost, nothing silent": one named test per point, without Spark.

The deploy-level fault tests (a corrupt segment during a deploy, a full file system during a sink
commit, a second deploy on one work directory, a SIGKILL in a fused CSV sink commit) are in
``tests/spark/test_deploy_faults.py``.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import epic
from epic.cli import app, load_topology
from epic.errors import InputError, OutputError, StateError, TopologyError
from epic.topics import Topic

ROOT = Path(__file__).resolve().parents[1]
SENSORS = ROOT / "topologies" / "sensor_averages.py"
runner = CliRunner()


def _epic(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def _topic_with_30_rows(path) -> Topic:
    t = Topic.create(path, pa.schema([("ts", pa.int64()), ("v", pa.int64())]),
                     time_column="ts", time_unit="ms")
    for b in range(3):
        t.append([pa.record_batch([list(range(10 * b, 10 * b + 10)), [b] * 10],
                                  names=["ts", "v"])], producer="src", batch_id=b)
    return t


TOPIC_COPY = textwrap.dedent('''
    import epic
    topology = epic.Topology("copy")
    s = topology.source("rows", epic.topic_source(epic.param("topic")))
    topology.sink("out", s, epic.csv_sink(epic.param("out")))
''')


@pytest.mark.parametrize("damage", ["truncate", "garbage", "delete"])
def test_p01_corrupt_committed_segment_stops_epic_run(tmp_path, damage):
    """Point 1: truncating, overwriting or deleting one committed segment of a 30-row topic makes
    `epic run` exit 1 naming the topic and segment; it used to write 20 rows and exit 0."""
    t = _topic_with_30_rows(tmp_path / "t")
    mid = t.segments()[1]
    if damage == "truncate":
        os.truncate(mid.path, mid.size // 2)
    elif damage == "garbage":
        Path(mid.path).write_bytes(os.urandom(mid.size))
    else:
        os.remove(mid.path)
    topo = tmp_path / "topic_copy.py"
    topo.write_text(TOPIC_COPY)
    res = _epic("run", topo, "--no-summary", "--", "--topic", tmp_path / "t",
                "--out", tmp_path / "out.csv")
    assert res.exit_code == 1
    assert f"topic {tmp_path / 't'}" in res.output
    assert ("sequence number 1 is missing" if damage == "delete" else mid.name) in res.output
    # A stray temp or unknown file stays ignored.
    _topic_with_30_rows(tmp_path / "u")
    (tmp_path / "u" / "segments" / "README").write_text("notes")
    (tmp_path / "u" / "segments" / "_tmp" / "src.b9.p0.x.arrow").write_bytes(b"half")
    res = _epic("run", topo, "--no-summary", "--", "--topic", tmp_path / "u",
                "--out", tmp_path / "out2.csv")
    assert res.exit_code == 0, res.output
    assert len((tmp_path / "out2.csv").read_text().splitlines()) == 1 + 30


def test_p02_corrupt_sink_sidecar_is_an_error(tmp_path):
    """Point 2: a commit record that cannot be read is an error naming it (it used to read as
    "nothing committed", and the next commit cut the file back to its header)."""
    pytest.importorskip("pyspark")
    from epic.spark.sink_query import read_sidecar

    out = tmp_path / "o.csv"
    side = tmp_path / "o.csv.epic" / "commit.json"
    side.parent.mkdir()
    assert read_sidecar(str(out)) is None  # no commit yet
    for text in ("{\"batch\": 3, \"len", "[]", "{\"batch\": 1}", "\x00\x01"):
        side.write_text(text)
        with pytest.raises(InputError, match="commit record of a file sink is corrupt") as err:
            read_sidecar(str(out))
        assert str(side) in str(err.value)
    side.write_text(json.dumps({"batch": 2, "length": 10, "eos": False, "deploy": "a"}))
    assert read_sidecar(str(out), "a")["length"] == 10
    assert read_sidecar(str(out), "b") is None  # another deploy's output: replaced, not kept


NULL_TS = "sid,ts,temp\n1,7,19.5\n2,,20.0\n3,9,21.0\n"


def test_p03_null_event_time_lenient_goes_to_dead_letter(tmp_path):
    """Point 3, lenient: a line with an empty event time goes to the dead-letter file with its
    line number and reason; the other rows are read."""
    p = tmp_path / "n.csv"
    p.write_text(NULL_TS)
    dead = tmp_path / "dead.csv"
    src = epic.csv_source(p, {"sid": "int32", "ts": "int64", "temp": "float64"}, time="ts",
                          unit="ms", header=True, mode="lenient", dead_letter=dead)
    t = epic.Topology("nulls")
    s = t.source("readings", src)
    t.sink("out", s, epic.collect_sink())
    res = epic.run(t)
    assert res.collected["out"].column("sid").to_pylist() == [1, 3]
    rows = list(csv.DictReader(open(dead)))
    assert [(r["line"], r["reason"]) for r in rows] == [("3", "missing_value")]


def test_p03_null_event_time_strict_names_file_line_field(tmp_path):
    """Point 3, strict: `epic run topologies/sensor_averages.py -- --input n.csv` names the file,
    line and field instead of aborting with no line number."""
    p = tmp_path / "n.csv"
    p.write_text(NULL_TS)
    res = _epic("run", SENSORS, "--no-summary", "--", "--input", p, "--out", tmp_path / "o")
    assert res.exit_code == 1
    assert "n.csv:line 3, field 'ts': missing_value" in res.output
    assert "event-time column" in res.output


@pytest.mark.parametrize("field,shown", [("[/x]", "'[/x]' is not a valid int32"),
                                         ("[bold]1", "'[bold]1' is not a valid int32")])
def test_p04_user_data_is_printed_literally(tmp_path, field, shown):
    """Point 4: CSV fields that look like rich markup are shown as they are, with the line and
    field, instead of crashing the printer (MarkupError) or losing characters."""
    p = tmp_path / "m.csv"
    p.write_text(f"sid,ts,temp\n{field},7,19.5\n")
    res = _epic("run", SENSORS, "--no-summary", "--", "--input", p, "--out", tmp_path / "o")
    assert res.exit_code == 1
    assert "line 2, field 'sid'" in res.output and shown in res.output
    assert "MarkupError" not in res.output


def test_p04_schemas_survive_in_error_messages(tmp_path):
    """Point 4: a merge-schema error keeps its bracketed schemas."""
    topo = tmp_path / "m.py"
    topo.write_text(textwrap.dedent('''
        import epic
        t = epic.Topology("m")
        a = t.source("a", epic.iterator_source([], schema={"ts": "int64", "x": "int64"},
                                               time="ts", unit="s"))
        b = t.source("b", epic.iterator_source([], schema={"ts": "int64", "y": "string"},
                                               time="ts", unit="s"))
        t.sink("out", t.merge("m", [a, b]), epic.collect_sink())
    '''))
    res = _epic("validate", topo)
    assert res.exit_code == 1
    assert "ts: int64, x: int64" in res.output or "['ts', 'x']" in res.output, res.output


@pytest.mark.parametrize("name", ["avg\n", "avg ", "a\tb", "a\x00b", " avg"])
def test_p05_node_names_with_whitespace_or_control_characters_are_refused(name):
    """Point 5: such a name used to pass validation, and deploy then hung or wrote nothing."""
    t = epic.Topology("names")
    with pytest.raises(TopologyError, match="whitespace or control character") as err:
        t.source(name, epic.iterator_source([], schema={"ts": "int64"}, time="ts", unit="s"))
    assert repr(name) in str(err.value)
    with pytest.raises(TopologyError, match="Fix:"):
        epic.Topology("t\n")


def _small_fs(path: Path, size: str):
    if os.geteuid() != 0:
        return False
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_p06_full_disk_names_the_path_and_leaves_whole_rows(tmp_path, monkeypatch):
    """Point 6: a full file system under a CSV sink gives an OutputError naming the path and the
    OS error (not "user function SinkOperator.on_end raised"), and the file ends with a whole
    row. On a 64 KiB tmpfs when root, else through a writer that fails half-way."""
    out = tmp_path / "full"
    mounted = _small_fs(out, "64k")
    try:
        if not mounted:
            import pyarrow.csv as pacsv

            real = pacsv.write_csv
            calls = []

            def failing(table, sink, **kw):
                calls.append(1)
                if len(calls) > 1:
                    sink.write(b"12345,half a r")
                    raise OSError(28, "No space left on device")
                return real(table, sink, **kw)
            monkeypatch.setattr(pacsv, "write_csv", failing)
        t = epic.Topology("full")
        s = t.source("nums", epic.iterator_source(
            lambda: ({"ts": i, "v": i * 1000003} for i in range(20000)),
            schema={"ts": "int64", "v": "int64"}, time="ts", unit="s", batch_rows=1000))
        t.sink("out", s, epic.csv_sink(out / "o.csv"))
        with pytest.raises(OutputError) as err:
            epic.run(t)
        msg = str(err.value)
        assert str(out / "o.csv") in msg and "No space left on device (errno 28)" in msg
        data = (out / "o.csv").read_bytes()
        assert data.endswith(b"\n")
        lines = data.decode().splitlines()
        assert lines[0] == "ts,v" and all(len(ln.split(",")) == 2 for ln in lines[1:])
        assert [int(ln.split(",")[0]) for ln in lines[1:]] == list(range(len(lines) - 1))
        # the rows the message counts are the file's, and the rows written before are kept
        # (direct I/O stages blocks: the file was once cut back to its header)
        said = int(re.search(r"ends with the (\d+) rows", msg).group(1))
        assert said == len(lines) - 1 > 0
    finally:
        if mounted:
            subprocess.run(["umount", str(out)], check=False)


def test_p06_full_disk_under_a_parquet_sink_names_the_path_and_leaves_no_file(tmp_path):
    """A Parquet sink's row groups are written on a background thread: a full file system
    there still gives an OutputError naming the path and the OS error, and nothing is left
    under the final name (the file is published only when closed). On a 64 KiB tmpfs when
    root, else through a writer whose second row group fails."""
    from unittest import mock

    import epic.sinks as sinks

    out = tmp_path / "fullpq"
    mounted = _small_fs(out, "64k")
    patch = None
    try:
        if not mounted:
            import pyarrow.parquet as pq

            class Failing(pq.ParquetWriter):
                calls = 0

                def write_table(self, table, row_group_size=None):
                    Failing.calls += 1
                    if Failing.calls > 1:
                        raise OSError(28, "No space left on device")
                    return super().write_table(table, row_group_size=row_group_size)
            patch = mock.patch.object(pq, "ParquetWriter", Failing)
            patch.start()
        t = epic.Topology("fullpq")
        s = t.source("nums", epic.iterator_source(
            lambda: ({"ts": i, "v": i * 1000003} for i in range(60000)),
            schema={"ts": "int64", "v": "int64"}, time="ts", unit="s", batch_rows=1000))
        t.sink("out", s, epic.parquet_sink(out / "o.parquet"))
        with mock.patch.object(sinks, "PARQUET_GROUP_ROWS", 10000), \
                pytest.raises(OutputError) as err:
            epic.run(t)
        msg = str(err.value)
        assert str(out / "o.parquet") in msg and "No space left on device" in msg
        assert not (out / "o.parquet").exists()
        if mounted:
            # nothing of the failed file is held open: the file system unmounts
            done = subprocess.run(["umount", str(out)], capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            mounted = False
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(out)], check=False)
        elif patch is not None:
            patch.stop()


def test_p07_truncated_gzip_names_the_file_and_line(tmp_path):
    """Point 7: a cut .gz gives an error with the file name and the line reached, after handing
    over the complete lines before it (no traceback)."""
    body = "".join(f"{i % 5},{i},{i * 0.5}\n" for i in range(300_000))
    data = gzip.compress(("sid,ts,temp\n" + body).encode())
    p = tmp_path / "t.csv.gz"
    p.write_bytes(data[: len(data) // 2])
    schema = pa.schema([("sid", pa.int32()), ("ts", pa.int64()), ("temp", pa.float64())])
    reader = epic.csvio.read_csv_batches(p, schema, header=True, batch_rows=1000)
    got = 0
    with pytest.raises(InputError) as err:
        for b in reader:
            got += b.num_rows
    assert str(p) in str(err.value) and "truncated or damaged" in str(err.value)
    assert err.value.line == got + 2  # the header and the rows handed over come before it
    assert got > 0
    res = _epic("run", SENSORS, "--no-summary", "--", "--input", p, "--out", tmp_path / "o")
    assert res.exit_code == 1 and "t.csv.gz:line" in res.output
    assert "Traceback" not in res.output


SET_STATE = textwrap.dedent('''
    import epic
    t = epic.Topology("st")
    s = t.source("nums", epic.iterator_source(
        lambda: ({"ts": i, "k": i % 2} for i in range(6)),
        schema={"ts": "int64", "k": "int64"}, time="ts", unit="s"))
    p = t.process("seen", s, epic.processor(
        init=lambda k: set(), on_element=lambda st, r, ctx: st | {r["ts"]}),
        key="k", schema={"ts": "int64"})
    t.sink("out", p, epic.collect_sink())
''')


def test_p08_epic_run_refuses_state_deploy_cannot_snapshot(tmp_path):
    """Point 8: a set in process state fails `epic run` as it fails deploy's first snapshot,
    naming the node, the key and the type (epic run used to accept it)."""
    topo = tmp_path / "st.py"
    topo.write_text(SET_STATE)
    with pytest.raises(StateError) as err:
        epic.run(load_topology(topo))
    msg = str(err.value)
    assert msg.startswith("node 'seen': the state of key 0: state holds a set")
    assert "Fix:" in msg
    # The deploy side goes through the same function (tasks.run_stateful).
    from epic.operator import snapshot_state
    from epic.operators import build as build_operator
    op = build_operator(load_topology(topo).nodes["seen"])
    op.on_batch(pa.record_batch([[1], [1]], names=["ts", "k"]))
    with pytest.raises(StateError, match=r"^node 'seen': the state of key 1: state holds a set"):
        snapshot_state(op, "seen")


def test_p09_syntax_error_shows_file_line_and_error(tmp_path):
    """Point 9: a syntax error in a topology file is one short message with the file and line;
    --debug adds the traceback."""
    topo = tmp_path / "bad.py"
    topo.write_text("import epic\nt = epic.Topology('x')\nx = (1,\n  2 3)\n")
    res = _epic("run", topo)
    assert res.exit_code == 1
    assert f"{topo}:4" in res.output and "SyntaxError" in res.output
    assert len(res.output.splitlines()) <= 5 and "Traceback" not in res.output
    res = _epic("run", topo, "--debug")
    assert res.exit_code == 1 and "Traceback" in res.output
    os.environ.pop("EPIC_DEBUG", None)
    topo.write_text("import epic\nt = epic.Topology('x')\nundefined_name()\n")
    res = _epic("validate", topo)
    assert res.exit_code == 1 and f"{topo}:3: NameError" in res.output


def test_p10_workdir_lock_refuses_a_second_holder_and_is_not_stale(tmp_path):
    """Point 10 (unit level; the deploy-level test is in tests/spark/test_deploy_faults.py): a second
    holder is refused with the first's pid and host; a lock whose holder died is taken over."""
    import socket
    import sys

    from epic.errors import EpicError
    from epic.spark.lock import WorkdirLock

    with WorkdirLock(str(tmp_path)):
        with pytest.raises(EpicError) as err:
            WorkdirLock(str(tmp_path)).acquire()
        assert f"pid {os.getpid()} on host {socket.gethostname()}" in str(err.value)
    WorkdirLock(str(tmp_path)).acquire().release()
    # A holder killed with SIGKILL leaves its record but not its lock.
    code = ("import sys, os, signal; sys.path.insert(0, %r);"
            "from epic.spark.lock import WorkdirLock; WorkdirLock(%r).acquire();"
            "os.kill(os.getpid(), signal.SIGKILL)" % (str(ROOT), str(tmp_path)))
    assert subprocess.run([sys.executable, "-c", code]).returncode == -9
    assert json.loads((tmp_path / "deploy.lock").read_text())["pid"] != os.getpid()
    WorkdirLock(str(tmp_path)).acquire().release()


def test_p11_unwritable_output_directory_is_refused_before_running(tmp_path):
    """Point 11: `epic run` refuses an output directory it cannot create or write, naming it,
    before any row is read (the deploy check is the same function, in tests/spark)."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    topo = tmp_path / "t.py"
    topo.write_text(TOPIC_COPY)
    _topic_with_30_rows(tmp_path / "t")
    res = _epic("run", topo, "--no-summary", "--", "--topic", tmp_path / "t",
                "--out", blocker / "sub" / "o.csv")
    assert res.exit_code == 1
    assert f"{blocker / 'sub'}: sink 'out': the directory cannot be written" in res.output


def _lenient_topology(src, dead, out, late=None):
    t = epic.Topology("paths")
    s = t.source("src", epic.csv_source(src, {"sid": "int64", "ts": "int64", "v": "float64"},
                                        time="ts", unit="s", header=True, mode="lenient",
                                        dead_letter=dead))
    t.sink("a", s, epic.csv_sink(out))
    if late is not None:
        t.sink("b", s, epic.csv_sink(late))
    return t


def test_outputs_on_one_file_or_on_an_input_are_refused_before_the_run(tmp_path):
    """Two sinks on one file, a sink on the dead-letter file, a dead-letter file or a sink on
    the input: each would overwrite or interleave bytes; refused before anything runs, the
    input untouched."""
    src = tmp_path / "in.csv"
    text = "sid,ts,v\n1,1,0.5\n2,2,x\n3,3,1.5\n"
    src.write_text(text)
    cases = [
        (tmp_path / "d.csv", tmp_path / "o.csv", tmp_path / "o.csv", "sink 'a' writes this file"),
        (tmp_path / "o.csv", tmp_path / "o.csv", None, "source 'src' \\(dead letter\\) writes"),
        (src, tmp_path / "o.csv", None, "it is the input of source 'src'"),
        (tmp_path / "d.csv", src, None, "it is the input of source 'src'"),
    ]
    for dead, out, late, message in cases:
        with pytest.raises(OutputError, match=message):
            epic.run(_lenient_topology(src, dead, out, late))
        assert src.read_text() == text
    (tmp_path / "adir").mkdir()
    with pytest.raises(OutputError, match="dead-letter file\\): it is a directory"):
        epic.run(_lenient_topology(src, tmp_path / "adir", tmp_path / "o.csv"))
    res = epic.run(_lenient_topology(src, tmp_path / "d.csv", tmp_path / "o.csv"))
    assert res.nodes["a"].rows_in == 2 and len((tmp_path / "d.csv").read_text().splitlines()) == 2


def test_a_dead_letter_file_that_cannot_be_written_stops_the_run_with_whole_lines(tmp_path,
                                                                                 monkeypatch):
    """A full disk under the dead-letter file: an OutputError naming the file and the OS error,
    the file cut back to its last whole line (through a writer failing on the 4th line)."""
    import csv as pycsv

    from epic import csvio

    real = pycsv.writer

    def failing(f, **kw):
        w = real(f, **kw)

        class W:
            n = 0

            def writerow(self, row):
                W.n += 1
                if W.n == 4:
                    f.write("12,invalid_va")
                    raise OSError(28, "No space left on device")
                return w.writerow(row)
        return W()

    monkeypatch.setattr(csvio.csv, "writer", failing)
    src = tmp_path / "in.csv"
    src.write_text("sid,ts,v\n" + "".join(f"{i},{i},{'x' if i % 2 else '0.5'}\n"
                                            for i in range(20)))
    with pytest.raises(OutputError, match=r"dead.csv: dead-letter file: No space left on device "
                                          r"\(errno 28\).*ends with the 2 bad lines"):
        epic.run(_lenient_topology(src, tmp_path / "dead.csv", tmp_path / "o.csv"))
    lines = (tmp_path / "dead.csv").read_text().splitlines(keepends=True)
    assert [ln.split(",")[:2] for ln in lines] == [["line", "reason"], ["3", "invalid_value"],
                                                   ["5", "invalid_value"]]
    assert lines[-1].endswith("\n")


def test_damaged_parquet_and_bad_iterator_items_are_input_errors(tmp_path):
    """A Parquet file with damaged pages, an int too large for its column, a ragged column
    dict: InputErrors naming the file or the source, not raw pyarrow tracebacks."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from epic.errors import InputError

    good = tmp_path / "ok.parquet"
    pq.write_table(pa.table({"sid": pa.array([1, 2, 3], pa.int32()),
                             "ts": pa.array([1, 2, 3], pa.int64())}), good, row_group_size=1)
    b = bytearray(good.read_bytes())
    b[4:60] = b"\x07" * 56
    bad = tmp_path / "garbled.parquet"
    bad.write_bytes(bytes(b))
    t = epic.Topology("pq")
    s = t.source("src", epic.parquet_source(bad, time="ts", unit="ms"))
    t.sink("out", s, epic.collect_sink())
    with pytest.raises(InputError, match=r"garbled\.parquet: cannot read on after 0 rows"):
        epic.run(t)
    for items, message in [([{"sid": 2**40, "ts": 1}],
                            r"item 0: column .sid. \(int32\) cannot hold 1099511627776"),
                           ([{"sid": [1, 2], "ts": [1]}], "item is not a table")]:
        t = epic.Topology("it")
        s = t.source("src", epic.iterator_source(items, schema={"sid": "int32", "ts": "int64"},
                                                 time="ts", unit="ms"))
        t.sink("out", s, epic.collect_sink())
        with pytest.raises(InputError, match=message):
            epic.run(t)


def test_crash_temp_files_of_spark_logs_are_swept_before_a_rerun(tmp_path):
    """A SIGKILL between Spark's write of a metadata-log entry and its rename leaves
    ``.<batch>.<uuid>.tmp``; in ``offsets/`` before batch 0 Spark then refused every restart
    (audit s35 N: 4 of 4 kills). The rerun deletes such files, and only them, before any query
    starts (``epic deploy`` calls this under the deploy lock)."""
    from epic.spark.runtime import sweep_checkpoint_temps

    u = "195a92cc-091a-4942-a6fe-6a82b05b5295"
    keep = ["checkpoints/q/offsets/0", "checkpoints/q/offsets/.0.crc", "checkpoints/q/metadata",
            "checkpoints/q/commits/0", "checkpoints/q/state/0/1/.1.delta.crc",
            f"checkpoints/q/state/.0.{u}.tmp"]   # not a metadata log: left alone
    junk = [f"checkpoints/q/offsets/.1.{u}.tmp", f"checkpoints/q/offsets/..1.{u}.tmp.crc",
            f"checkpoints/r/offsets/.0.{u}.tmp", f"checkpoints/r/commits/.0.{u}.tmp"]
    for p in keep + junk:
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_bytes(b"")
    gone = sweep_checkpoint_temps(str(tmp_path))
    assert sorted(os.path.relpath(p, tmp_path) for p in gone) == sorted(junk)
    assert all((tmp_path / p).exists() for p in keep)
    assert not any((tmp_path / p).exists() for p in junk)
    assert sweep_checkpoint_temps(str(tmp_path / "none")) == []
