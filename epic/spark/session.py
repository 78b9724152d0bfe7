"""The one SparkSession a deploy shares, configured as measured in ``docs/spark-notes.md``.

Also :func:`prepare_worker`, which every Python function epic runs inside Spark workers (UDFs,
topic readers and writers) calls first.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Mapping

from epic.errors import EpicError

__all__ = ["build_session", "check_java", "session_conf", "MIN_JAVA",
           "LOG4J2_PROPERTIES", "log_config_file", "quiet_spark_logs"]

#: Oldest Java that Spark 4 runs on.
MIN_JAVA = 17

_CHECKPOINT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
_ROCKSDB_PROVIDER = (
    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
)


#: Spark's JVM log configuration (log4j2): Spark's defaults at WARN, minus the warnings that every
#: epic deploy triggers by design. Errors (failed tasks and queries) and other warnings stay.
LOG4J2_PROPERTIES = """\
# Spark's JVM logging under epic (written and passed with -Dlog4j2.configurationFile by
# epic.spark.session.build_session). Spark's defaults at WARN, minus the warnings every epic
# deploy triggers by design; errors (failed tasks, failed queries) are still shown.

rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console

appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex

# "Current batch is falling behind. The trigger interval is 100 milliseconds, but spent ..."
# (every slow micro-batch of every query; epic's trigger is short on purpose).
logger.behind.name = org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor
logger.behind.level = error
logger.behind_old.name = org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor
logger.behind_old.level = error

# "spark.sql.adaptive.enabled is not supported in streaming DataFrames/Datasets and will be
# disabled." (once per query start).
logger.aqe.name = org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream
logger.aqe.level = error
logger.aqe_old.name = org.apache.spark.sql.execution.streaming.ResolveWriteToStream
logger.aqe_old.level = error

# "Note that spark.local.dir will be overridden by the value set by the cluster manager (via
# SPARK_LOCAL_DIRS ...)": epic sets spark.local.dir for the sessions it starts (its driver-local
# scratch space, docs/deploy.md); only this line of SparkConf is dropped.
logger.sparkconf.name = org.apache.spark.SparkConf
logger.sparkconf.level = warn
logger.sparkconf.filter.localdir.type = RegexFilter
logger.sparkconf.filter.localdir.regex = .*spark.local.dir will be overridden.*
logger.sparkconf.filter.localdir.onMatch = DENY
logger.sparkconf.filter.localdir.onMismatch = NEUTRAL

# "Unable to load native-hadoop library for your platform... using builtin-java classes".
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error

# "Your hostname, X, resolves to a loopback address ..." / "Set SPARK_LOCAL_IP if you need to
# bind to another address": only these two lines of Utils are dropped.
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = warn
logger.utils.filter.loopback.type = RegexFilter
logger.utils.filter.loopback.regex = .*(resolves to a loopback address|Set SPARK_LOCAL_IP).*
logger.utils.filter.loopback.onMatch = DENY
logger.utils.filter.loopback.onMismatch = NEUTRAL

# "Stage N contains a task of very large size (... KiB)": source items travel inside their input
# partitions by design (docs/deploy.md). Other TaskSetManager warnings (lost tasks) stay.
logger.tasksize.name = org.apache.spark.scheduler.TaskSetManager
logger.tasksize.level = warn
logger.tasksize.filter.large.type = RegexFilter
logger.tasksize.filter.large.regex = .*contains a task of very large size.*
logger.tasksize.filter.large.onMatch = DENY
logger.tasksize.filter.large.onMismatch = NEUTRAL

# "Failed to cancel job group ... Cannot find active jobs for it." (every query stopped while idle,
# i.e. all of them when a deploy finishes).
logger.cancel.name = org.apache.spark.scheduler.DAGScheduler
logger.cancel.level = warn
logger.cancel.filter.idle.type = RegexFilter
logger.cancel.filter.idle.regex = .*Failed to cancel job group.*Cannot find active jobs.*
logger.cancel.filter.idle.onMatch = DENY
logger.cancel.filter.idle.onMismatch = NEUTRAL

