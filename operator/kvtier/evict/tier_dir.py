"""Open the tier directory once, refusing any the evictor may not touch.

Everything later happens relative to the returned descriptor, never by path, so renaming or
replacing the path during a pass cannot redirect the evictor elsewhere.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass

from kvtier.evict.errors import BadDirectory

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class TierDir:
    path: str  # resolved, for messages
    fd: int
    dev: int  # the file system: the evictor never crosses into another one

    def close(self) -> None:
        os.close(self.fd)


def open_tier_dir(path: str, allowed_roots: Sequence[str] = ()) -> TierDir:
    """The tier directory at `path`, opened; BadDirectory names the rule it breaks."""
    if not path:
        raise BadDirectory("--dir: must not be empty")
    real = os.path.realpath(path)
    shown = path if real == path else f"{path} ({real})"
    if real == "/":
        raise BadDirectory(f"--dir {shown}: refusing the root directory /")
    roots = [os.path.realpath(root) for root in allowed_roots]
    if roots and not any(_within(real, root) for root in roots):
        raise BadDirectory(
            f"--dir {shown}: outside the allowed roots ({', '.join(roots)}; --allowed-root)"
        )
    try:
        fd = os.open(real, DIR_FLAGS)
    except OSError as exc:
        raise BadDirectory(f"--dir {shown}: {_why(exc)}") from None
    try:
        if not os.access(real, os.W_OK | os.X_OK):
            raise BadDirectory(f"--dir {shown}: not writable by uid {os.geteuid()}")
        return TierDir(path=real, fd=fd, dev=os.fstat(fd).st_dev)
    except BaseException:
        os.close(fd)
        raise


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _why(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "does not exist"
    if exc.errno == errno.ENOTDIR:
        return "is not a directory"
    if exc.errno == errno.EACCES:
        return f"cannot be read by uid {os.geteuid()} (permission denied)"
    return exc.strerror or str(exc)
