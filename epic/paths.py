"""Which paths and URIs each of epic's outputs takes (the stores themselves: :mod:`epic.storage`).

* :func:`output_path` - file and topic sinks: a plain path, a ``file://`` URI, or a URI of a store
  pyarrow's filesystem layer reaches (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``), kept as
  given and resolved when the run starts.
* :func:`workdir_path` - ``epic deploy``'s work directory: the same choices. Its topics, state
  snapshots, spool files, status and manifest files go through :mod:`epic.storage` (tasks
  memory-map local topic segments and spool files, and read a remote one whole into memory).
  Spark's own checkpoints and the deploy lock stay on the driver's disk (``--checkpoint-dir``:
  pip's pyspark has no Hadoop connector for object stores, and ``flock`` needs a local file);
  docs/deploy.md, "Storage".
* :func:`local_path` - what must be on a mounted file system (``--checkpoint-dir``): other
  schemes are refused at start with the reason, never written to a local directory named after
  them.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlparse

from .errors import SpecError
from .storage import check_uri

__all__ = ["local_path", "output_path", "workdir_path", "is_remote"]

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
    scheme = check_uri(p, what)  # refuses unknown schemes and foreign file:// hosts
    if scheme is None:
        return unquote(urlparse(p).path)
    raise SpecError(f"{what} {p!r}: the {scheme}:// scheme is not supported here: it must be a "
                    "mounted file system (Spark writes its checkpoints there through Hadoop's "
                    "file systems, and pip's pyspark has no connector for object stores). Give "
                    "a path or a file:// URI; the work directory and sinks may be on "
                    f"{scheme}:// (docs/deploy.md, 'Storage')")


def workdir_path(path: str | os.PathLike, what: str = "work directory") -> str:
    """``epic deploy``'s work directory: a local path (``file://`` decoded) or a remote URI as
    given, without a trailing slash (:func:`output_path`).

    >>> workdir_path("s3://bucket/wd/"), workdir_path("file:///data/wd")
    ('s3://bucket/wd', '/data/wd')
    """
    return output_path(path, what)


def output_path(path: str | os.PathLike, what: str = "path") -> str:
    """A sink's path: local paths as :func:`local_path` gives them; a remote URI as given, after
    the checks that need no network (:func:`epic.storage.check_uri`).

    >>> output_path("s3://bucket/out/q1.csv"), output_path("file:///tmp/q1.csv")
    ('s3://bucket/out/q1.csv', '/tmp/q1.csv')

    Raises:
        SpecError: an unsupported scheme, options or credentials in the URI, with the reason.
    """
    p = os.fspath(path)
    if check_uri(p, what) is None:
        return local_path(p, what)
    return p.rstrip("/")


def is_remote(path: str | os.PathLike) -> bool:
    """Whether ``path`` (as :func:`output_path` returns it) names a remote store.

    >>> is_remote("s3://b/x"), is_remote("/tmp/x")
    (True, False)
    """
    return _SCHEME.match(os.fspath(path)) is not None
