"""The CSV and Parquet writer of a sink node in ``epic deploy``: exactly once.

A direct query's tasks call the writer's ``write`` (:mod:`epic.spark.direct`); its
:class:`~epic.spark.direct.Committer` calls ``commit`` / ``abort`` on the driver.

**CSV** (one file, as ``epic run`` writes it). Each task of micro-batch ``B`` formats its rows with
:class:`epic.csvio.CsvWriter`. Partition 0 writes them into the output file itself, *in place*:
it reads the sidecar ``<file>.epic/commit.json`` (last committed batch id and the file length
after it), truncates the file to that length (a failed attempt's rows) and appends; at the first
commit it writes a new file with the header; for a ``B`` already committed it writes nothing. The
other partitions write temp part files. The driver's ``commit(messages, B)``:

1. reads the sidecar; a ``B`` at or below it is a replay: the temps are deleted, nothing else
   happens;
2. checks that partition 0's bytes start at the recorded length and end the file (else
   ``StateError``: the rerun writes the batch again), truncates the file after them (or, without
   them, to the recorded length: a half-done append of a crashed commit), appends the parts in
   part order, fsyncs;
3. writes the sidecar ``(B, new length, end of stream?)`` atomically (temp + rename).

A crash before (3) leaves the sidecar at ``B - 1``: the replay of ``B`` truncates and writes
again. A crash after (3) but before Spark's commit log makes the replay a no-op. So every row is
in the file exactly once, and a batch's rows are written to disk once when one task writes the
sink (partition 0's), instead of into a part and then copied (on DEBS about 11 % of a deploy's
CPU). The in-place writer and the commit hold ``<file>.epic/write.lock`` in turn (a stale
attempt waits, then reads the sidecar again). Between a task and its commit (and after a crash
or an abort, until the next attempt) the file can end with rows of the batch not yet committed;
the sidecar's length is where the committed rows end.

**Parquet** (one file, complete when the input ends). Tasks write
``parts/b<B>.p<part>.<deploy id>.parquet`` (temp + rename: a replay overwrites the same names);
the commit that sees the end of the stream concatenates the parts, in order, into a temp file
renamed to the final path: their row groups are copied byte for byte under one footer
(:mod:`epic.parquetcat`; re-encoded only when that cannot be done exactly).

**In order** (``ordered``: the sink reads a keyed time or count window over several partitions
in its own query). The tasks write their rows and merge keys ``(_step, time, _rank)`` to temp
Arrow files instead; the commit merges the batch's files by those keys (``epic run``'s order,
docs/deploy.md "Event time across partitions"), writes the rows as the batch's one part (CSV:
in place, as partition 0 otherwise does, then checked and recorded as above; Parquet: part 0
of the batch, the same name on a replay) and deletes the temps.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import uuid
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa

from epic.atomic import atomic_json, atomic_path, atomic_write
from epic.directio import append_file, open_append
from epic.parquetcat import (NotConcatenable, append_parquet, concat_parquet, finish_parquet,
                              pack_footer, unpack_footer)
from epic.storage import LOCAL, fsync_local
from epic.sinks import PARQUET_GROUP_ROWS, ParquetGroups
from epic.spark.crash import crash_point, fault_point
from epic.spark.executor import prepare_worker, task_ids


#: a CSV part's writer writes its rows in calls of at least this many (csvio.CsvWriter
#: ``hold_rows``): a part is read only once its task closed it
HOLD_ROWS = 1 << 16

#: a CSV part whose first batch has fewer rows is formatted on the task's thread
BACKGROUND_ROWS = 4096

#: The merge keys after a sink's columns, in ``ordered`` temp parts and in the topic of a collect
#: or console sink after a ranked window in its query (``_step``, the stream's time, ``_rank``)
MERGE_KEYS = ("__epic_step", "__epic_time", "__epic_rank")

__all__ = ["file_sink_writer", "part_message", "read_sidecar", "deploy_id", "shaped_rows",
           "sidecar_location", "MERGE_KEYS", "merge_order", "sink_tables", "with_merge_keys"]


@dataclass(frozen=True)
class _Part:
    path: str | None
    part: int
    rows: int
    #: a CSV part written in place: the output file's bytes ``[start, end)`` (``path`` is None)
    inplace: tuple[int, int] | None = None


def part_message(path: str | None, part: int, rows: int,
                 inplace: tuple[int, int] | None = None) -> _Part:
    """The commit message of a CSV / Parquet write task (rebuilt by the direct query's committer
    from its msgpack form)."""
    return _Part(path, part, rows, None if inplace is None else (int(inplace[0]),
                                                                 int(inplace[1])))


def read_sidecar(path: str, deploy: str | None = None) -> dict | None:
    """The commit record of a file sink (None before its first commit).

    ``deploy``: the reading deploy's id (``deploy.json``); a record another deploy wrote (a fresh
    ``--workdir`` writing to the same output) counts as absent: that deploy's output is replaced,
    as ``epic run`` replaces its output.

    Raises:
        InputError: the record exists but cannot be read. It holds the committed length of the
            output; guessing would cut committed rows or double them, so the sink stops.
    """
    side = sidecar_location(path)
    try:
        rec = side.read_json()  # on an object store, a record being replaced is read again
        if not isinstance(rec, dict):
            raise ValueError("not a JSON object")
        for k in ("batch", "length", "eos"):
            if k not in rec:
                raise ValueError(f"no {k!r}")
        int(rec["batch"]), int(rec["length"])
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, UnicodeDecodeError, OSError) as exc:
        from epic.errors import InputError

        raise InputError(
            f"the commit record of a file sink is corrupt ({type(exc).__name__}: {exc}); it holds "
            f"the committed length of {os.path.basename(path)}, so the sink stops rather than "
            "cut or double committed rows. Fix: restore it, or delete the output file, its .epic "
            "directory and the sink query's checkpoint and state to rewrite the output "
            "(docs/deploy.md, 'Corrupt topics and sidecars')", path=side.uri) from None
    if deploy is not None and rec.get("deploy") not in (None, deploy):
        return None
    return rec


def sidecar_location(path: str):
    """Where a file sink's commit record is: ``<file>.epic/commit.json`` (a path or URI)."""
    from epic.storage import resolve

    return resolve(path, "sink path").sibling(".epic").join("commit.json")


