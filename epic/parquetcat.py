"""Concatenate Parquet files of one schema into one file without decoding a value.

A Parquet file is ``PAR1``, its column chunks (row group after row group), an optional page index
and bloom filters, then the footer: a Thrift (compact protocol) ``FileMetaData``, its length and
``PAR1``. Every position in the footer is an absolute file offset. So files written with the same
schema concatenate by copying each file's bytes between the magic and its footer (in the kernel,
``copy_file_range``) and writing one footer that lists every file's row groups, their offsets
shifted by where the file's bytes now start.

``epic deploy``'s Parquet sink uses it to join the part files its tasks wrote (decoding and
re-encoding them cost about 170 CPU-s on the DEBS full game): at each commit it appends the
micro-batch's parts to a growing file (:func:`append_parquet`), and at the end of the stream
writes that file's footer (:func:`finish_parquet`). Files this
module cannot join exactly raise :class:`NotConcatenable`; the caller then re-encodes:

* encrypted files (``PARE``), or footers with encrypted column metadata;
* a page index (its ``PageLocation`` offsets are absolute and live outside the footer);
* column chunks stored in other files (``file_path``);
* schemas or key-value metadata that differ between the files.

The Thrift codec below is generic (any compact-protocol struct decodes to a list of fields and
encodes back to the same bytes); only the offset fields of ``RowGroup``, ``ColumnChunk`` and
``ColumnMetaData`` are read by name (field ids of parquet.thrift).
"""

from __future__ import annotations

import os
import struct

from epic.storage import copy_into

__all__ = ["NotConcatenable", "concat_parquet", "append_parquet", "finish_parquet", "read_footer",
           "decode_struct", "encode_struct", "pack_footer", "unpack_footer", "Encoded"]

MAGIC = b"PAR1"

# Thrift compact protocol types
_TRUE, _FALSE, _I8, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
_UUID = 13

# parquet.thrift field ids
_FMD_SCHEMA, _FMD_NUM_ROWS, _FMD_ROW_GROUPS, _FMD_KV = 2, 3, 4, 5
_FMD_ENCRYPTION = 8
_RG_COLUMNS, _RG_FILE_OFFSET, _RG_ORDINAL = 1, 5, 7
_CC_FILE_PATH, _CC_FILE_OFFSET, _CC_META = 1, 2, 3
_CC_OFFSET_INDEX, _CC_COLUMN_INDEX, _CC_CRYPTO, _CC_ENC_META = 4, 6, 8, 9
_CMD_DATA_PAGE, _CMD_INDEX_PAGE, _CMD_DICT_PAGE, _CMD_BLOOM = 9, 10, 11, 14


class NotConcatenable(Exception):
    """These files cannot be joined byte for byte (the reason says why); re-encode them."""


# --------------------------------------------------------------------------------------------------
# Thrift compact protocol: a struct is a list of [field id, type, value]; a list or set is
# (element type, [values]); a map is (key type, value type, [(k, v)]); a bool field's value is
# its type (True / False); a bool element is its byte.


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int = 0):
        self.buf, self.pos = buf, pos

    def byte(self) -> int:
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise NotConcatenable("truncated Thrift data in the footer")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def value(self, t: int):
        if t in (_I16, _I32, _I64):
            return self.zigzag()
        if t == _I8:
            return self.byte()
        if t == _DOUBLE:
            return self.take(8)
        if t == _BINARY:
            return self.take(self.varint())
        if t == _UUID:
            return self.take(16)
        if t in (_LIST, _SET):
            head = self.byte()
            size, et = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if et in (_TRUE, _FALSE):
                return (et, [self.byte() for _ in range(size)])
            return (et, [self.value(et) for _ in range(size)])
        if t == _MAP:
            size = self.varint()
            if size == 0:
                return (0, 0, [])
            kv = self.byte()
            kt, vt = kv >> 4, kv & 0x0F
            return (kt, vt, [(self.value(kt), self.value(vt)) for _ in range(size)])
        if t == _STRUCT:
            return self.struct()
        raise NotConcatenable(f"unknown Thrift compact type {t} in the footer")

    def struct(self) -> list:
        fields, last = [], 0
        while True:
            head = self.byte()
            if head == 0:
                return fields
            t, delta = head & 0x0F, head >> 4
            fid = last + delta if delta else self.zigzag()
            if t in (_TRUE, _FALSE):
                fields.append([fid, t, t == _TRUE])
            else:
                fields.append([fid, t, self.value(t)])
            last = fid


