"""epic.storage: paths and URIs resolved once, each store's commit rule, and topics, state
snapshots and `epic run` file sinks on pyarrow's local, sub-tree and mock filesystems and on an
S3-compatible object store on loopback (moto's server)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import epic
from epic.errors import InputError, SpecError
from epic.paths import output_path
from epic.storage import LOCAL, commit_rule, publish, resolve, store_kind
from epic.topics import Topic
from s3_store import s3_server


@pytest.fixture(scope="module")
def s3():
    """``s3://<fresh bucket>`` on a moto server for this module."""
    with s3_server() as root:
        yield root


def _batch(ts, key="a"):
    return pa.record_batch([pa.array(ts, pa.int64()), pa.array([key] * len(ts))],
                           names=["ts", "key"])


SCHEMA = pa.schema([("ts", pa.int64()), ("key", pa.string())])


# -- resolving ---------------------------------------------------------------------------------

def test_plain_paths_and_file_uris_are_local(tmp_path):
    """Plain paths become absolute; file:///, file://localhost/ and Hadoop's file:/ decode."""
    assert resolve("out/a.csv").path == os.path.abspath("out/a.csv")
    for uri in (f"file://{tmp_path}/a%20b", f"file://localhost{tmp_path}/a%20b",
                f"file:{tmp_path}/a b"):
        loc = resolve(uri)
        assert loc.is_local and loc.path == f"{tmp_path}/a b", uri
    loc = resolve(str(tmp_path)).join("topics", "n")
    assert loc.path == f"{tmp_path}/topics/n" and loc.parent().path == f"{tmp_path}/topics"
    assert loc.sibling(".epic").path == f"{tmp_path}/topics/n.epic"


@pytest.mark.parametrize("uri,why", [
    ("ftp://host/x", "ftp:// scheme is not supported"),
    ("http://host/x", "http:// scheme is not supported"),
    ("file://otherhost/x", "is not local"),
    ("s3://bucket/x?endpoint_override=127.0.0.1:9000", "options in a s3:// URI"),
    ("s3://key:secret@bucket/x", "credentials in a s3:// URI"),
])
def test_unsupported_uris_are_refused_with_the_reason(uri, why, tmp_path, monkeypatch):
    """Refused before any store is contacted, and nothing is created locally."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match=why):
        resolve(uri, "work directory")
    with pytest.raises(SpecError, match=why):
        output_path(uri, "csv_sink path")
    assert list(tmp_path.iterdir()) == []


def test_a_store_pyarrow_cannot_load_is_refused_with_its_reason():
    """hdfs:// without libhdfs and a JVM: refused at resolve time with pyarrow's reason."""
    try:
        pafs.FileSystem.from_uri("hdfs://127.0.0.1:1/x")
    except Exception:  # noqa: BLE001
        pass
    else:
        pytest.skip("this machine can load HDFS")
    with pytest.raises(SpecError, match="hdfs:// store cannot be opened through pyarrow's "
                                        "filesystem layer here: .*(libhdfs|libjvm)"):
        resolve("hdfs://127.0.0.1:1/wd", "work directory")


def test_store_kinds_and_their_commit_rules(tmp_path):
    """Local (also below a sub-tree) renames; pyarrow's mock filesystem is 'other'."""
    assert store_kind(LOCAL) == "local" and "rename" in commit_rule(LOCAL)
    assert store_kind(pafs.SubTreeFileSystem(str(tmp_path), LOCAL)) == "local"
    assert store_kind(pafs._MockFileSystem()) == "other"


@pytest.mark.parametrize("make", [
    lambda d: (LOCAL, str(d)),
    lambda d: (pafs.SubTreeFileSystem(str(d), LOCAL), "sub"),
    lambda d: (pafs._MockFileSystem(), "m"),
])
def test_publish_replaces_whole_and_leaves_no_temp(tmp_path, make):
    """publish() writes new content over old and leaves only the target in the directory."""
    fs, d = make(tmp_path)
    fs.create_dir(d, recursive=True)
    publish(fs, f"{d}/rec.json", b"old")
    publish(fs, f"{d}/rec.json", b"new content")
    with fs.open_input_stream(f"{d}/rec.json") as f:
        assert f.read() == b"new content"
    assert [fi.base_name for fi in fs.get_file_info(pafs.FileSelector(d))] == ["rec.json"]