def deploy_id(workdir: str) -> str | None:
    """The id of the deploy in ``workdir`` (``deploy.json``), None if it has none."""
    if "://" in workdir:  # a remote work directory (s3://...)
        from epic.storage import read_small_json

        try:
            doc = read_small_json(f"{workdir}/deploy.json")
            return None if doc is None else doc.get("id")
        except ValueError:
            return None
    try:
        with open(os.path.join(workdir, "deploy.json")) as f:
            return json.load(f).get("id")
    except (FileNotFoundError, ValueError):
        return None


def _write_sidecar(path: str, record: dict) -> None:
    atomic_json(os.path.join(path + ".epic", "commit.json"), record, indent=None)


def shaped_rows(node, batches):
    """Sink node ``node``'s rows (its columns, delay columns filled), batch by batch."""
    from epic.operators.sinks import SinkOperator

    stream = node.input
    op = SinkOperator(node.sink, stream.schema, stream.time, stream.unit, node=node.name)
    got = []

    class _Collect:
        table = None

        def write(self, b, wm):
            got.append(b)

        def close(self, wm):
            pass
    op._writer = _Collect()
    for b in batches:
        if b.num_rows:
            cols = [b.column(f.name) if b.column(f.name).type == f.type
                    else b.column(f.name).cast(f.type) for f in stream.schema]
            op.on_batch(pa.RecordBatch.from_arrays(cols, schema=stream.schema))
            yield from got
            got.clear()


