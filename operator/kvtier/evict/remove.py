"""Delete one recorded block file, re-checked at the last moment, never outside the tier.

The path is walked from the tier's descriptor one component at a time with O_NOFOLLOW (a
directory swapped for a symlink since the scan fails to open, ELOOP), and the file is looked
at again just before unlink: still a regular file on the tier's file system, the same inode,
one link, and not used since the scan. Anything else is left alone. Consecutive paths that
share directories reuse their descriptors, so callers pass paths sorted.
"""

from __future__ import annotations

import enum
import os
import stat
import time
from collections.abc import Callable

from kvtier.evict.policy import is_protected, last_use
from kvtier.evict.tier_dir import DIR_FLAGS, TierDir


class Outcome(enum.Enum):
    REMOVED = "removed"
    VANISHED = "vanished"  # gone already: vLLM replaced it, another writer, a user
    IN_USE = "in use"  # read, rewritten or replaced since the scan: kept
    REFUSED = "refused"  # no longer a regular single-link file of the tier: kept
    FAILED = "failed"  # an error from the file system (see the message)


class Remover:
    def __init__(
        self,
        tier: TierDir,
        protect_seconds: float,
        *,
        dry_run: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tier = tier
        self.protect_seconds = protect_seconds
        self.dry_run = dry_run
        self.clock = clock
        self.last_error = ""
        self._open: list[tuple[str, int]] = []  # (directory name, fd) from the tier down

    def remove(self, path: str, used_at: float, inode: int) -> tuple[Outcome, int]:
        """(what happened, bytes freed) for the file at `path` (relative to the tier) that
        the scan saw with this last use and inode."""
        *dirs, name = path.split("/")
        try:
            parent = self._descend(dirs)
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if not (
                stat.S_ISREG(st.st_mode)
                and st.st_dev == self.tier.dev
                and st.st_ino == inode
                and st.st_nlink == 1
            ):
                return Outcome.REFUSED, 0
            used = last_use(st.st_atime, st.st_mtime)
            if used > used_at or is_protected(used, self.clock(), self.protect_seconds):
                return Outcome.IN_USE, 0
            if not self.dry_run:
                os.unlink(name, dir_fd=parent)
            return Outcome.REMOVED, st.st_size
        except FileNotFoundError:
            return Outcome.VANISHED, 0
        except OSError as exc:
            self.last_error = f"{path}: {exc.strerror or exc}"
            return Outcome.FAILED, 0

    def close(self) -> None:
        self._truncate(0)

    def _descend(self, dirs: list[str]) -> int:
        keep = 0
        while keep < len(self._open) and keep < len(dirs) and self._open[keep][0] == dirs[keep]:
            keep += 1
        self._truncate(keep)
        fd = self._open[-1][1] if self._open else self.tier.fd
        for name in dirs[keep:]:
            fd = os.open(name, DIR_FLAGS, dir_fd=fd)
            self._open.append((name, fd))
        return fd

    def _truncate(self, keep: int) -> None:
        while len(self._open) > keep:
            os.close(self._open.pop()[1])