def test_topics_work_on_a_mock_filesystem():
    """A topic on pyarrow's in-memory filesystem: two-part batch, consumers, retention."""
    fs = pafs._MockFileSystem()
    t = Topic.create("t", SCHEMA, time_column="ts", filesystem=fs)
    a = t.write_temp([_batch([1, 2])], producer="p", batch_id=0, part=0)
    b = t.write_temp([_batch([3])], producer="p", batch_id=0, part=1)
    assert [s.seq for s in t.commit_batch("p", 0, [a, b], watermark=3)] == [0, 1]
    t.append([_batch([4])], producer="p", batch_id=1, watermark=4)
    t.register_consumer("c")
    t.commit_consumer("c", 2)
    assert [s.seq for s in t.apply_retention()] == [0, 1]
    reopened = Topic.open("t", filesystem=fs)
    assert reopened.read_table().column("ts").to_pylist() == [4]
    assert reopened.consumers() == {"c": 2}


# -- S3 (moto server on loopback) ----------------------------------------------------------------

def test_s3_publish_is_one_put_with_no_temp_object(s3):
    """On an object store the small-file commit is a single PUT under the final name."""
    loc = resolve(f"{s3}/pub")
    assert loc.kind == "object" and "PUT" in commit_rule(loc.fs)
    loc.join("rec.json").publish(b"1")
    loc.join("rec.json").publish(b"22")
    assert [fi.base_name for fi in loc.list()] == ["rec.json"]
    assert loc.join("rec.json").read_bytes() == b"22"


def test_topic_on_s3_commits_reads_retains_and_detects_corruption(s3):
    """Every topic operation through s3://: multi-part commit, idempotent replay, markers,
    consumers, retention floor, and a truncated committed segment raising InputError."""
    uri = f"{s3}/topics/t"
    t = Topic.create(uri, SCHEMA, time_column="ts")
    a = t.write_temp([_batch([1, 2])], producer="p", batch_id=0, part=0)
    b = t.write_temp([_batch([3])], producer="p", batch_id=0, part=1)
    segs = t.commit_batch("p", 0, [a, b], watermark=3)
    assert [(s.seq, s.part, s.rows) for s in segs] == [(0, 0, 2), (1, 1, 1)]
    again = t.write_temp([_batch([1, 2])], producer="p", batch_id=0)
    assert [s.seq for s in t.commit_batch("p", 0, [again])] == [0, 1]  # replay: dropped
    t.append([_batch([4, 5])], producer="p", batch_id=1, watermark=5)
    t.append_marker(producer="p", batch_id=2, watermark=9, eos=True)
    t2 = Topic.open(uri)
    assert t2.read_table().column("ts").to_pylist() == [1, 2, 3, 4, 5]
    st = t2.status()
    assert (st.last_seq, st.watermark, st.eos) == (3, 9, True)
    assert t2.fs.get_file_info(pafs.FileSelector(t2.tmp_dir, allow_not_found=True)) == []
    t2.register_consumer("c")
    t2.commit_consumer("c", 2)
    assert [s.seq for s in t2.apply_retention()] == [0, 1]
    assert t2.read_table().column("ts").to_pylist() == [4, 5]
    seg = t2.segments()[0]
    with t2.fs.open_input_stream(seg.path) as f:
        data = f.read()
    with t2.fs.open_output_stream(seg.path) as f:
        f.write(data[:-8])  # drop the IPC end-of-stream marker
    with pytest.raises(InputError, match="is corrupt: the file is truncated"):
        Topic.open(uri).read_table()


