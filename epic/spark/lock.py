"""One deploy per work directory: ``<workdir>/deploy.lock`` (for a work directory on an object
store, ``<checkpoint dir>/deploy.lock`` on the driver's disk: docs/deploy.md, "Storage").

The lock is an ``flock`` on that file, held by the deploy's driver process for the whole deploy;
the file records who holds it (pid, host, start time) so a second ``epic deploy`` on the same work
directory is refused with that information. The kernel drops the lock when the holder exits, even
on SIGKILL or a crash, so a crashed deploy never leaves it stale: the next deploy takes it over.

File systems without ``flock`` support (some network mounts) fall back to the recorded pid: on the
same host, a live pid holds the lock; another host's record is trusted for :data:`STALE_AFTER`
seconds after its last refresh.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time

from epic.errors import EpicError

__all__ = ["WorkdirLock", "LOCK_NAME", "lock_holder"]

LOCK_NAME = "deploy.lock"
#: Without flock: how long another host's lock record counts as live.
STALE_AFTER = 3600.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _record(fd: int) -> dict:
    """The holder's record in an open lock file ({} when empty or unreadable)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 4096)
        return json.loads(data) if data.strip() else {}
    except (OSError, ValueError):
        return {}


def lock_holder(directory: str) -> dict | None:
    """Who holds the deploy lock in ``directory``: its record (pid, host, started) while a deploy
    holds it, ``None`` when nobody does (no lock file, or a lock the kernel dropped when its
    holder exited, killed or not). Takes no lock that outlives the call."""
    path = os.path.join(directory, LOCK_NAME)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _record(fd) or {}
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            holder = _record(fd)   # no flock here: the recorded pid decides
            if not holder.get("pid"):
                return None
            if holder.get("host") == socket.gethostname():
                return holder if _alive(int(holder["pid"])) else None
            fresh = time.time() - float(holder.get("started", 0)) < STALE_AFTER
            return holder if fresh else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class WorkdirLock:
    """Exclusive use of a work directory by one deploy (see the module docstring).

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> with WorkdirLock(d):
        ...     WorkdirLock(d).acquire()
        Traceback (most recent call last):
        ...
        epic.errors.EpicError: ...
    """

    def __init__(self, workdir: str, name: str | None = None):
        self.workdir = name or workdir  # what messages call it (a remote work dir's URI)
        self.path = os.path.join(workdir, LOCK_NAME)
        self._fd: int | None = None

    def _holder(self, fd: int) -> dict:
        return _record(fd)

    def _refuse(self, holder: dict) -> EpicError:
        when = holder.get("started")
        since = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
                 if isinstance(when, (int, float)) else "an unknown time")
        return EpicError(
            f"work directory {self.workdir} is in use by another epic deploy (pid "
            f"{holder.get('pid', '?')} on host {holder.get('host', '?')}, running since {since}; "
            f"lock file {self.path}). Two deploys on one work directory would corrupt its "
            f"topics and checkpoints. Fix: wait for it, stop it (`epic stop {self.workdir}`), or "
            "use another --workdir")

    def acquire(self) -> WorkdirLock:
        """Take the lock or raise :class:`EpicError` naming the holder's pid and host."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                # `epic status` takes a shared lock for an instant (lock_holder): a deploy that
                # starts then tries again for up to half a second before it refuses
                deadline = time.monotonic() + 0.5
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() >= deadline:
                            raise
                        time.sleep(0.02)
            except BlockingIOError:
                raise self._refuse(self._holder(fd)) from None
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
                holder = self._holder(fd)  # no flock here: trust a live-looking record
                if holder.get("pid") and holder.get("pid") != os.getpid():
                    same = holder.get("host") == socket.gethostname()
                    fresh = time.time() - float(holder.get("started", 0)) < STALE_AFTER
                    if (same and _alive(int(holder["pid"]))) or (not same and fresh):
                        raise self._refuse(holder) from None
            record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": time.time()}).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock up (the file stays, emptied: removing it would race a new holder)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> WorkdirLock:
        return self.acquire() if self._fd is None else self

    def __exit__(self, *exc) -> None:
        self.release()
