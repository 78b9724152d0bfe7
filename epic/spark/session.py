"""The one SparkSession a deploy shares, configured as measured in ``docs/spark-notes.md``.

Also :func:`freeze_gc_once`, which every Python function epic runs inside Spark workers (UDFs,
topic readers and writers) calls first.
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
from typing import Mapping

from epic.errors import EpicError

__all__ = ["build_session", "check_java", "freeze_gc_once", "session_conf", "MIN_JAVA"]

#: Oldest Java that Spark 4 runs on.
MIN_JAVA = 17

_CHECKPOINT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
_ROCKSDB_PROVIDER = (
    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
)


def check_java(min_version: int = MIN_JAVA) -> int:
    """Return the major version of the Java that Spark will start, or explain how to get one.

    Spark uses ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set, else ``java`` on ``PATH``.

    Raises:
        EpicError: Java is missing or older than ``min_version``.
    """
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    fix = (f"epic deploy runs on Apache Spark, which needs Java {min_version} or newer. Install one"
           " (e.g. `sudo apt-get install -y openjdk-17-jre-headless`, or run scripts/setup) and"
           " put it on PATH or set JAVA_HOME.")
    if not java or not os.path.exists(java):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no `java` on PATH"
        raise EpicError(f"Java not found ({where}). {fix}")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EpicError(f"could not run {java} -version: {e}. {fix}") from e
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        raise EpicError(f"could not read the Java version from {java} -version. {fix}")
    major = int(m.group(2)) if m.group(1) == "1" else int(m.group(1))  # "1.8" is Java 8
    if major < min_version:
        raise EpicError(f"{java} is Java {major}, too old. {fix}")
    return major


def session_conf(*, shuffle_partitions: int = 2, max_records_per_batch: int = 1_000_000,
                 ui: bool = False, rocksdb: bool = True) -> dict[str, str]:
    """The Spark settings epic uses, as a dict (for a ``spark-submit`` or a cluster's defaults).

    Args:
        shuffle_partitions: ``spark.sql.shuffle.partitions``. Small, because each partition costs
            a task per micro-batch; it is frozen into a stateful query's checkpoint at first start.
        max_records_per_batch: Arrow batch size for Python UDFs; at least the topic batch size, so
            that ``mapInArrow`` sees whole topic batches.
        ui: Start the Spark UI (costs memory and start-up time).
        rocksdb: Use the RocksDB state store (``transformWithStateInPandas`` requires it).
    """
    conf = {
        # Without the native Hadoop library the default manager forks readlink/chmod processes
        # per checkpoint file: ~160 ms per batch, against 30-50 ms with this one.
        "spark.sql.streaming.checkpointFileManagerClass": _CHECKPOINT_MANAGER,
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(max_records_per_batch),
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        # Python workers are reused across tasks; that is what makes gc.freeze() pay off.
        "spark.python.worker.reuse": "true",
        "spark.sql.session.timeZone": "UTC",
    }
    if rocksdb:
        conf["spark.sql.streaming.stateStore.providerClass"] = _ROCKSDB_PROVIDER
    return conf


def build_session(master: str | None = None, *, app_name: str = "epic", ui: bool = False,
                  shuffle_partitions: int = 2, max_records_per_batch: int = 1_000_000,
                  rocksdb: bool = True, conf: Mapping[str, str] | None = None,
                  log_level: str = "WARN"):
    """Get or create the shared SparkSession with epic's settings, and register topic I/O.

    Args:
        master: Spark master URL; default ``local[*]``. Any URL works (``spark://``, ``yarn``,
            ``k8s://``...); topics and checkpoints must then be on storage every executor sees.
        app_name: Spark application name.
        ui: Start the Spark UI.
        shuffle_partitions: See :func:`session_conf`.
        max_records_per_batch: See :func:`session_conf`.
        rocksdb: See :func:`session_conf`.
        conf: Extra Spark settings; they override epic's.
        log_level: Spark's log level.

    Returns:
        The ``pyspark.sql.SparkSession``, with the ``epic_topic`` data source registered.

    Raises:
        EpicError: Java is missing or too old (checked before the JVM is started).
    """
    # Workers must run this interpreter (the venv with epic), not whatever `python3` is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is None:
        check_java()
    builder = SparkSession.builder.master(master or "local[*]").appName(app_name)
    settings = session_conf(shuffle_partitions=shuffle_partitions,
                            max_records_per_batch=max_records_per_batch, ui=ui, rocksdb=rocksdb)
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    from epic.spark.topic_source import register

    register(spark)
    return spark


_frozen = False


def freeze_gc_once() -> None:
    """Call ``gc.freeze()`` once per process; cheap to call on every task.

    PySpark workers run a full ``gc.collect()`` after every task, which walks every object the
    worker has ever imported (pyspark, pyarrow, numpy...). Moving what exists at the first call into
    the permanent generation takes it out of those walks; with the checkpoint manager setting this
    halved the fixed cost per micro-batch. Objects created later are still collected normally.
    """
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()
