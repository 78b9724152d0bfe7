"""What `epic deploy` ships to executors and what `epic pack` packs (no JVM; the cluster test
runs them for real)."""

from __future__ import annotations

import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from epic.cli import load_topology
from epic.errors import EpicError
from epic.spark import ship

ROOT = Path(__file__).resolve().parents[2]


def test_py_files_hold_epic_and_the_topologys_local_packages(tmp_path):
    """debs2013's topology imports the debs2013 package (local: not in site-packages): it goes
    to topology.zip with the modules beside the file; epic goes to epic.zip, and only there."""
    t = load_topology(ROOT / "topologies" / "debs2013.py")
    epic_zip, topo_zip = ship.build_py_files(t, str(tmp_path))
    assert Path(epic_zip) == tmp_path / "ship" / "epic.zip"
    with zipfile.ZipFile(epic_zip) as z:
        names = z.namelist()
    assert "epic/__init__.py" in names and "epic/spark/ship.py" in names
    assert not any(n.endswith(".pyc") for n in names)
    with zipfile.ZipFile(topo_zip) as z:
        names = set(z.namelist())
    assert {"debs2013/__init__.py", "debs2013/q1.py", "debs2013/dataflow.py"} <= names
    assert "sensor_averages.py" in names          # beside the topology file
    assert "debs2013.py" not in names             # the file itself: pickled by value
    assert not any(n.startswith(("epic/", "pyarrow/", "numpy/")) for n in names)
    assert "debs2013" in ship.local_modules(t)


def test_session_settings_name_the_zips_and_the_archive(tmp_path):
    """pyFiles always; with an archive: spark.archives #environment, the bare interpreter name
    for both sides, the executors' PATH starting with the archive's bin/ and the driver's shim."""
    t = load_topology(ROOT / "topologies" / "sensor_averages.py")
    conf, env = ship.session_settings(t, str(tmp_path))
    assert conf == {"spark.submit.pyFiles": f"{tmp_path}/ship/epic.zip,{tmp_path}/ship/topology.zip"}
    assert env == {}
    archive = tmp_path / "env.tar.gz"
    archive.write_bytes(b"")
    conf, env = ship.session_settings(t, str(tmp_path), archive=str(archive),
                                      conf={"spark.archives": "/x/other.zip#o"})
    assert conf["spark.archives"] == f"{archive}#environment,/x/other.zip#o"
    assert conf["spark.executorEnv.PATH"].startswith("environment/bin:")
    assert env["PYSPARK_PYTHON"] == ship.PYTHON_NAME
    shim = tmp_path / "ship" / "bin" / ship.PYTHON_NAME
    assert env["PATH"].startswith(str(shim.parent) + ":")
    assert shim.read_text().startswith("#!/bin/sh\nexec ")
    with pytest.raises(EpicError, match="no such file"):
        ship.session_settings(t, str(tmp_path), archive=str(tmp_path / "missing.tar.gz"))
    (tmp_path / "env.zip").write_bytes(b"")
    with pytest.raises(EpicError, match=r"\.tar\.gz"):
        ship.session_settings(t, str(tmp_path), archive=str(tmp_path / "env.zip"))


def test_local_master_without_archive_ships_nothing(tmp_path):
    """local[*]: the Python workers are this environment already."""
    t = load_topology(ROOT / "topologies" / "sensor_averages.py")
    assert ship.shipping(t, str(tmp_path), master="local[2]", archive=None,
                         conf={"a": "1"}) == {"a": "1"}
    assert not (tmp_path / "ship").exists()


def test_pack_distributions_exclude_epic_and_spark():
    """epic's run-time requirements, transitively; never epic, pyspark or py4j by default."""
    names = ship.runtime_distributions()
    assert {"pyarrow", "numpy", "pandas", "msgpack", "python-dateutil"} <= set(names)
    assert not {"epic", "pyspark", "py4j", "pytest"} & set(names)
    assert "pytest" in ship.runtime_distributions(["pytest"])
    with pytest.raises(EpicError, match="no such distribution"):
        ship.runtime_distributions(["no-such-dist-x"])