def file_sink_writer(node, *, checkpoint: str, workdir: str, ordered: str | None = None):
    """The writer of sink node ``node``'s CSV / Parquet file: ``write(batches)`` in a task returns
    a commit message; ``commit(messages, batch_id)`` / ``abort`` on the driver.

    Args:
        node: the :class:`~epic.topology.SinkNode` (a CSV or Parquet sink).
        checkpoint: the writing query's checkpoint location (for the end-of-stream marker).
        workdir: the deploy's work directory (crash-point counters).
        ordered: the sink reads a keyed time or count window over several partitions in its
            own query, whose rows carry ``_step`` and ``_rank``; this is the stream's time
            column. Each task then writes its rows (the sink's columns and those three keys)
            to a temp Arrow file, and the commit merges the parts of the micro-batch by
            ``(_step, time, _rank)``, as :func:`epic.spark.direct.merge_parts` does for a
            topic, before it writes them: the file holds ``epic run``'s rows in its order.
    """
    from epic.sinks import CsvSink, ParquetSink

    sink = node.sink
    stream = node.input
    path = os.path.abspath(sink.path)
    meta = path + ".epic"
    is_csv = isinstance(sink, CsvSink)
    if not is_csv and not isinstance(sink, ParquetSink):
        raise TypeError(f"not a file sink: {sink!r}")

    out_schema = sink.output_schema(stream.schema)

    def shaped(batches):
        return shaped_rows(node, batches)

    def row_writer(target: str, first: pa.RecordBatch, append: bool = False):
        """The CsvWriter of a task's rows (a part file, or the output in place)."""
        from epic.csvio import CsvWriter

        # A formatting thread pays off for big parts only: starting one costs milliseconds on
        # a busy machine, more than a few rows take.
        return CsvWriter(target, columns=out_schema.names, header=False,
                         delimiter=sink.delimiter, float_format=sink.float_format,
                         background=first.num_rows >= BACKGROUND_ROWS, hold_rows=HOLD_ROWS,
                         append=append)

    def new_file() -> int:
        """Start the output file anew, holding its header only; its length."""
        from epic.csvio import header_line

        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        head = header_line(out_schema.names, sink.delimiter) if sink.header else b""
        with open(path, "wb") as f:
            f.write(head)
        return len(head)

    def write_in_place(batches, batch_id: int) -> _Part:
        """Part 0 of a CSV sink writes its rows into the output file itself, right after the
        committed length (the commit then only checks, appends the other parts and records):
        the part's bytes are written once, not into a part file and then copied. A replay of a
        committed batch writes nothing (its rows are in the file)."""
        # One writer of the file at a time: a stale attempt (a worker still ending after its
        # query was restarted, a speculative copy) waits, then reads the record again.
        with _file_lock(meta):
            rec = read_sidecar(path, deploy_id(workdir))
            if rec is not None and batch_id <= rec["batch"]:
                for _ in batches:  # committed already: run the nodes, keep the file
                    pass
                return _Part(None, 0, 0)
            return _write_rows_in_place(batches, batch_id, rec)

    def _write_rows_in_place(batches, batch_id: int, rec: dict | None) -> _Part:
        from epic.errors import OutputError

        rows, w, start = 0, None, None

        def cut_back():
            if w is not None:
                try:
                    w.close()  # its thread's last write done before the file is cut
                except BaseException:  # noqa: BLE001 - the first error is the one to see
                    pass
            if start is not None:
                try:
                    os.truncate(path, start)
                except OSError:
                    pass

        def failed(exc):
            # the file is cut back to the last committed batch's rows (CsvWriter cut it back
            # to its own last whole write only)
            cut_back()
            cause = exc.cause if isinstance(exc, OutputError) else exc
            return OutputError(path, cause, what=f"cannot write micro-batch {batch_id}",
                               fix="free space (or fix the permissions) and rerun the same epic "
                                   "deploy: it resumes from the last committed batch")

        try:
            for b in batches:  # errors of the nodes upstream pass as they are
                try:
                    if w is None:
                        if rec is None:  # this deploy's first commit: a new file, its header
                            start = new_file()
                        else:
                            start = rec["length"]
                            os.truncate(path, start)  # a failed attempt's rows after it
                        w = row_writer(path, b, append=True)
                    w.write(b)
                except (OSError, OutputError) as exc:
                    raise failed(exc) from None
                rows += b.num_rows
            if w is None:
                return _Part(None, 0, 0)
            try:
                w.close()
            except (OSError, OutputError) as exc:
                raise failed(exc) from None
        except BaseException:
            cut_back()  # (again, for a failed write: closing and cutting twice is harmless)
            raise
        return _Part(None, 0, rows, (start, os.path.getsize(path)))

    def write_temp(batches, batch_id: int, part: int, ext: str, open_writer) -> _Part:
        """A task's rows streamed into a temp part ``<meta>/_tmp/b<B>.p<part>.<uuid>.<ext>``
        (opened by ``open_writer(path, first batch)`` at the first row; removed on a failure),
        not fsynced: a crash before the commit replays the batch, which writes new parts."""
        rows, w, tmp = 0, None, None
        try:
            for b in batches:
                if not b.num_rows:
                    continue
                if w is None:
                    os.makedirs(os.path.join(meta, "_tmp"), exist_ok=True)
                    tmp = os.path.join(meta, "_tmp",
                                       f"b{batch_id}.p{part}.{uuid.uuid4().hex}.{ext}")
                    w = open_writer(tmp, b)
                w.write(b)
                rows += b.num_rows
            if w is not None:
                w.close()
        except BaseException:
            if w is not None:
                try:
                    w.close()
                finally:
                    _remove(tmp)
            raise
        return _Part(tmp, part, rows)

    def keyed_rows(batches):
        """``ordered``: the sink's rows, each with its merge keys after its columns."""
        schema = pa.schema(list(out_schema) + [pa.field(k, pa.int64()) for k in MERGE_KEYS])
        for kb in with_merge_keys(batches, ordered):
            for x in shaped_rows(node, [kb]):
                yield pa.RecordBatch.from_arrays(list(x.columns) + kb.columns[-len(MERGE_KEYS):],
                                                 schema=schema)

    def write_keyed(batches, batch_id: int, part: int) -> _Part:
        """``ordered``: a task's rows as a temp Arrow file, each with its merge keys."""
        return write_temp(keyed_rows(batches), batch_id, part, "arrow",
                          lambda tmp, b: pa.ipc.new_file(tmp, b.schema))

    def merged(parts) -> pa.Table | None:
        """``ordered``: the rows of a micro-batch's temp Arrow parts (in part order) merged by
        ``(_step, time, _rank)`` (a stable sort: a key's rows are all in one part, in order),
        without the keys."""
        tables = []
        for m in parts:
            with pa.memory_map(m.path) as src:
                tables.append(pa.ipc.open_file(src).read_all())
        if not tables:
            return None
        return merge_order(pa.concat_tables(tables)).select(out_schema.names)

    def write_merged(parts, batch_id: int, rec: dict | None) -> _Part | None:
        """``ordered``: the merged rows of a micro-batch written as its one part. CSV: into
        the file in place, right after the committed length, as partition 0 does otherwise
        (the caller holds the file's lock); Parquet: part 0 of the batch (a replay writes the
        same name). None without rows."""
        t = merged(parts)
        if t is None or not t.num_rows:
            return None
        if is_csv:
            return _write_rows_in_place(t.to_batches(max_chunksize=HOLD_ROWS), batch_id, rec)
        import pyarrow.parquet as pq

        os.makedirs(os.path.join(meta, "parts"), exist_ok=True)
        final = os.path.join(meta, "parts", f"b{batch_id:012d}.p{0:05d}."
                             f"{deploy_id(workdir) or 'local'}.parquet")
        try:
            # not fsynced: see the parts of FileSinkWriter.write
            with atomic_path(final, fsync=False, tmp_dir=os.path.join(meta, "_tmp")) as tmp, \
                    pq.ParquetWriter(tmp, out_schema, **sink.writer_options(out_schema)) as w:
                w.write_table(pa.Table.from_arrays(t.columns, schema=out_schema),
                              row_group_size=PARQUET_GROUP_ROWS)
        except OSError as exc:
            from epic.errors import OutputError

            raise OutputError(path, exc, what=f"cannot commit micro-batch {batch_id}",
                              fix="free space and rerun the same epic deploy: it resumes from "
                                  "the last committed batch") from None
        return _Part(final, 0, t.num_rows)

    class FileSinkWriter:
        def write(self, iterator):
            prepare_worker()
            batch_id, part = task_ids()
            schema = out_schema
            if ordered is not None:
                return write_keyed(iterator, batch_id, part)
            if is_csv and part == 0:
                return write_in_place(shaped(iterator), batch_id)
            if is_csv:
                # Streamed: a micro-batch of DEBS Q3 heat-map rows is ~10^8 CSV rows. Not
                # fsynced: the commit copies the part into the file and fsyncs that, and the
                # part is deleted after it, so its bytes need not reach the disk at all (which
                # halves a CSV sink's disk writes).
                return write_temp(shaped(iterator), batch_id, part, "csv", row_writer)
            # Streamed batch by batch into the part (a micro-batch of Q3 heat-map rows does not
            # fit in memory at once); a part without rows is not written.
            it = (b for b in shaped(iterator) if b.num_rows)
            first = next(it, None)
            if first is None:
                return _Part(None, part, 0)
            os.makedirs(os.path.join(meta, "_tmp"), exist_ok=True)
            import pyarrow.parquet as pq

            os.makedirs(os.path.join(meta, "parts"), exist_ok=True)
            final = os.path.join(meta, "parts", f"b{batch_id:012d}.p{part:05d}."
                                 f"{deploy_id(workdir) or 'local'}.parquet")
            rows = 0
            try:
                # Not fsynced, as CSV's parts: the commit appends the part's bytes to the
                # joined file, fsyncs that and deletes the part; a crash before the commit
                # replays the batch, which writes the part again under the same name. So its
                # bytes need not reach the disk at all (a DEBS deploy's Parquet went to the
                # disk twice: 6.5 GB written for 2.8 GB of output).
                with atomic_path(final, fsync=False, tmp_dir=os.path.join(meta, "_tmp")) as tmp, \
                        pq.ParquetWriter(tmp, schema, **sink.writer_options(schema)) as w, \
                        ParquetGroups(w, schema) as groups:
                    for x in itertools.chain((first,), it):
                        groups.write(x)
                        rows += x.num_rows
            except OSError as exc:
                from epic.errors import OutputError

                raise OutputError(final, exc, fix=f"free space for {path} and rerun") from None
            return _Part(final, part, rows)

        def commit(self, messages, batchId):
            self._commit(messages, batchId)
            _sweep_tmp(os.path.join(meta, "_tmp"), batchId)

        def _commit(self, messages, batchId):
            from epic.spark.offsets import batch_markers, combine_markers

            _, eos = combine_markers(batch_markers(checkpoint, batchId))
            parts = sorted((m for m in messages if m is not None and m.path), key=lambda m: m.part)
            placed = [m for m in messages if m is not None and m.inplace is not None]
            os.makedirs(meta, exist_ok=True)
            owner = deploy_id(workdir)
            rec = read_sidecar(path, owner)
            if rec is not None and batchId <= rec["batch"]:
                if is_csv or ordered is not None:
                    for m in parts:
                        _remove(m.path)
                return
            rows = (rec or {}).get("rows", 0) + sum(m.rows for m in parts + placed)
            if ordered is not None:
                try:
                    if is_csv:
                        with _file_lock(meta):
                            one = write_merged(parts, batchId, rec)
                            self._commit_csv(messages, batchId, rec, [],
                                             [] if one is None else [one], rows, eos, owner)
                        return
                    write_merged(parts, batchId, rec)
                finally:
                    for m in parts:
                        _remove(m.path)
                self._commit_parquet(batchId, rows, eos, owner, rec)
                return
            if is_csv:
                with _file_lock(meta):
                    self._commit_csv(messages, batchId, rec, parts, placed, rows, eos, owner)
                return
            self._commit_parquet(batchId, rows, eos, owner, rec)

        def _commit_csv(self, messages, batchId, rec, parts, placed, rows, eos, owner):
            from epic.errors import OutputError, StateError

            if messages and ordered is None and not any(m.part == 0 for m in messages):
                # partition 0 writes in place: without its message its rows (if any) cannot
                # be told from a failed attempt's
                raise StateError(f"{path}: micro-batch {batchId} has no message from "
                                 "partition 0; rerun the same epic deploy")
            committed = None
            try:
                if placed:
                    # part 0's rows are in the file already, right after the committed
                    # length (or the header it wrote, at the first commit)
                    (start, end), = (m.inplace for m in placed)
                    length = rec["length"] if rec is not None else start
                    if start != length or os.path.getsize(path) != end:
                        raise StateError(
                            f"{path}: the rows of micro-batch {batchId} written in place at "
                            f"bytes {start}-{end} do not follow the committed length "
                            f"{length} (file size {os.path.getsize(path)}); rerun the same "
                            "epic deploy: it writes the batch again")
                elif rec is None:
                    length = new_file()
                else:
                    length = rec["length"]
                committed = length
                if placed:
                    length = end
                os.truncate(path, length)
                with open_append(path, append=True) as f:
                    wrote = False
                    for m in parts:
                        append_file(f, m.path)
                        if not wrote and f.tell() > committed:
                            # Tests: after the first part that wrote bytes (a fused query's
                            # first parts can be empty files), with partition 0's rows
                            # before it if it wrote any
                            wrote = True
                            crash_point("sink-commit", workdir)
                            fault_point("sink-commit", workdir)
                    if not wrote and f.tell() > committed:
                        # Tests: only partition 0's rows, written in place
                        crash_point("sink-commit", workdir)
                        fault_point("sink-commit", workdir)
                    f.flush()
                    os.fsync(f.fileno())
                    length = f.tell()
                _write_sidecar(path, {"batch": batchId, "length": length, "eos": eos,
                                      "rows": rows, "deploy": owner})
            except OSError as exc:
                # Write, then commit: cut the half-appended batch off again (a shorter length
                # needs no space), so the file ends with the last committed batch's rows;
                # unless the record of this batch was written (and only its directory's
                # fsync failed): then the batch is committed.
                try:
                    done = read_sidecar(path, owner)
                except Exception:  # noqa: BLE001 - unreadable: not this batch's record
                    done = None
                if committed is not None and (done is None or done["batch"] < batchId):
                    try:
                        os.truncate(path, committed)
                    except OSError:
                        pass
                raise OutputError(path, exc, what=f"cannot commit micro-batch {batchId}",
                                  fix="free space (or fix the permissions) and rerun the "
                                      "same epic deploy: it resumes from the last committed "
                                      "batch") from None
            for m in parts:
                _remove(m.path)

        def _commit_parquet(self, batchId, rows, eos, owner, rec):
            """Append the micro-batch's parts to the growing file, byte for byte
            (``<meta>/joined.<deploy>.parquet``: row groups, no footer; its footer fields in
            ``<meta>/joined.<deploy>.b<batch>.footer``), and at the end of the stream write its
            footer and rename it to the output: the last commit copies one batch, not the
            whole stream (docs/deploy.md, "Parquet parts joined as they commit")."""
            from epic.errors import OutputError, StateError

            schema = sink.output_schema(stream.schema)
            pdir = os.path.join(meta, "parts")
            tag = owner or "local"
            grow = os.path.join(meta, f"joined.{tag}.parquet")
            joined = (rec or {}).get("joined")   # {"batch", "length"}: what the file holds
            jb = -1 if joined is None else int(joined["batch"])
            files = [(b, f) for b, f in ((_part_batch(f), f)
                                         for f in _own_parts(pdir, owner, workdir))
                     if b <= batchId]
            new = [f for b, f in files if b > jb]
            stopped = bool(joined and joined.get("stopped"))
            record = {"batch": batchId, "length": 0, "eos": eos, "rows": rows, "deploy": owner}
            try:
                if joined is None and os.path.isdir(meta):
                    # another deploy's growing file (a fresh work directory, same output)
                    for n in os.listdir(meta):
                        if n.startswith("joined.") and not n.startswith(f"joined.{tag}."):
                            _remove(os.path.join(meta, n))
                if joined is not None and not stopped and not os.path.exists(grow):
                    # the end-of-stream commit renamed the file and died before its record
                    if not os.path.exists(path):
                        raise StateError(
                            f"{path}: the Parquet file joined so far is missing "
                            f"({grow} and the output); delete the output, its .epic "
                            "directory and the work directory, and deploy again")
                    os.replace(path, grow)
                footer = None if joined is None else _read_footer_fields(grow, jb)
                length = 0 if joined is None else int(joined["length"])
                if new and not stopped:
                    try:
                        length, footer = append_parquet(grow, length, footer, new)
                        jb = batchId
                    except NotConcatenable:
                        stopped = True  # joined at the end by decoding (see below)
                    else:
                        crash_point("parquet-commit", workdir)
                        atomic_write(f"{grow[:-8]}.b{jb}.footer", pack_footer(footer))
                if footer is not None:
                    record["joined"] = {"batch": jb, "length": length,
                                        **({"stopped": True} if stopped else {})}
                join = None
                if eos and (footer is None or stopped):
                    # no rows at all (a file with the schema only), or parts this module
                    # cannot join byte for byte: decode and re-encode what is left
                    rest = [f for b, f in files if b > jb]
                    if footer is not None:
                        finish_parquet(grow, length, footer)
                        rest.insert(0, grow)
                    join = "copy"
                    with atomic_path(path, tmp_dir=meta) as tmp:
                        try:
                            concat_parquet(rest, tmp)
                        except NotConcatenable:
                            join = "reencode"
                            _reencode_parquet(rest, tmp, schema, sink.writer_options(schema))
                elif eos:
                    finish_parquet(grow, length, footer)
                    os.replace(grow, path)
                    fsync_local(LOCAL, os.path.dirname(path), directory=True)
                    crash_point("parquet-final", workdir)
                    join = "copy"
                if join is not None:
                    record["join"] = join
            except OSError as exc:
                raise OutputError(path, exc, what=f"cannot commit micro-batch {batchId}",
                                  fix="free space and rerun the same epic deploy") from None
            _write_sidecar(path, record)
            # what the record now says is joined is no longer needed
            for b, f in files:
                if b <= jb or eos:
                    _remove(f)
            keep = None if eos else f"joined.{tag}.b{jb}.footer"   # the end needs none
            for n in os.listdir(meta):
                if n.startswith(f"joined.{tag}.") and n != keep and (eos or n.endswith(".footer")):
                    _remove(os.path.join(meta, n))

        def abort(self, messages, batchId):
            if is_csv or ordered is not None:
                for m in messages or []:
                    if m is not None and m.path:
                        _remove(m.path)
                # Rows written in place stay until the next attempt or commit cuts the file
                # back to the committed length (cutting here could cut a committed batch: a
                # query's outputs commit one after another, and abort follows any failure).

    return FileSinkWriter()


