"""One evictor acts per tier directory, however many are started on a shared volume.

The evictor takes an exclusive flock(2) on `.kvtier-evict.lock` in the tier directory and
keeps it while it runs; any other evictor on the same directory finds it taken and stands by,
taking over once the holder exits (the kernel drops the lock with the holder's descriptor, so
no stale lock outlives a crashed evictor). flock works across nodes on the file systems of
kvtier's tiers: a local disk trivially; CephFS's kernel client (ceph-csi's default mounter)
sends them to the metadata server, which holds them for every client; NFS clients turn them
into NFS byte-range locks.

CephFS drops the locks of a client whose session it evicts, and from then on the client's
reads and writes on that descriptor fail with EIO; so each pass re-reads the lock file through
its descriptor and checks that the name still leads to it, and a holder that lost its lock
stands down and tries again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import time

from kvtier.evict.errors import EvictError
from kvtier.evict.tier_dir import TierDir

LOCK_NAME = ".kvtier-evict.lock"
_FLAGS = os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class EvictorLock:
    def __init__(self, tier: TierDir, identity: str | None = None) -> None:
        self.tier = tier
        self.identity = identity or f"{socket.gethostname()} pid {os.getpid()}"
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """True when this evictor holds the lock now (taking it if free)."""
        if self._fd is not None:
            if self._still_held(self._fd):
                return True
            self.release()
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        record = {"holder": self.identity, "since": round(time.time(), 3)}
        with contextlib.suppress(OSError):  # who holds it is for people; the flock decides
            data = json.dumps(record).encode() + b"\n"
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        return True

    def holder(self) -> str:
        """Who holds the lock, as its holder wrote it (best effort, for messages)."""
        try:
            fd = os.open(
                LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=self.tier.fd
            )
        except OSError:
            return "unknown"
        try:
            record = json.loads(os.read(fd, 4096) or b"{}")
            return str(record.get("holder", "unknown"))
        except (OSError, ValueError, AttributeError):
            return "unknown"
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def _open(self) -> int:
        where = f"{self.tier.path}/{LOCK_NAME}"
        try:
            fd = os.open(LOCK_NAME, os.O_RDWR | _FLAGS, 0o664, dir_fd=self.tier.fd)
        except PermissionError:  # made by another user: flock needs no write access
            try:
                fd = os.open(LOCK_NAME, os.O_RDONLY | _FLAGS, 0o664, dir_fd=self.tier.fd)
            except OSError as exc:
                raise EvictError(f"{where}: cannot open the lock file: {exc.strerror}") from None
        except OSError as exc:
            why = "a symlink" if exc.errno == errno.ELOOP else exc.strerror
            raise EvictError(f"{where}: cannot open the lock file: {why}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise EvictError(f"{where}: the lock file is not a regular file")
        return fd

    def _still_held(self, fd: int) -> bool:
        """The lock file is still the one at the name, and readable through our descriptor."""
        try:
            os.pread(fd, 1, 0)
            mine = os.fstat(fd)
            named = os.stat(LOCK_NAME, dir_fd=self.tier.fd, follow_symlinks=False)
        except OSError:
            return False
        return (mine.st_dev, mine.st_ino) == (named.st_dev, named.st_ino)