def test_state_snapshots_on_s3(s3):
    """StateStore through s3://: newest snapshot before a batch, three kept."""
    from epic.spark.tasks import StateStore, node_marker

    from epic import serde

    st = StateStore(f"{s3}/state/w", 0)
    for b in range(5):
        st.save(b, serde.packb({"mark": 10 * b, "ended": b == 4}))
    assert serde.unpackb(st.load_before(3))["mark"] == 20
    assert sorted(fi.base_name for fi in st.fs.get_file_info(pafs.FileSelector(st.dir))) == \
        ["2.state", "3.state", "4.state"]
    assert node_marker(f"{s3}/state/w", 4) == (40, True)


def _topology(out_csv, out_parquet, out_topic, rows=500):
    t = epic.Topology("s3run")
    s = t.source("s", epic.iterator_source(
        [{"ts": i, "k": i % 7, "v": i * 0.5} for i in range(rows)],
        schema={"ts": "int64", "k": "int64", "v": "float64"}, time="ts", unit="s",
        batch_rows=64))
    w = t.window("w", s, epic.tumbling(10), key="k", late="drop",
                 aggregates=[epic.count("n"), epic.sum("v", name="sv")])
    t.sink("csv", w, epic.csv_sink(out_csv))
    t.sink("pq", w, epic.parquet_sink(out_parquet))
    t.sink("tp", w, epic.topic_sink(out_topic))
    return t


def test_epic_run_writes_file_and_topic_sinks_to_s3(s3, tmp_path):
    """epic run with CSV, Parquet and topic sinks on s3:// writes what it writes locally."""
    epic.run(_topology(f"{s3}/run/o.csv", f"{s3}/run/o.parquet", f"{s3}/run/t"))
    epic.run(_topology(str(tmp_path / "o.csv"), str(tmp_path / "o.parquet"),
                       str(tmp_path / "t")))
    fs = resolve(s3).fs
    bucket = resolve(s3).path
    with fs.open_input_stream(f"{bucket}/run/o.csv") as f:
        assert f.read() == (tmp_path / "o.csv").read_bytes()
    with fs.open_input_file(f"{bucket}/run/o.parquet") as f:
        assert pq.read_table(f).equals(pq.read_table(tmp_path / "o.parquet"))
    assert Topic.open(f"{s3}/run/t").read_table().equals(Topic.open(tmp_path / "t").read_table())
    back = epic.Topology("s3back")
    src = back.source("t", epic.topic_source(f"{s3}/run/t"))
    back.sink("out", src, epic.csv_sink(f"{s3}/run/back.csv"))
    epic.run(back)
    with fs.open_input_stream(f"{bucket}/run/back.csv") as f:
        rows = f.read().decode().splitlines()
    assert len(rows) - 1 == Topic.open(tmp_path / "t").read_table().num_rows > 0


def test_an_unreachable_bucket_is_refused_before_the_run(s3):
    """A sink in a bucket that does not exist fails the start checks (`epic run` / `epic
    deploy` run them before any node), naming the sink and the store's error."""
    from epic.errors import OutputError
    from epic.preflight import check_output_paths

    t = epic.Topology("nobucket")
    s = t.source("s", epic.iterator_source([{"ts": 1}], schema={"ts": "int64"}, time="ts",
                                           unit="s"))
    t.sink("out", s, epic.csv_sink("s3://no-such-bucket-epic/o.csv"))
    with pytest.raises(OutputError, match="sink 'out': the store cannot be written: .*bucket"):
        check_output_paths(t)