def with_merge_keys(it, time: str) -> Iterator[pa.RecordBatch]:
    """A ranked window's rows with their merge keys ``_step``, ``time``, ``_rank`` copied into
    :data:`MERGE_KEYS` columns after them (a sink's columns may drop those)."""
    from epic.spark.tags import RANK, STEP

    for b in it:
        cols = list(b.columns) + [b.column(c).cast(pa.int64()) for c in (STEP, time, RANK)]
        yield pa.RecordBatch.from_arrays(cols, names=b.schema.names + list(MERGE_KEYS))


def merge_order(t: pa.Table, keys: tuple = MERGE_KEYS) -> pa.Table:
    """``t`` (parts of one micro-batch, in part order) sorted stably by its ``keys`` columns,
    ``(_step, time, _rank)``: ``epic run``'s order. A key's rows are all in one part, in
    order, so the stable sort merges the parts."""
    import numpy as np

    step, time, rank = (t.column(k).to_numpy() for k in keys)
    order = np.lexsort((rank, time, step))
    if np.array_equal(order, np.arange(len(order))):
        return t
    return t.take(pa.array(order))


def sink_tables(topic, start: int = 0):
    """``(next seq, rows)`` of a collect or console sink's topic from segment ``start`` on: one
    table per segment, or per micro-batch when its parts carry :data:`MERGE_KEYS` (a ranked
    window over several partitions in the sink's query), merged into ``epic run``'s order. The
    keys are dropped. (A segment is visible only with every part of its batch.)"""
    segs = topic.segments(start)
    keyed = MERGE_KEYS[0] in topic.schema.names
    names = [n for n in topic.schema.names if n not in MERGE_KEYS]
    i = 0
    while i < len(segs):
        j = i + 1
        if keyed:
            while (j < len(segs) and (segs[j].producer, segs[j].batch_id)
                   == (segs[i].producer, segs[i].batch_id)):
                j += 1
        batches = [b for s in segs[i:j] for b in topic.read_segment(s)[1]]
        t = pa.Table.from_batches(batches, schema=topic.schema)
        if keyed:
            t = (merge_order(t) if j - i > 1 else t).select(names)
        yield segs[j - 1].seq + 1, t
        i = j


