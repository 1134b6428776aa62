"""Walk one tier directory without ever leaving it, and list the block files it may delete.

Every directory is opened relative to its parent's descriptor with O_NOFOLLOW, so a symlink
anywhere in the tree is never followed; symlinks, devices and FIFOs are not even counted, and
a directory on another file system (a mount inside the tier) is not entered. A file or
directory vanishing mid-walk is normal with vLLM writing and renaming: it is passed over.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field

from kvtier.evict.layout import group_dir_prefix, is_block_file, is_prefix_dir, is_rank_dir
from kvtier.evict.policy import is_protected, last_use
from kvtier.evict.tier_dir import DIR_FLAGS, TierDir

MAX_DEPTH = 16  # vLLM's layout is 4 deep; deeper trees are not a tier's
MAX_NOTES = 5

# Where a directory sits in vLLM's layout: its block files live only at GROUP.
_ROOT, _RANK, _PREFIX, _GROUP, _OTHER = range(5)


@dataclass
class Candidates:
    """The block files old enough to delete, as parallel arrays: one str per file plus 24
    bytes of numbers (a 600,000-file tier fits in about 100 MiB)."""

    used_at: array[float] = field(default_factory=lambda: array("d"))
    sizes: array[int] = field(default_factory=lambda: array("q"))
    inodes: array[int] = field(default_factory=lambda: array("Q"))
    paths: list[str] = field(default_factory=list)  # relative to the tier directory

    def __len__(self) -> int:
        return len(self.paths)


@dataclass
class Scan:
    files: int = 0  # regular files anywhere in the tree, and their bytes
    bytes: int = 0
    block_files: int = 0  # vLLM's block files among them (and its temporary files)
    block_bytes: int = 0
    protected_files: int = 0  # block files used within the protection age
    protected_bytes: int = 0
    skipped_dirs: int = 0  # not entered: unreadable, on another file system, too deep
    notes: list[str] = field(default_factory=list)  # why, for the first few
    candidates: Candidates = field(default_factory=Candidates)


def scan(tier: TierDir, now: float, protect_seconds: float) -> Scan:
    """Count the tree under `tier` and collect its unprotected block files."""
    walker = _Walker(tier.dev, now, protect_seconds)
    walker.walk(tier.fd, "", 0, _ROOT, "")
    return walker.result


class _Walker:
    def __init__(self, dev: int, now: float, protect_seconds: float) -> None:
        self.dev = dev
        self.now = now
        self.protect_seconds = protect_seconds
        self.result = Scan()

    def walk(self, fd: int, rel: str, depth: int, state: int, prefix: str) -> None:
        result = self.result
        found = result.candidates
        subdirs: list[str] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry.name)
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        continue  # a symlink, device, FIFO or socket: never the tier's
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if st.st_dev != self.dev:
                    continue
                result.files += 1
                result.bytes += st.st_size
                # A file with another name elsewhere (a hard link) is not one vLLM wrote.
                if state != _GROUP or st.st_nlink != 1 or not is_block_file(entry.name, prefix):
                    continue
                result.block_files += 1
                result.block_bytes += st.st_size
                used_at = last_use(st.st_atime, st.st_mtime)
                if is_protected(used_at, self.now, self.protect_seconds):
                    result.protected_files += 1
                    result.protected_bytes += st.st_size
                    continue
                found.used_at.append(used_at)
                found.sizes.append(st.st_size)
                found.inodes.append(st.st_ino)
                found.paths.append(f"{rel}/{entry.name}")
        for name in subdirs:
            self._enter(fd, name, f"{rel}/{name}" if rel else name, depth + 1, state, prefix)

    def _enter(self, parent: int, name: str, rel: str, depth: int, state: int, prefix: str) -> None:
        if depth > MAX_DEPTH:
            self._skip(rel, f"deeper than {MAX_DEPTH} levels")
            return
        state, prefix = _child(state, prefix, name)
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            return
        except OSError as exc:  # replaced by a symlink since the listing (ELOOP), unreadable
            self._skip(rel, exc.strerror or str(exc))
            return
        try:
            if os.fstat(fd).st_dev != self.dev:
                self._skip(rel, "another file system is mounted there")
                return
            self.walk(fd, rel, depth, state, prefix)
        except FileNotFoundError:  # removed while being listed
            pass
        except OSError as exc:
            self._skip(rel, exc.strerror or str(exc))
        finally:
            os.close(fd)

    def _skip(self, rel: str, why: str) -> None:
        self.result.skipped_dirs += 1
        if len(self.result.notes) < MAX_NOTES:
            self.result.notes.append(f"{rel}: {why}")


def _child(state: int, prefix: str, name: str) -> tuple[int, str]:
    """The layout state and hash prefix of directory `name` inside one in `state`."""
    if state == _ROOT and is_rank_dir(name):
        return _RANK, ""
    if state == _RANK and is_prefix_dir(name):
        return _PREFIX, name
    if state == _PREFIX:
        group = group_dir_prefix(name)
        if group is not None:
            return _GROUP, prefix + group
    return _OTHER, ""
