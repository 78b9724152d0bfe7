"""Reading a query's offset log: the topic offsets (with watermarks and end-of-stream markers)
each micro-batch read up to. Used by the topic source (which writes them), the topic and file
sinks, the stateful tasks and the deploy's status (which read them).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Sequence

import pyarrow.fs as pafs

from epic.topics import resolve_filesystem

__all__ = ["TopicOffset", "combine_markers", "combine_step", "batch_markers",
           "checkpoint_is_fresh", "offsets_from_progress", "task_offsets"]


@dataclass(frozen=True)
class TopicOffset:
    """A source offset as a value (what Spark stores as JSON).

    Attributes:
        topic_id: Id of the topic (from its manifest).
        seq: Sequence number just past the last segment read.
        watermark: Watermark of that segment, None if it had none (or nothing was read).
        eos: Whether that segment ended the upstream stream.
        step: The producer's progress counter at that segment (``epic deploy``), None if unknown.
    """

    topic_id: str
    seq: int
    watermark: int | None = None
    eos: bool = False
    step: int | None = None

    def to_dict(self) -> dict:
        """The JSON-able dict Spark stores; keys in a fixed order, since Spark compares offsets as
        JSON text."""
        d = {"epic_topic": self.topic_id, "seq": self.seq}
        if self.watermark is not None:
            d["watermark"] = self.watermark
        d["eos"] = self.eos
        if self.step is not None:
            d["step"] = self.step
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TopicOffset:
        """Parse :meth:`to_dict` output."""
        return cls(topic_id=d["epic_topic"], seq=int(d["seq"]), watermark=d.get("watermark"),
                   eos=bool(d.get("eos", False)), step=d.get("step"))

    @staticmethod
    def is_topic_offset(d: object) -> bool:
        """Whether a parsed JSON offset came from this source."""
        return isinstance(d, dict) and "epic_topic" in d and "seq" in d


def _parse_offset_json(text: str) -> TopicOffset | None:
    try:
        d = json.loads(text)
    except ValueError:
        return None
    return TopicOffset.from_dict(d) if TopicOffset.is_topic_offset(d) else None


def combine_markers(offsets: Sequence[TopicOffset]) -> tuple[int | None, bool]:
    """Watermark and end-of-stream of a node fed by ``offsets``: the minimum watermark over the
    inputs that have not ended (unknown if one of them has none; an ended input no longer holds
    time back, as in a merge), over all inputs once all ended; and the conjunction of
    end-of-stream flags."""
    if not offsets:
        return None, False
    live = [o for o in offsets if not o.eos] or list(offsets)
    wms = [o.watermark for o in live]
    wm = None if any(w is None for w in wms) else min(wms)
    return wm, all(o.eos for o in offsets)


def combine_step(offsets: Sequence[TopicOffset]) -> int | None:
    """The largest progress counter (``step``) among ``offsets``, None if none carries one."""
    steps = [o.step for o in offsets if o.step is not None]
    return max(steps) if steps else None


def batch_markers(checkpoint: str, batch_id: int) -> list[TopicOffset]:
    """The topic offsets a query's micro-batch ``batch_id`` read up to, from its offset log.

    Spark writes ``<checkpoint>/offsets/<batch_id>`` before the batch runs (a write-ahead log:
    a version line, a metadata line, then one JSON offset per source, ``-`` for none), so sinks and
    drivers can read it at any time during or after the batch.

    Args:
        checkpoint: The query's checkpoint location (path or pyarrow filesystem URI).
        batch_id: The micro-batch id.

    Returns:
        One :class:`TopicOffset` per ``epic_topic`` source of the query, in source order.
    """
    planned = _TASK_OFFSETS.get(checkpoint)
    if planned is not None:
        return _find_offsets(planned)
    fs, root = resolve_filesystem(checkpoint, None)
    with fs.open_input_stream(f"{root}/offsets/{batch_id}") as f:
        lines = f.read().decode().splitlines()
    out = []
    for line in lines[2:]:
        o = _parse_offset_json(line)
        if o is not None:
            out.append(o)
    if not out:
        # Newer offset-log versions may store sources inside one JSON document: search it.
        for line in lines[1:]:
            out.extend(_find_offsets(_safe_json(line)))
    return out


#: In a task of a deploy whose checkpoints are on the driver's disk (a remote work directory):
#: the running micro-batch's end offset, by checkpoint (:func:`task_offsets`).
_TASK_OFFSETS: dict[str, dict] = {}


@contextlib.contextmanager
def task_offsets(checkpoint: str, end: dict):
    """Within the block, :func:`batch_markers` of ``checkpoint`` answers from ``end``, the end
    offset the driver planned the running task's micro-batch with (what Spark wrote to the
    offset log): the tasks of a deploy with a remote work directory may run on machines that do
    not see the driver's checkpoint directory. A Python worker runs one task at a time."""
    _TASK_OFFSETS[checkpoint] = end
    try:
        yield
    finally:
        _TASK_OFFSETS.pop(checkpoint, None)


def checkpoint_is_fresh(checkpoint: str) -> bool:
    """Whether a query checkpoint has never planned a batch (no offset-log entry yet)."""
    fs, root = resolve_filesystem(checkpoint, None)
    infos = fs.get_file_info(pafs.FileSelector(f"{root}/offsets", allow_not_found=True))
    return not any(i.base_name.isdigit() for i in infos)


def _safe_json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def _find_offsets(node) -> list[TopicOffset]:
    if TopicOffset.is_topic_offset(node):
        return [TopicOffset.from_dict(node)]
    if isinstance(node, str):
        inner = _safe_json(node)
        return _find_offsets(inner) if isinstance(inner, (dict, list)) else []
    if isinstance(node, dict):
        return [o for v in node.values() for o in _find_offsets(v)]
    if isinstance(node, list):
        return [o for v in node for o in _find_offsets(v)]
    return []


def offsets_from_progress(progress: dict | None) -> list[TopicOffset]:
    """The topic end offsets of a ``StreamingQuery.lastProgress`` (or ``recentProgress`` item).

    A driver watches upstream completion with it: a node's input has ended when every returned
    offset has ``eos`` set.
    """
    if not progress:
        return []
    out = []
    for src in progress.get("sources", []):
        out.extend(_find_offsets(src.get("endOffset")))
    return out


def source_late_rows(progress: dict | None) -> dict[str, int]:
    """Late-row counts of slack/punctuation sources (``late_rows`` in a source query's end
    offset, :mod:`epic.spark.source_query`), by source node name."""
    out: dict[str, int] = {}

    def walk(node):
        if isinstance(node, str):
            inner = _safe_json(node)
            if isinstance(inner, (dict, list)):
                walk(inner)
        elif isinstance(node, dict):
            tid = node.get("epic_topic")
            if isinstance(tid, str) and tid.startswith("source:") and "late_rows" in node:
                out[tid[len("source:"):]] = int(node["late_rows"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for src in (progress or {}).get("sources", []):
        walk(src.get("endOffset"))
    return out