# As in Spark's defaults.
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.jetty2.name = org.sparkproject.jetty.util.component.AbstractLifeCycle
logger.jetty2.level = error
logger.parquet.name = org.apache.parquet.CorruptStatistics
logger.parquet.level = error
logger.parquet2.name = parquet.CorruptStatistics
logger.parquet2.level = error
"""

#: Loggers set to ERROR when the JVM already runs without :data:`LOG4J2_PROPERTIES`.
QUIET_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
    "org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor",
    "org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream",
    "org.apache.spark.sql.execution.streaming.ResolveWriteToStream",
    "org.apache.hadoop.util.NativeCodeLoader",
)


def log_config_file() -> str:
    """:data:`LOG4J2_PROPERTIES` as a file (in the temp directory, named by its hash)."""
    import hashlib
    import tempfile

    digest = hashlib.sha1(LOG4J2_PROPERTIES.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"epic-log4j2-{digest}.properties")
    if not os.path.exists(path):
        from epic.atomic import atomic_write

        atomic_write(path, LOG4J2_PROPERTIES.encode())
    return path


def quiet_spark_logs(spark) -> None:
    """Set :data:`QUIET_LOGGERS` to ERROR in ``spark``'s JVM (for a JVM started without epic's
    log configuration; a no-op for the ones that have it)."""
    try:
        jvm = spark.sparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.ERROR
        for name in QUIET_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
    except Exception:  # noqa: BLE001 - logging set-up must never stop a deploy
        pass


def quiet_accumulator_server(spark) -> None:
    """Keep pyspark's accumulator server from printing a traceback when its connection from the
    JVM ends without a word (``EOFError``; the JVM stopped or died, as at ``epic stop``); other
    errors are printed as before."""
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is None or getattr(server, "_epic_quiet", False):
        return
    printed = server.handle_error

    def handle_error(request, client_address):
        # socketserver calls it inside the except block of the failed request
        if isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
            return
        printed(request, client_address)

    server.handle_error = handle_error
    server._epic_quiet = True


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
        # The driver reads every query's recent progress for the status document; Spark keeps
        # 100 entries per query by default, each crossing py4j as JSON on every read.
        "spark.sql.streaming.numRecentProgressUpdates": "20",
    }
    if rocksdb:
        conf["spark.sql.streaming.stateStore.providerClass"] = _ROCKSDB_PROVIDER
    return conf


def build_session(master: str | None = None, *, app_name: str = "epic", ui: bool = False,
                  shuffle_partitions: int = 2, max_records_per_batch: int = 1_000_000,
                  rocksdb: bool = True, conf: Mapping[str, str] | None = None,
                  log_level: str = "WARN", quiet: bool = True, slots: int | None = None):
    """Get or create the shared SparkSession with epic's settings, and register topic I/O.

    Args:
        master: Spark master URL; default ``local[*]`` (``local[slots]`` with ``slots``). Any
            URL works (``spark://``, ``yarn``, ``k8s://``...); topics and checkpoints must then
            be on storage every executor sees.
        app_name: Spark application name.
        ui: Start the Spark UI.
        shuffle_partitions: See :func:`session_conf`.
        max_records_per_batch: See :func:`session_conf`.
        rocksdb: See :func:`session_conf`.
        conf: Extra Spark settings; they override epic's.
        log_level: Spark's log level.
        quiet: Start the JVM with :data:`LOG4J2_PROPERTIES` (no "falling behind", "adaptive
            ... not supported in streaming", native-hadoop, loopback or large-task warnings);
            a ``spark.driver.extraJavaOptions`` in ``conf`` is kept, after it (one that sets
            ``-Dlog4j2.configurationFile`` itself replaces it).
        slots: task slots of the default local master (None: one per core); ignored when
            ``master`` is given or a session is already running.

    Returns:
        The ``pyspark.sql.SparkSession``, with the ``epic_topic`` data source registered.

    Raises:
        EpicError: Java is missing or too old (checked before the JVM is started); a session
            on another master is already running in this process (``master`` given).
    """
    # Workers must run this interpreter (the venv with epic), not whatever `python3` is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is None:
        check_java()
    elif master and active.sparkContext.master != master:
        # getOrCreate would hand back the running session: the work would silently run on
        # the other master (e.g. local instead of the cluster that was asked for)
        raise EpicError(f"a Spark session on master {active.sparkContext.master!r} is already "
                        f"running in this process, so master {master!r} cannot take effect: "
                        "stop it first (spark.stop()), or pass that session (deploy(spark=...))")
    local = f"local[{int(slots)}]" if slots else "local[*]"
    builder = SparkSession.builder.master(master or local).appName(app_name)
    settings = session_conf(shuffle_partitions=shuffle_partitions,
                            max_records_per_batch=max_records_per_batch, ui=ui, rocksdb=rocksdb)
    settings.update(conf or {})
    given = settings.get("spark.driver.extraJavaOptions", "")
    if quiet and "log4j2.configurationFile" not in given:
        settings["spark.driver.extraJavaOptions"] = \
            f"-Dlog4j2.configurationFile=file:{log_config_file()} {given}".rstrip()
    for k, v in settings.items():
        builder = builder.config(k, v)
    if active is None:
        # Its imports overlap the JVM's start (see epic.spark.zygote; used by the launcher).
        from epic.spark import zygote

        zygote.prestart(master)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    if quiet:
        quiet_spark_logs(spark)
    quiet_accumulator_server(spark)
    from epic.spark.topic_source import register

    register(spark)
    return spark