def test_epic_status_and_stop_take_an_s3_work_directory(s3):
    """`epic stop s3://...` puts the STOP object a deploy polls for (refused where no deploy
    is); `epic status s3://...` reads status.json."""
    from typer.testing import CliRunner

    from epic.cli import app

    wd = f"{s3}/status-wd"
    r = CliRunner().invoke(app, ["stop", wd])
    assert r.exit_code == 1 and "no deploy.json" in r.output
    loc = resolve(wd)
    loc.join("deploy.json").publish(b'{"id": "x"}')
    loc.join("status.json").publish(json.dumps(
        {"topology": "t", "state": "finished", "elapsed_s": 1.0, "nodes": {}}).encode())
    r = CliRunner().invoke(app, ["stop", wd])
    assert r.exit_code == 0, r.output
    assert loc.join("STOP").exists()
    r = CliRunner().invoke(app, ["status", wd, "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["state"] == "finished"


def test_s3_json_read_while_a_writer_replaces_it_is_never_cut(s3):
    """A reader polling a record that a writer keeps replacing (a sink's commit record while the
    driver watches for its end) gets whole documents, in order: a read cut to the size of the
    object it replaced is read again. A document that stays unreadable is reported corrupt."""
    import threading

    from epic.storage import read_small_json

    loc = resolve(f"{s3}/race").join("commit.json")
    loc.publish(json.dumps({"batch": 0, "pad": ""}).encode())
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            i += 1
            # Lengths go up and down, so a read straddling a replace is cut or overruns.
            loc.publish(json.dumps({"batch": i, "pad": "x" * (i * 7 % 61)}).encode())

    t = threading.Thread(target=writer)
    t.start()
    seen = []
    try:
        for _ in range(150):
            doc = read_small_json(loc.uri)
            assert isinstance(doc, dict) and set(doc) == {"batch", "pad"}
            seen.append(doc["batch"])
    finally:
        stop.set()
        t.join()
    assert seen == sorted(seen) and seen[-1] > 0

    loc.publish(b'{"batch": 3, "len')
    with pytest.raises(ValueError):
        loc.read_json()
    assert read_small_json(f"{s3}/race/absent.json") is None


def test_state_store_remembers_the_marker_summary_it_saved(tmp_path):
    """A local StateStore remembers the summary (watermark, end, last step) of the snapshot this
    process saved last, for the batch after it; another process (an empty cache), a file
    rewritten or deleted behind it, or another batch id read the files, with the same answers."""
    import os

    from epic import serde
    from epic.spark import tasks
    from epic.spark.tasks import StateStore, node_marker, partition_marker

    st = StateStore(str(tmp_path / "state" / "w"), 0)
    for b in range(3):
        st.save(b, serde.packb({"mark": 10 * b, "ended": False, "last_step": b}))
    assert st._warm(3) is not None and st._warm(2) is None
    assert st.summary_before(3) == (20, False, 2)
    assert st.summary_before(2) == (10, False, 1)               # from the file
    assert partition_marker(str(tmp_path / "state" / "w"), 0, 2) == (20, False)
    tasks._WARM.clear()                                          # another process's view
    assert st.summary_before(3) == (20, False, 2)
    assert serde.unpackb(st.load_before(3))["mark"] == 20
    # a snapshot file replaced behind this process's back is read from disk
    st.save(3, serde.packb({"mark": 30, "ended": True, "last_step": 3}))
    assert st.summary_before(4) == (30, True, 3)
    path = os.path.join(st.dir, "3.state")
    os.replace(path, path + ".x")
    with open(path, "wb") as f:
        f.write(serde.packb({"mark": 31, "ended": True, "last_step": 3}))
    os.remove(path + ".x")
    assert st._warm(4) is None
    assert st.summary_before(4) == (31, True, 3)
    assert node_marker(str(tmp_path / "state" / "w"), 3) == (31, True)
    os.remove(path)
    assert st.summary_before(4) == (20, False, 2)


def test_deferred_sync_syncs_every_file_and_directory_once_at_the_end(tmp_path, monkeypatch):
    """Inside ``deferred_sync`` a publish syncs nothing yet; at the end every published file
    (through the descriptor it had before its rename) and each directory once are synced; an
    exception syncs nothing, and every descriptor is closed either way."""
    import epic.storage as storage

    synced: list[tuple[int, int]] = []          # (inode, device) of each fsync
    real = os.fsync
    monkeypatch.setattr(storage.os, "fsync",
                        lambda fd: (synced.append(tuple(os.fstat(fd)[1:3])), real(fd))[1])
    ident = lambda p: (os.stat(p).st_ino, os.stat(p).st_dev)  # noqa: E731
    open_fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    before = open_fds()
    (tmp_path / "other").mkdir()
    with storage.deferred_sync():
        for i in range(4):
            publish(LOCAL, str(tmp_path / f"s{i}.state"), b"x" * (i + 1))
        with storage.deferred_sync():                 # a nested block joins the outer one
            publish(LOCAL, str(tmp_path / "other" / "t.json"), b"{}")
        assert synced == []
    files = {ident(tmp_path / f"s{i}.state") for i in range(4)}
    files.add(ident(tmp_path / "other" / "t.json"))
    dirs = {ident(tmp_path), ident(tmp_path / "other")}
    assert sorted(synced) == sorted(files | dirs)     # each once: 5 files, 2 directories
    assert set(synced[:5]) == files                   # the files before the directories
    assert [(tmp_path / f"s{i}.state").read_bytes() for i in range(4)] == \
        [b"x" * (i + 1) for i in range(4)]
    assert open_fds() == before

    synced.clear()
    with pytest.raises(RuntimeError), storage.deferred_sync():
        publish(LOCAL, str(tmp_path / "void.state"), b"v")
        raise RuntimeError("task failed")
    assert synced == [] and open_fds() == before
    publish(LOCAL, str(tmp_path / "after.state"), b"a")  # outside a block: synced at once
    assert ident(tmp_path / "after.state") in synced


def test_s3_topic_records_read_while_replaced_are_never_cut(s3):
    """A topic's retention floor and its consumers' positions on S3, read while their writers
    replace them (records of changing length): every read is whole. A cut read failed a rerun
    with "unreadable retention record", and a cut consumer position was skipped, which would
    let retention delete segments that consumer still needed."""
    import threading

    from epic.topics import CONSUMERS_DIR, RETENTION_NAME

    topic = Topic.create(f"{s3}/race_topic", pa.schema([("ts", pa.int64())]), time_column="ts")
    root = resolve(f"{s3}/race_topic")
    floor, pos = root.join(RETENTION_NAME), root.join(CONSUMERS_DIR, "reader")
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            i += 1
            n = 9 if i % 2 else 10 ** (i % 5 + 1)   # 1 to 6 digits: lengths up and down
            floor.publish(json.dumps({"floor": n}).encode())
            pos.publish(json.dumps({"position": n}).encode())

    floor.publish(b'{"floor": 9}')
    pos.publish(b'{"position": 9}')
    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(40):
            assert topic._floor() > 0
            assert set(topic.consumers()) == {"reader"}
    finally:
        stop.set()
        t.join()


def test_a_record_cut_to_the_same_prefix_twice_is_read_again(tmp_path, monkeypatch):
    """On an object store a record replaced over and over can be read cut to the same prefix
    by two different versions (``{"position": 10`` of 100 and of 1000): that is a cut, read
    again, not corruption; a document that parses wrong before its end, twice alike, is."""
    import time as _time

    from epic.storage import Location

    loc = Location(pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()), "p.json",
                   "mem://p.json")
    assert not loc.is_local
    reads = []

    def fake(self):
        return reads.pop(0)

    monkeypatch.setattr(Location, "read_bytes", fake)
    monkeypatch.setattr(_time, "sleep", lambda s: None)
    reads[:] = [b'{"position": 10', b'{"position": 10', b'{"position": 10', b'{"position": 100}']
    assert loc.read_json() == {"position": 100}
    reads[:] = [b'{"position": 1x}', b'{"position": 1x}', b'{"position": 2}']
    with pytest.raises(ValueError):
        loc.read_json()
    assert reads == [b'{"position": 2}']           # corrupt after two equal reads
    reads[:] = [b'{"pos'] * 8
    with pytest.raises(ValueError):               # cut every time: corrupt after eight reads
        loc.read_json()
    assert reads == []
