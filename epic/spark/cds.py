"""A class archive of Spark's JVM (AppCDS), so that a deploy's session starts faster.

Starting the driver JVM and its SparkContext took 5.3-6.1 s of a DEBS deploy on this 2-core
machine, most of it loading and verifying some ten thousand classes from 250 jars (in a JFR
profile, 62 % of the JVM's Java samples fell in its first ten seconds, a quarter of all of them
in jar lookups, ``ZipFile.getEntry``). Java's
class data sharing maps classes from an archive instead. :func:`epic.spark.cds_setup.main` (``python -m
epic.spark.cds_setup``, run by ``scripts/setup``) writes one: a small warm-up deploy in a child process
whose JVM runs with ``-XX:ArchiveClassesAtExit`` and writes the archive as it exits; it is then
renamed into place. A deploy that starts a local session adds ``-XX:SharedArchiveFile``
(:func:`cds_options`): a DEBS 2-minute deploy's session took 3.0 s instead of 5.3-5.8 s
(docs/deploy.md, "The JVM's class archive"). A deploy never writes an archive itself: recording
what its JVM loads slowed its start by 3.5 s, and the dump takes 5-6 s.

The archive lives in ``$XDG_CACHE_HOME/epic/jvm`` (``~/.cache/epic/jvm``), one per Java, Spark
jars and JVM flags (:func:`archive_key`). It is an optimisation only: the JVM checks that the
archive matches its class path and Java, and starts without it otherwise (its ``cds`` log is
off, so this is silent). Not used: a master other than ``local`` (its driver may run
elsewhere), a session already running in this process, JVM options of the user's that choose an
archive (``Xshare``, ``SharedArchiveFile``, ``ArchiveClassesAtExit``,
``RecordDynamicDumpInfo``), no archive for the key, a cache path with blanks, and
``EPIC_JVM_CDS=0``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys

__all__ = ["cds_options", "archive_path", "archive_key", "cache_dir", "CDS_ENV", "DUMP_TIMEOUT"]

#: ``EPIC_JVM_CDS=0`` turns the class archive off.
CDS_ENV = "EPIC_JVM_CDS"

#: JVM options that leave the archive to the user
_USER_OPTIONS = ("Xshare", "SharedArchiveFile", "ArchiveClassesAtExit", "RecordDynamicDumpInfo")

#: the JVM's CDS log: off, so that an archive that does not match is dropped silently
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

#: seconds the warm-up deploy, and then its JVM's exit writing the archive, may each take
DUMP_TIMEOUT = 120


def cache_dir() -> str:
    """``$XDG_CACHE_HOME/epic/jvm`` (default ``~/.cache/epic/jvm``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "epic", "jvm")


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def archive_key(conf: dict) -> str | None:
    """A name for the archive of a JVM that ``conf`` would start: a hash of the ``java`` binary
    (path, size, mtime), pyspark's version, jars' directory and jar files, and the settings
    that change the class path or the JVM's flags (``-D`` properties aside). None without
    Java."""
    java = _java()
    if java is None:
        return None
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    h = hashlib.sha256()
    st = os.stat(java)
    # the jars' directory too: the archive records the class path, and a JVM whose class path
    # differs (another virtual environment) does not use it
    h.update(f"{java}|{st.st_size}|{st.st_mtime_ns}|{pyspark.__version__}|{jars}|".encode())
    try:
        for name in sorted(os.listdir(jars)):
            h.update(f"{name}:{os.path.getsize(os.path.join(jars, name))}|".encode())
    except OSError:
        pass
    for k in ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath",
              "spark.driver.memory"):
        h.update(f"{k}={conf.get(k, '')}|".encode())
    flags = [o for o in str(conf.get("spark.driver.extraJavaOptions", "")).split()
             if not o.startswith("-D")]
    h.update(" ".join(flags).encode())
    return h.hexdigest()[:20]


def cds_options(master: str | None, conf: dict, running: bool) -> dict:
    """``conf`` with the JVM options that start the driver JVM from this machine's class archive
    when there is one (:func:`archive_path`), or that write one at the JVM's exit
    (``EPIC_JVM_CDS=record:<path>``: the warm-up deploy of :mod:`epic.spark.cds_setup`)."""
    mode = os.environ.get(CDS_ENV, "1").strip()
    if mode.lower() in ("0", "false", "no", "off"):
        return conf
    if running or (master and not master.startswith("local")):
        return conf
    given = str(conf.get("spark.driver.extraJavaOptions", ""))
    if any(o in given or o in os.environ.get("JAVA_TOOL_OPTIONS", "") for o in _USER_OPTIONS):
        return conf
    if mode.startswith("record:"):
        path = mode[len("record:"):]
        opt = f"-XX:ArchiveClassesAtExit={path}"
    else:
        path = archive_path(conf)
        if path is None or not os.path.isfile(path):
            return conf
        opt = f"-XX:SharedArchiveFile={path}"
    if any(c.isspace() for c in path):   # Spark splits the JVM options at blanks
        return conf
    conf = dict(conf)
    conf["spark.driver.extraJavaOptions"] = f"{given} {opt} {_QUIET}".strip()
    return conf


def archive_path(conf: dict) -> str | None:
    """Where the class archive of a JVM that ``conf`` would start is (None without Java)."""
    key = archive_key(conf)
    return None if key is None else os.path.join(cache_dir(), f"{key}.jsa")
