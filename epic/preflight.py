"""Checks a runtime makes on a topology before anything runs (``epic run`` and ``epic deploy``)."""

from __future__ import annotations

import os

from .errors import OutputError
from .paths import is_remote
from .sinks import CsvSink, ParquetSink, TopicSink
from .sources import CsvSource
from .topology import SinkNode, SourceNode

__all__ = ["check_output_paths"]


def _probe_dir(d: str, what: str) -> None:
    """Create directory ``d`` if needed and write and delete a probe file in it."""
    import uuid

    try:
        os.makedirs(d, exist_ok=True)
        probe = os.path.join(d, f".epic-probe-{uuid.uuid4().hex}")
        with open(probe, "wb") as f:
            f.write(b"x")
        os.remove(probe)
    except OSError as exc:
        raise OutputError(d, exc, what=f"{what}: the directory cannot be written",
                          fix="create it or fix its permissions, or choose another path") from None


def _probe_remote(uri: str, what: str, *, directory: bool) -> None:
    """Resolve a remote output (a store pyarrow cannot reach here is refused with the reason) and
    write and delete a probe object beside it (or in it, for a topic directory)."""
    import uuid

    from .storage import resolve

    loc = resolve(uri, what)  # SpecError: the scheme's store cannot be loaded here, and why
    d = loc if directory else loc.parent()
    try:
        if not directory and loc.is_dir():
            raise OutputError(uri, "it is a directory", what=what, fix="give a file path")
        probe = d.join(f".epic-probe-{uuid.uuid4().hex}")
        probe.publish(b"x")
        probe.delete()
    except OSError as exc:
        raise OutputError(uri, exc, what=f"{what}: the store cannot be written",
                          fix="check the endpoint, credentials and permissions (for S3: "
                              "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID...), or choose another "
                              "path") from None


def check_output_paths(topology) -> None:
    """Refuse, before anything runs, a topology whose output directories cannot be written:
    every CSV / Parquet / topic sink's directory (and a file sink's ``.epic`` commit directory
    used by ``epic deploy``), and every lenient CSV source's dead-letter directory. A remote
    output (``s3://``...) is resolved here, so a store pyarrow cannot reach is refused at start
    with the reason, and a probe object is written and deleted beside it.

    Raises:
        OutputError: naming the node and the directory.
    """
    for n in topology.topological_order():
        if isinstance(n, SinkNode) and isinstance(n.sink, (CsvSink, ParquetSink, TopicSink)) \
                and is_remote(n.sink.path):
            _probe_remote(n.sink.path, f"sink {n.name!r}", directory=isinstance(n.sink, TopicSink))
        elif isinstance(n, SinkNode) and isinstance(n.sink, (CsvSink, ParquetSink)):
            path = os.path.abspath(n.sink.path)
            if os.path.isdir(path):
                raise OutputError(path, "it is a directory", what=f"sink {n.name!r}",
                                  fix="give a file path")
            _probe_dir(os.path.dirname(path), f"sink {n.name!r}")
        elif isinstance(n, SinkNode) and isinstance(n.sink, TopicSink):
            _probe_dir(os.path.abspath(n.sink.path), f"sink {n.name!r}")
        elif isinstance(n, SourceNode) and isinstance(n.source, CsvSource) \
                and n.source.dead_letter:
            _probe_dir(os.path.dirname(os.path.abspath(n.source.dead_letter)),
                       f"source {n.name!r} (dead-letter file)")