def _own_parts(pdir: str, owner: str | None, workdir: str) -> list[str]:
    """The Parquet parts of deploy ``owner`` in ``pdir``, in batch and part order: named
    ``b<B>.p<part>.<deploy id>.parquet`` (an older deploy's to the same output may be left
    there). Parts named without an id (written by an epic before session 15) count if they are
    not older than the work directory's ``deploy.json``: a deploy resumed across that upgrade."""
    if not os.path.isdir(pdir):
        return []
    mine = f".{owner or 'local'}.parquet"
    try:
        since = os.path.getmtime(os.path.join(workdir, "deploy.json"))
    except OSError:
        since = float("inf")
    out = []
    for n in os.listdir(pdir):
        full = os.path.join(pdir, n)
        legacy = n.count(".") == 2 and n.endswith(".parquet")  # b<B>.p<part>.parquet
        if n.endswith(mine) or (legacy and os.path.getmtime(full) >= since):
            out.append((n.split(".")[:2], full))
    return [full for _, full in sorted(out)]


def _sweep_tmp(tmp_dir: str, batch_id: int) -> None:
    """Delete the temp files of micro-batches before ``batch_id`` in a file sink's ``_tmp``
    directory (``b<B>.p<part>.<uuid>.<ext>``, and ``.b<B>.p<part>....tmp`` of a part being
    written): once ``batch_id`` commits, they can only be left by attempts that died (a killed
    task, a crashed deploy), since the batches before it committed before it ran."""
    try:
        names = os.listdir(tmp_dir)
    except OSError:
        return
    for n in names:
        head = n.lstrip(".").split(".", 1)[0]
        if head[:1] == "b" and head[1:].isdigit() and int(head[1:]) < batch_id:
            _remove(os.path.join(tmp_dir, n))