def test_pack_writes_a_venv_layout(tmp_path):
    """A small pack (--exclude the heavy ones): pyvenv.cfg, bin/python -> the base interpreter,
    bin/epic-python -> python, the packages under lib/pythonX.Y/site-packages; .zip refused."""
    heavy = ["pyspark", "py4j", "pyarrow", "numpy", "pandas", "pygments", "protobuf",
             "pydantic-core", "tzdata", "pytz"]
    r = ship.pack(str(tmp_path / "e.tar.gz"), exclude=heavy)
    assert "msgpack" in r.distributions and not set(heavy) & set(r.distributions)
    with tarfile.open(r.path) as tar:
        m = {x.name: x for x in tar.getmembers()}
    assert m["bin/python"].issym() and m["bin/python"].linkname == r.python
    assert m[f"bin/{ship.PYTHON_NAME}"].linkname == "python"
    assert "pyvenv.cfg" in m
    assert any(n.startswith("lib/python3.") and "/site-packages/msgpack/" in n for n in m)
    assert ship.archive_python(r.path) == r.python
    with pytest.raises(EpicError, match=r"\.tar\.gz"):
        ship.pack(str(tmp_path / "e.zip"))


def test_a_slim_pack_leaves_out_test_suites_and_build_files():
    """By default the packed files of a distribution leave out its tests/ directories, C headers
    and sources and Cython files (nothing imports them at run time); numpy.testing, a public
    module, and the compiled extensions stay; --full keeps everything."""
    import sysconfig

    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    numpy = ship._distributions()["numpy"]
    slim = ship._dist_files(numpy, site)
    full = ship._dist_files(numpy, site, slim=False)
    assert set(slim) < set(full)
    left = set(full) - set(slim)
    assert any("/tests/" in f for f in left) and any(f.endswith(".h") for f in left)
    assert all("/tests/" in f or f.endswith((".h", ".hpp", ".pyx", ".pxd", ".pxi", ".c", ".cc",
                                             ".cpp")) for f in left)
    assert not any(os.sep + "tests" + os.sep in f for f in slim)
    assert os.path.join("numpy", "testing", "__init__.py") in slim
    assert os.path.join("numpy", "__init__.py") in slim
    assert any(f.endswith(".so") for f in slim)


def test_the_debs_topology_pickles_with_its_package_shipped_by_value():
    """`epic deploy topologies/debs2013.py` from a shell pickles the debs2013 package by value
    (not importable on the workers' path); every node must pickle so (a Python 3.11
    ``functools.cached_property`` holds a lock: once, the deploy failed in Spark's broadcast)."""
    import sys

    from pyspark import cloudpickle

    t = load_topology(ROOT / "topologies" / "debs2013.py")
    mods = [sys.modules[m] for m in sorted(sys.modules)
            if m == "debs2013" or m.startswith("debs2013.")]
    assert mods
    for m in mods:
        cloudpickle.register_pickle_by_value(m)
    try:
        ship.check_picklable(t)
    finally:
        for m in mods:
            cloudpickle.unregister_pickle_by_value(m)


def test_a_node_holding_a_lock_is_named_before_spark_pickles_it():
    import threading

    import pyarrow as pa

    import epic
    from epic.topology import Topology

    lock = threading.Lock()

    def keep(b):
        with lock:
            return b

    t = Topology("t")
    s = t.source("src", epic.iterator_source([], schema={"ts": "int64"}, time="ts", unit="ms"))
    t.map("locked", s, keep, schema=pa.schema([("ts", pa.int64())]))
    with pytest.raises(EpicError, match=r"node 'locked' cannot be shipped.*lock"):
        ship.check_picklable(t)