class Encoded(bytes):
    """A list element already in compact-protocol bytes: written as it is (the row groups a
    growing file's footer keeps between commits, :func:`pack_footer`)."""

    __slots__ = ()


def _varint(out: bytearray, n: int) -> None:
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def _zigzag(out: bytearray, n: int, bits: int = 64) -> None:
    _varint(out, ((n << 1) ^ (n >> (bits - 1))) & ((1 << bits) - 1))


def _encode_value(out: bytearray, t: int, v) -> None:
    if t == _I16:
        _zigzag(out, v, 16)
    elif t == _I32:
        _zigzag(out, v, 32)
    elif t == _I64:
        _zigzag(out, v, 64)
    elif t == _I8:
        out.append(v & 0xFF)
    elif t in (_DOUBLE, _UUID):
        out += v
    elif t == _BINARY:
        _varint(out, len(v))
        out += v
    elif t in (_LIST, _SET):
        et, items = v
        if len(items) < 15:
            out.append(len(items) << 4 | et)
        else:
            out.append(0xF0 | et)
            _varint(out, len(items))
        if et in (_TRUE, _FALSE):
            out += bytes(items)
        else:
            for item in items:
                if isinstance(item, Encoded):
                    out += item
                else:
                    _encode_value(out, et, item)
    elif t == _MAP:
        kt, vt, items = v
        _varint(out, len(items))
        if items:
            out.append(kt << 4 | vt)
            for k, val in items:
                _encode_value(out, kt, k)
                _encode_value(out, vt, val)
    elif t == _STRUCT:
        _encode_struct(out, v)
    else:
        raise ValueError(f"unknown Thrift compact type {t}")


def _encode_struct(out: bytearray, fields: list) -> None:
    last = 0
    for fid, t, v in fields:
        if t in (_TRUE, _FALSE):
            t = _TRUE if v else _FALSE
        delta = fid - last
        if 0 < delta <= 15:
            out.append(delta << 4 | t)
        else:
            out.append(t)
            _zigzag(out, fid, 16)
        if t not in (_TRUE, _FALSE):
            _encode_value(out, t, v)
        last = fid
    out.append(0)


def decode_struct(data: bytes) -> list:
    """A compact-protocol struct as ``[[field id, type, value], ...]`` (see the module)."""
    return _Reader(data).struct()


def encode_struct(fields: list) -> bytes:
    """The compact-protocol bytes of :func:`decode_struct`'s form (the same bytes back)."""
    out = bytearray()
    _encode_struct(out, fields)
    return bytes(out)


def _field(fields: list, fid: int):
    for f in fields:
        if f[0] == fid:
            return f
    return None


# --------------------------------------------------------------------------------------------------
# Files.


