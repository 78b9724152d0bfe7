"""Where epic writes: plain paths and ``file://`` URIs; every other scheme refused with the reason.

``epic deploy``'s tasks memory-map topic segments and append CSV parts in place, so work
directories and file outputs must be on a mounted file system (a local disk, or a network file
system mounted at the same path on every machine, docs/deploy.md). ``hdfs://``, ``s3://`` and
other object-store schemes are refused at start instead of being written to a local directory
that happens to be named after them.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlparse

from .errors import SpecError

__all__ = ["local_path"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def local_path(path: str | os.PathLike, what: str = "path") -> str:
    """``path`` as a local file-system path: a plain path as it is, a ``file://`` URI decoded.

    >>> local_path("file:///data/wd")
    '/data/wd'
    >>> local_path("out/a.csv")
    'out/a.csv'

    Raises:
        SpecError: another scheme (``hdfs://``, ``s3://``, ...), naming it and the fix.
    """
    p = os.fspath(path)
    m = _SCHEME.match(p)
    if not m:
        return p
    scheme = m.group(1).lower()
    if scheme == "file":
        u = urlparse(p)
        if u.netloc not in ("", "localhost"):
            raise SpecError(f"{what} {p!r}: a file:// URI with host {u.netloc!r} is not local; "
                            "use file:///absolute/path (or mount the share and give its path)")
        return unquote(u.path)
    raise SpecError(f"{what} {p!r}: the {scheme}:// scheme is not supported: epic's deploy tasks "
                    "memory-map topic files and append output parts in place, so it must be a "
                    "mounted file system (a local disk, or a network file system mounted at the "
                    "same path on every machine). Give a path or a file:// URI")
