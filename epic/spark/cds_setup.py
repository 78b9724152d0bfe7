"""Write this machine's class archive for ``epic deploy``'s driver JVM (:mod:`epic.spark.cds`):
``python -m epic.spark.cds_setup``, run by ``scripts/setup``.

A child process runs a small warm-up deploy whose JVM has ``-XX:ArchiveClassesAtExit`` (so it
loads the classes a deploy loads, and writes them as it exits); the archive is then renamed into
place, so that a deploy starting meanwhile sees the whole archive or none.
"""

from __future__ import annotations

import os
import subprocess
import sys

from epic.spark.cds import CDS_ENV, DUMP_TIMEOUT, archive_path

__all__ = ["main", "deploy_conf"]


def deploy_conf() -> dict:
    """The JVM settings ``epic deploy`` gives a local session it starts (see
    ``runtime.local_jit``)."""
    from epic.spark.runtime import local_jit

    return local_jit(None, {})


def _warm(workdir: str) -> None:
    """The warm-up deploy (run in a child process by :func:`main`): a small keyed window topology
    from an iterator source to a Parquet sink, fused, so that the JVM loads what a deploy loads;
    prints the JVM's pid. The JVM writes its archive when this process has exited."""
    import numpy as np
    import pyarrow as pa

    from epic.aggregates import mean
    from epic.sinks import parquet_sink
    from epic.sources import iterator_source
    from epic.spark.runtime import deploy
    from epic.topology import Topology
    from epic.windows import few_time

    def rows():
        rng = np.random.default_rng(0)
        for i in range(4):
            n = 5000
            yield pa.table({"k": rng.integers(0, 8, n), "t": np.arange(i * n, (i + 1) * n) * 10,
                            "v": rng.random(n)})

    t = Topology("jvm_warm_up")
    src = t.source("readings", iterator_source(rows, schema=pa.schema(
        [("k", pa.int64()), ("t", pa.int64()), ("v", pa.float64())]), time="t", unit="ms"))
    w = t.window("avg", src, few_time(10, 1, 1), key="k", aggregates=[mean("v")])
    t.sink("out", w, parquet_sink(os.path.join(workdir, "out.parquet")))
    deploy(t, os.path.join(workdir, "work"), fuse=True)
    from pyspark import SparkContext

    print(int(SparkContext._active_spark_context._jvm.java.lang.ProcessHandle.current().pid()),
          flush=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m epic.spark.cds_setup``: write this machine's class archive for ``epic deploy``'s
    driver JVM, unless it is there already (``scripts/setup`` runs it). Exit status 0 when the
    archive exists afterwards."""
    import tempfile
    import time

    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--warm"]:
        _warm(args[1])
        return 0
    if os.environ.get(CDS_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        print(f"epic: {CDS_ENV}=0, no JVM class archive", file=sys.stderr)
        return 0
    path = archive_path(deploy_conf())
    if path is None:
        print("epic: no java found, no JVM class archive", file=sys.stderr)
        return 1
    if os.path.isfile(path):
        print(f"epic: the JVM class archive is there: {path}", file=sys.stderr)
        return 0
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="epic-jvm-warm-") as wd:
        env = {**os.environ, CDS_ENV: f"record:{tmp}"}
        try:
            out = subprocess.run([sys.executable, "-m", "epic.spark.cds_setup", "--warm", wd],
                                 env=env, capture_output=True, text=True, timeout=DUMP_TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"epic: the warm-up deploy took over {DUMP_TIMEOUT} s, no JVM class archive",
                  file=sys.stderr)
            return 1
        pid = None
        for line in out.stdout.split():
            if line.strip().isdigit():
                pid = int(line)
        if out.returncode != 0 or pid is None:
            print(f"epic: the warm-up deploy failed (exit {out.returncode}), no JVM class "
                  f"archive:\n{out.stderr[-2000:]}", file=sys.stderr)
            return 1
        # the JVM writes the archive as it exits, after the warm-up process has ended
        deadline = time.monotonic() + DUMP_TIMEOUT
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                pass
            time.sleep(0.1)
    if not os.path.isfile(tmp) or os.path.getsize(tmp) == 0:
        print("epic: the JVM wrote no class archive (its Java may lack class data sharing)",
              file=sys.stderr)
        try:
            os.remove(tmp)
        except OSError:
            pass
        return 1
    os.replace(tmp, path)
    print(f"epic: wrote the JVM class archive in {time.monotonic() - t0:.1f} s: {path} "
          f"({os.path.getsize(path) / 2**20:.0f} MiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
