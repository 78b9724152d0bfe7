"""CSV and Parquet sinks of ``epic deploy`` on an object store (``s3://``...), exactly once.

An object cannot be appended to or renamed, so the local protocol (:mod:`epic.spark.sink_query`:
truncate, append in place, rename the record) is replaced by write-once objects and a commit
record whose content is the commit (docs/deploy.md, "Storage"):

**CSV.** A task of micro-batch ``B`` streams its formatted rows into a temp object
``<file>.epic/_tmp/b<B>.p<part>.<uuid>.csv`` (visible whole when its upload completes) and
returns its name. The driver's ``commit(messages, B)``:

1. reads the record ``<file>.epic/commit.json``; a ``B`` at or below it is a replay: the temps are
   deleted, nothing else happens. Before the deploy's first commit every part left by another
   deploy (or by a crashed first commit) is deleted;
2. deletes ``parts/b<B>.*`` (a crashed commit of ``B``), then copies each temp, in part order, to
   ``<file>.epic/parts/b<B>.p<part>.csv`` (a server-side copy, all or nothing) and deletes it;
3. when the input has ended, streams the header and every part, in name order, into one upload
   of ``<file>``, which appears whole when the upload completes;
4. writes the record ``(B, bytes, end of stream?, rows, deploy id)`` with one PUT. That PUT is the
   commit: a crash before it makes Spark replay ``B``, which redoes steps 2-4 with the same rows.
   After the end of the stream the parts are deleted; a later commit finds ``eos`` recorded and
   does nothing.

So ``<file>`` appears once, complete, at the end of the stream (like a Parquet sink); while the
stream runs, its committed rows are the parts, in name order.

**Parquet.** Tasks write ``parts/b<B>.p<part>.parquet`` directly (each one PUT; a replay writes the
same name); the commit that sees the end of the stream streams the parts, in order, into one
upload of ``<file>``, then writes the record and deletes the parts. The deploy's first commit
deletes parts of other batches (another deploy's).
"""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pyarrow.fs as pafs

from epic.spark.crash import crash_point, fault_point
from epic.spark.executor import prepare_worker, task_ids
from epic.spark.sink_query import HOLD_ROWS, deploy_id, part_message, read_sidecar, shaped_rows
from epic.storage import Location, resolve

__all__ = ["file_writer", "ObjectStoreFileWriter"]

_CHUNK = 8 << 20


def _part_name(batch_id: int, part: int, ext: str) -> str:
    return f"b{batch_id:012d}.p{part:05d}.{ext}"