def _part_batch(path: str) -> int:
    """The micro-batch of a Parquet part ``b<B>.p<part>....parquet``."""
    return int(os.path.basename(path).split(".", 1)[0][1:])


def _read_footer_fields(grow: str, batch: int) -> list:
    """The footer fields of the growing joined file as of micro-batch ``batch``'s commit."""
    from epic.errors import StateError

    name = f"{grow[:-8]}.b{batch}.footer"
    try:
        with open(name, "rb") as f:
            return unpack_footer(f.read())
    except (OSError, IndexError, TypeError, ValueError, KeyError) as exc:
        raise StateError(f"{name}: the footer of the Parquet rows committed so far cannot be "
                         f"read ({exc!r}); delete the output, its .epic directory and the work "
                         "directory, and deploy again") from None


@contextlib.contextmanager
def _file_lock(meta: str):
    """An exclusive lock on ``<meta>/write.lock`` (the in-place writer and the commit of one
    CSV sink: one at a time). Released when its holder ends, however it ends."""
    import fcntl

    os.makedirs(meta, exist_ok=True)
    fd = os.open(os.path.join(meta, "write.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _reencode_parquet(files: list[str], tmp: str, schema: pa.Schema,
                      options: dict | None = None) -> None:
    """Join Parquet parts by decoding and re-encoding them (when :func:`concat_parquet` cannot
    join them byte for byte, e.g. no parts at all: the file then holds just the schema)."""
    import pyarrow.parquet as pq

    with pq.ParquetWriter(tmp, schema, **(options or {})) as w:
        for name in files:
            # a row group at a time: a part can hold a whole micro-batch of Q3 heat-map rows
            # (memory stays bounded by the row group)
            pf = pq.ParquetFile(name)
            for g in range(pf.num_row_groups):
                t = pf.read_row_group(g)
                w.write_table(pa.Table.from_arrays(t.columns, schema=schema))


def _remove(p: str) -> None:
    try:
        os.remove(p)
    except OSError:
        pass
