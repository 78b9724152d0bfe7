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
        if isinstance(n, SourceNode):
            extra = [("dead-letter file", getattr(n.source, "dead_letter", None)),
                     ("late file", getattr(n.source, "late_file", None))]
            for what, path in extra:
                if not path or is_remote(str(path)):
                    continue
                path = os.path.abspath(path)
                if os.path.isdir(path):
                    raise OutputError(path, "it is a directory",
                                      what=f"source {n.name!r} ({what})", fix="give a file path")
                _probe_dir(os.path.dirname(path), f"source {n.name!r} ({what})")
    _check_distinct_paths(topology)


def _check_distinct_paths(topology) -> None:
    """Refuse two outputs on one file (two sinks, a sink and a dead-letter or late file...) and
    an output on an input file: each would overwrite or interleave the other's bytes."""
    seen: dict[str, str] = {}
    inputs: dict[str, str] = {}
    for n in topology.topological_order():
        outs = []
        if isinstance(n, SinkNode) and isinstance(n.sink, (CsvSink, ParquetSink)):
            outs.append((f"sink {n.name!r}", n.sink.path))
        if isinstance(n, SourceNode):
            for what in ("dead_letter", "late_file"):
                p = getattr(n.source, what, None)
                if p:
                    outs.append((f"source {n.name!r} ({what.replace('_', ' ')})", p))
            p = getattr(n.source, "path", None)
            if p and not is_remote(str(p)):
                inputs[os.path.realpath(p)] = f"source {n.name!r}"
        for what, p in outs:
            if is_remote(str(p)):
                key = str(p)
            else:
                key = os.path.realpath(p)
            if key in seen:
                raise OutputError(str(p), f"{seen[key]} writes this file too",
                                  what=what, fix="give each output its own path")
            seen[key] = what
    for key, what in seen.items():
        if key in inputs:
            raise OutputError(key, f"it is the input of {inputs[key]}", what=what,
                              fix="write the output elsewhere (it would overwrite the input)")