def read_footer(path: str) -> tuple[list, int, int]:
    """``(FileMetaData fields, where the footer starts, file size)`` of the Parquet file ``path``.
    Raises :class:`NotConcatenable` for an encrypted or malformed file."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 12:
            raise NotConcatenable(f"{path}: {size} bytes is no Parquet file")
        head = f.read(4)
        f.seek(size - 8)
        tail = f.read(8)
        if tail[4:] != MAGIC or head != MAGIC:
            raise NotConcatenable(f"{path}: not a plain Parquet file (magic {tail[4:]!r}; "
                                  "encrypted footers are not joined)")
        n = struct.unpack("<I", tail[:4])[0]
        start = size - 8 - n
        if start < 4:
            raise NotConcatenable(f"{path}: footer length {n} does not fit the file")
        f.seek(start)
        raw = f.read(n)
    try:
        reader = _Reader(raw)
        meta = reader.struct()
    except (IndexError, TypeError, ValueError, RecursionError) as exc:
        raise NotConcatenable(f"{path}: the footer does not decode ({exc!r})") from None
    if reader.pos != n:
        raise NotConcatenable(f"{path}: the footer has {n - reader.pos} bytes after its end")
    for fid, what in ((_FMD_NUM_ROWS, "row count"), (_FMD_SCHEMA, "schema")):
        if _field(meta, fid) is None:
            raise NotConcatenable(f"{path}: the footer has no {what}")
    if _field(meta, _FMD_ENCRYPTION) is not None:
        raise NotConcatenable(f"{path}: encrypted")
    return meta, start, size


def _shift(fields: list, fid: int, delta: int) -> None:
    """Shift an absolute offset field; 0 (e.g. the deprecated ``ColumnChunk.file_offset`` that
    pyarrow writes as 0: "no metadata outside the footer") stays 0."""
    f = _field(fields, fid)
    if f is not None and f[2] > 0:
        f[2] += delta


def _shift_row_group(rg: list, delta: int, ordinal: int, path: str) -> None:
    _shift(rg, _RG_FILE_OFFSET, delta)
    f = _field(rg, _RG_ORDINAL)
    if f is not None:
        if ordinal >= 1 << 15:
            raise NotConcatenable(f"{path}: more than 32767 row groups with ordinals")
        f[2] = ordinal
    cols = _field(rg, _RG_COLUMNS)
    for cc in (cols[2][1] if cols is not None else []):
        for fid, what in ((_CC_FILE_PATH, "column chunks in another file"),
                          (_CC_OFFSET_INDEX, "a page index"), (_CC_COLUMN_INDEX, "a page index"),
                          (_CC_CRYPTO, "encrypted columns"), (_CC_ENC_META, "encrypted columns")):
            if _field(cc, fid) is not None:
                raise NotConcatenable(f"{path}: {what}")
        _shift(cc, _CC_FILE_OFFSET, delta)
        meta = _field(cc, _CC_META)
        if meta is None:
            raise NotConcatenable(f"{path}: a column chunk without its metadata")
        for fid in (_CMD_DATA_PAGE, _CMD_INDEX_PAGE, _CMD_DICT_PAGE, _CMD_BLOOM):
            _shift(meta[2], fid, delta)


def _empty_like(meta: list) -> list:
    """The footer fields of ``meta`` with no row groups and no rows (a joined file's start)."""
    out = []
    for f in meta:
        if f[0] == _FMD_NUM_ROWS:
            out.append([f[0], f[1], 0])
        elif f[0] == _FMD_ROW_GROUPS:
            out.append([f[0], f[1], (_STRUCT, [])])
        else:
            out.append(f)
    if _field(out, _FMD_ROW_GROUPS) is None:
        out.append([_FMD_ROW_GROUPS, _LIST, (_STRUCT, [])])
        out.sort(key=lambda f: f[0])
    return out


def append_parquet(dst_path: str, length: int, meta: list | None,
                   paths: list[str]) -> tuple[int, list]:
    """Append the row groups of the Parquet files ``paths`` (in order, one schema), byte for
    byte, to the growing file ``dst_path``: ``PAR1`` and row groups, no footer, whose first
    ``length`` bytes hold the row groups the footer fields ``meta`` list (None, 0: a new file).
    Bytes after ``length`` (an attempt that did not finish) are cut first, so a repeated call
    gives the same file. The file is fsynced. Returns the new length and footer fields (write
    them with :func:`finish_parquet`, or keep them to append more later).

    Raises :class:`NotConcatenable` (before writing anything) when a file cannot be joined
    exactly; ``FileNotFoundError`` when ``length`` > 0 and the file is missing; ``OSError``
    from the disk as it comes, and when the file is shorter than ``length``.
    """
    footers = [read_footer(p) for p in paths]
    if meta is None:
        if not footers:
            raise NotConcatenable("no files to join")
        meta, length = _empty_like(footers[0][0]), 0
    meta = [list(f) for f in meta]
    ref = {fid: encode_struct([_field(meta, fid)]) if _field(meta, fid) else None
           for fid in (_FMD_SCHEMA, _FMD_KV)}
    for p, (m, _, _) in zip(paths, footers):
        for fid, what in ((_FMD_SCHEMA, "schema"), (_FMD_KV, "key-value metadata")):
            mine = encode_struct([_field(m, fid)]) if _field(m, fid) else None
            if mine != ref[fid]:
                raise NotConcatenable(f"{p}: another {what} than the file it is joined to")
    # shift every row group's offsets to where its file's bytes will be (checks first)
    have = _field(meta, _FMD_ROW_GROUPS)
    groups = list(have[2][1])
    rows = _field(meta, _FMD_NUM_ROWS)[2]
    pos = max(length, len(MAGIC))
    for p, (m, start, _) in zip(paths, footers):
        delta = pos - len(MAGIC)
        rgs = _field(m, _FMD_ROW_GROUPS)
        for rg in (rgs[2][1] if rgs is not None else []):
            _shift_row_group(rg, delta, len(groups), p)
            groups.append(rg)
        rows += _field(m, _FMD_NUM_ROWS)[2]
        pos += start - len(MAGIC)
    have[2] = (_STRUCT, groups)
    _field(meta, _FMD_NUM_ROWS)[2] = rows
    fd = os.open(dst_path, os.O_RDWR | (os.O_CREAT if length == 0 else 0), 0o644)
    with os.fdopen(fd, "r+b") as dst:
        if length == 0:
            dst.truncate(0)
            dst.write(MAGIC)
        else:
            size = os.fstat(dst.fileno()).st_size
            if size < length:
                raise OSError(f"{dst_path}: {size} bytes, shorter than the {length} joined "
                              "before")
            dst.truncate(length)
            dst.seek(length)
        for p, (_, start, _) in zip(paths, footers):
            if copy_into(dst, p, len(MAGIC), start - len(MAGIC)) != start - len(MAGIC):
                raise OSError(f"{p}: shorter than its footer says (changed while joined)")
        if dst.tell() != pos:
            raise OSError(f"{dst_path}: wrote {dst.tell()} bytes of row groups, expected {pos}")
        dst.flush()
        os.fsync(dst.fileno())
    return pos, meta


def finish_parquet(dst_path: str, length: int, meta: list) -> int:
    """End the growing file ``dst_path`` (:func:`append_parquet`) after its first ``length``
    bytes with the footer ``meta``: a complete Parquet file, fsynced. Returns its row count."""
    footer = encode_struct(meta)
    with open(dst_path, "r+b") as dst:
        dst.truncate(length)
        dst.seek(length)
        dst.write(footer)
        dst.write(struct.pack("<I", len(footer)))
        dst.write(MAGIC)
        dst.flush()
        os.fsync(dst.fileno())
    return _field(meta, _FMD_NUM_ROWS)[2]


def pack_footer(meta: list) -> bytes:
    """The footer fields of a growing file (:func:`append_parquet`) as bytes to keep between
    commits: msgpack of the fields without the row groups, encoded, and each row group's
    encoding (:class:`Encoded`, so that neither this nor :func:`unpack_footer` decodes or
    encodes the row groups of earlier commits again: a footer decoded whole each commit cost
    up to 0.2 s per file late in the DEBS game)."""
    import msgpack

    groups = []
    for rg in _field(meta, _FMD_ROW_GROUPS)[2][1]:
        groups.append(rg if isinstance(rg, Encoded) else encode_struct(rg))
    head = encode_struct([f for f in meta if f[0] != _FMD_ROW_GROUPS])
    return msgpack.packb({"head": head, "groups": [bytes(g) for g in groups]})


def unpack_footer(data: bytes) -> list:
    """:func:`pack_footer`'s bytes back as footer fields (row groups as :class:`Encoded`)."""
    import msgpack

    doc = msgpack.unpackb(data)
    meta = decode_struct(doc["head"])
    meta.append([_FMD_ROW_GROUPS, _LIST, (_STRUCT, [Encoded(g) for g in doc["groups"]])])
    meta.sort(key=lambda f: f[0])
    return meta


def concat_parquet(paths: list[str], dst_path: str) -> int:
    """Write the row groups of the Parquet files ``paths`` (in order, one schema) to the new file
    ``dst_path``, byte for byte, and return its row count.

    Raises :class:`NotConcatenable` (before writing anything) when the files cannot be joined
    exactly; an ``OSError`` from the disk as it comes.
    """
    if not paths:
        raise NotConcatenable("no files to join")
    length, meta = append_parquet(dst_path, 0, None, paths)
    return finish_parquet(dst_path, length, meta)