class ObjectStoreFileWriter:
    """The writer of one CSV / Parquet sink node on an object store (module docstring).

    Pickled to the tasks (the node and the output URI; each process resolves the store from its
    own environment, so no credentials travel); ``commit`` and ``abort`` run on the driver.
    """

    def __init__(self, node, uri: str, *, checkpoint: str, workdir: str):
        from epic.sinks import CsvSink, ParquetSink

        if not isinstance(node.sink, (CsvSink, ParquetSink)):
            raise TypeError(f"not a file sink: {node.sink!r}")
        self.node = node
        self.uri = uri
        self.checkpoint = checkpoint
        self.workdir = workdir
        self.is_csv = isinstance(node.sink, CsvSink)

    def _locations(self) -> tuple[Location, Location]:
        out = resolve(self.uri, f"sink {self.node.name!r}")
        return out, out.sibling(".epic")

    # -- tasks -----------------------------------------------------------------------------

    def write(self, iterator):
        prepare_worker()
        batch_id, part = task_ids()
        sink = self.node.sink
        schema = sink.output_schema(self.node.input.schema)
        out, meta = self._locations()
        if self.is_csv:
            from epic.csvio import CsvWriter

            rows, w, tmp = 0, None, None
            try:
                for b in shaped_rows(self.node, iterator):
                    if w is None:
                        tmp = meta.join("_tmp", f"b{batch_id}.p{part}.{uuid.uuid4().hex}.csv")
                        w = CsvWriter(tmp.path, columns=schema.names, header=False,
                                      delimiter=sink.delimiter, float_format=sink.float_format,
                                      filesystem=tmp.fs, background=True, hold_rows=HOLD_ROWS)
                    w.write(b)
                    rows += b.num_rows
                if w is None:
                    return part_message(None, part, 0)
                w.close()
            except BaseException:
                if w is not None:
                    try:
                        w.close()
                    except BaseException:  # noqa: BLE001 - the first error is the one to report
                        pass
                    tmp.delete()
                raise
            return part_message(tmp.path, part, rows)
        batches = list(shaped_rows(self.node, iterator))
        rows = sum(b.num_rows for b in batches)
        if not rows:
            return part_message(None, part, 0)
        import pyarrow.parquet as pq

        final = meta.join("parts", _part_name(batch_id, part, "parquet"))
        try:
            with final.open_output() as f:
                pq.write_table(pa.Table.from_batches(batches, schema=schema), f,
                               **sink.writer_options(schema))
        except OSError as exc:
            from epic.errors import OutputError

            raise OutputError(final.uri, exc, fix="check the store's credentials, permissions "
                              "and quota and rerun") from None
        return part_message(final.path, part, rows)

    # -- driver ----------------------------------------------------------------------------

    def commit(self, messages, batchId):
        from epic.errors import OutputError
        from epic.spark.offsets import batch_markers, combine_markers

        _, eos = combine_markers(batch_markers(self.checkpoint, batchId))
        parts = sorted((m for m in messages if m is not None and m.path), key=lambda m: m.part)
        out, meta = self._locations()
        owner = deploy_id(self.workdir)
        rec = read_sidecar(self.uri, owner)
        if rec is not None and batchId <= rec["batch"]:
            if self.is_csv or rec.get("eos"):  # a replayed Parquet part is needed until the end
                for m in parts:
                    Location(out.fs, m.path, m.path).delete()
            return
        if rec is not None and rec.get("eos"):
            # The input had ended: nothing can follow (and the parts are gone).
            for m in parts:
                Location(out.fs, m.path, m.path).delete()
            return
        rows = (rec or {}).get("rows", 0) + sum(m.rows for m in parts)
        pdir = meta.join("parts")
        prefix = f"b{batchId:012d}."
        try:
            if rec is None:
                # This deploy's first commit: every part not written for this batch (Parquet
                # tasks write theirs before the commit) is another deploy's or a crashed one's.
                if self.is_csv:
                    pdir.delete_dir()
                else:
                    for fi in pdir.list():
                        if not fi.base_name.startswith(prefix):
                            pdir.join(fi.base_name).delete()
            if self.is_csv:
                for fi in pdir.list():
                    if fi.base_name.startswith(prefix):
                        pdir.join(fi.base_name).delete()
                for i, m in enumerate(parts):
                    Location(out.fs, m.path, m.path).move_to(
                        pdir.join(_part_name(batchId, m.part, "csv")))
                    if i == 0:
                        crash_point("sink-commit", self.workdir)
                        fault_point("sink-commit", self.workdir)
            size = sum(fi.size for fi in pdir.list() if fi.type == pafs.FileType.File)
            if eos:
                self._assemble(out, pdir)
            meta.join("commit.json").publish(json.dumps(
                {"batch": batchId, "length": size, "eos": eos, "rows": rows, "deploy": owner,
                 "store": "object"}).encode())
            if eos:
                pdir.delete_dir()  # assembled into the file; a replay stops at the record
        except OSError as exc:
            raise OutputError(out.uri, exc, what=f"cannot commit micro-batch {batchId}",
                              fix="check the store's credentials, permissions and quota and "
                                  "rerun the same epic deploy: it resumes from the last "
                                  "committed batch") from None

    def _assemble(self, out: Location, pdir: Location) -> None:
        """Write ``out`` in one upload from the parts, in name order (batch, then part)."""
        sink = self.node.sink
        schema = sink.output_schema(self.node.input.schema)
        names = sorted(fi.base_name for fi in pdir.list() if fi.type == pafs.FileType.File)
        if self.is_csv:
            from epic.csvio import header_line

            with out.open_output() as dst:
                if sink.header:
                    dst.write(header_line(schema.names, sink.delimiter))
                for n in names:
                    with pdir.join(n).fs.open_input_stream(pdir.join(n).path) as src:
                        while True:
                            chunk = src.read(_CHUNK)
                            if not chunk:
                                break
                            dst.write(chunk)
            return
        import pyarrow.parquet as pq

        with out.open_output() as dst, pq.ParquetWriter(dst, schema,
                                                        **sink.writer_options(schema)) as w:
            for n in names:
                with pdir.join(n).open_input() as src:
                    for b in pq.read_table(src).to_batches():
                        w.write_batch(pa.RecordBatch.from_arrays(b.columns, schema=schema))

    def abort(self, messages, batchId):
        if self.is_csv:
            out, _ = self._locations()
            for m in messages or []:
                if m is not None and m.path:
                    Location(out.fs, m.path, m.path).delete()


def file_writer(node, *, checkpoint: str, workdir: str, ordered: str | None = None):
    """The writer of a CSV / Parquet sink node: on an object store an
    :class:`ObjectStoreFileWriter` (the store is resolved now, so one that cannot be reached is
    refused at start), else the local-file protocol of
    :func:`epic.spark.sink_query.file_sink_writer` (``ordered``: see there; the planner never
    asks it of an object store's file, :func:`epic.spark.planner.split_ranked`)."""
    from epic.paths import is_remote
    from epic.spark.sink_query import file_sink_writer

    if is_remote(node.sink.path):
        if ordered is not None:
            raise ValueError(f"sink {node.name!r}: an object store's file is not merged in order")
        uri = node.sink.path
        resolve(uri, f"sink {node.name!r}")
        return ObjectStoreFileWriter(node, uri, checkpoint=checkpoint, workdir=workdir)
    return file_sink_writer(node, checkpoint=checkpoint, workdir=workdir, ordered=ordered)
