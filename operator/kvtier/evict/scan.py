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

from kvtier.evict.layout import (
    BLOCK,
    NOT_A_BLOCK,
    block_dirs,
    block_kind,
    group_dir,
    is_prefix_dir,
    is_rank_dir,
)
from kvtier.evict.policy import is_protected, last_use
from kvtier.evict.tier_dir import DIR_FLAGS, TierDir

MAX_DEPTH = 16  # vLLM's layout is 4 deep; deeper trees are not a tier's
MAX_NOTES = 5
# A fresh ext4 volume (an LVM or TopoLVM claim) has one at its root, root-only: never vLLM's,
# and not worth a note on every pass.
LOST_AND_FOUND = "lost+found"

# Where a directory sits in vLLM's layout: its block files live only at GROUP.
_ROOT, _RANK, _PREFIX, _GROUP, _OTHER = range(5)


@dataclass(frozen=True)
class _Place:
    """A directory's place in vLLM's layout, and what its position tells about its files."""

    state: int
    rank: int = -1  # index into Candidates.rank_dirs
    prefix: str = ""  # the hex digits of the hashes below
    group: int = -1


_OUTSIDE = _Place(_OTHER)


@dataclass
class Candidates:
    """The block files old enough to delete, in parallel arrays.

    A block's path is rebuilt from its rank directory, hash and group (vLLM derives the
    directories from the hash), so each costs about 70 bytes: a 600,000-file tier's list
    fits in some 40 MiB. Files that do not rebuild that way (a writer's temporary file) keep
    their path as text.
    """

    used_at: array[float] = field(default_factory=lambda: array("d"))
    sizes: array[int] = field(default_factory=lambda: array("q"))
    inodes: array[int] = field(default_factory=lambda: array("Q"))
    # ≥ 0: the offset of the block's hash in `hashes`; else -1 - (its index in `paths`).
    slots: array[int] = field(default_factory=lambda: array("q"))
    hash_bytes: array[int] = field(default_factory=lambda: array("B"))
    ranks: array[int] = field(default_factory=lambda: array("L"))
    groups: array[int] = field(default_factory=lambda: array("L"))
    hashes: bytearray = field(default_factory=bytearray)
    rank_dirs: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # relative to the tier directory

    def __len__(self) -> int:
        return len(self.used_at)

    def path(self, i: int) -> str:
        """File i's path, relative to the tier directory."""
        slot = self.slots[i]
        if slot < 0:
            return self.paths[-1 - slot]
        hash_hex = self.hashes[slot : slot + self.hash_bytes[i]].hex()
        where = block_dirs(hash_hex, self.groups[i])
        return f"{self.rank_dirs[self.ranks[i]]}/{where}/{hash_hex}.bin"

    def add(self, used_at: float, size: int, inode: int) -> None:
        self.used_at.append(used_at)
        self.sizes.append(size)
        self.inodes.append(inode)

    def add_block(self, hash_hex: str, rank: int, group: int) -> None:
        self.slots.append(len(self.hashes))
        self.hashes += bytes.fromhex(hash_hex)
        self.hash_bytes.append(len(hash_hex) // 2)
        self.ranks.append(rank)
        self.groups.append(group)

    def add_path(self, path: str) -> None:
        self.slots.append(-1 - len(self.paths))
        self.paths.append(path)
        self.hash_bytes.append(0)
        self.ranks.append(0)
        self.groups.append(0)


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
    walker.walk(tier.fd, "", 0, _Place(_ROOT))
    return walker.result


class _Walker:
    def __init__(self, dev: int, now: float, protect_seconds: float) -> None:
        self.dev = dev
        self.now = now
        self.protect_seconds = protect_seconds
        self.result = Scan()

    def walk(self, fd: int, rel: str, depth: int, place: _Place) -> None:
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
                if place.state != _GROUP or st.st_nlink != 1:
                    continue
                name = entry.name
                kind = block_kind(name, place.prefix)
                if kind == NOT_A_BLOCK:
                    continue
                result.block_files += 1
                result.block_bytes += st.st_size
                used_at = last_use(st.st_atime, st.st_mtime)
                if is_protected(used_at, self.now, self.protect_seconds):
                    result.protected_files += 1
                    result.protected_bytes += st.st_size
                    continue
                found.add(used_at, st.st_size, st.st_ino)
                hash_hex = name[:-4]
                if kind == BLOCK and len(hash_hex) % 2 == 0 and len(hash_hex) < 512:
                    found.add_block(hash_hex, place.rank, place.group)
                else:
                    found.add_path(f"{rel}/{name}")
        for name in subdirs:
            if place.state == _ROOT and name == LOST_AND_FOUND:
                continue
            self._enter(fd, name, f"{rel}/{name}" if rel else name, depth + 1, place)

    def _enter(self, parent: int, name: str, rel: str, depth: int, place: _Place) -> None:
        if depth > MAX_DEPTH:
            self._skip(rel, f"deeper than {MAX_DEPTH} levels")
            return
        child = self._child(place, name)
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
            self.walk(fd, rel, depth, child)
        except FileNotFoundError:  # removed while being listed
            pass
        except OSError as exc:
            self._skip(rel, exc.strerror or str(exc))
        finally:
            os.close(fd)

    def _child(self, place: _Place, name: str) -> _Place:
        """The place of directory `name` inside one at `place`."""
        if place.state == _ROOT and is_rank_dir(name):
            ranks = self.result.candidates.rank_dirs
            ranks.append(name)
            return _Place(_RANK, rank=len(ranks) - 1)
        if place.state == _RANK and is_prefix_dir(name):
            return _Place(_PREFIX, rank=place.rank, prefix=name)
        if place.state == _PREFIX:
            group = group_dir(name)
            if group is not None:
                return _Place(_GROUP, place.rank, place.prefix + group[0], group[1])
        return _OUTSIDE

    def _skip(self, rel: str, why: str) -> None:
        self.result.skipped_dirs += 1
        if len(self.result.notes) < MAX_NOTES:
            self.result.notes.append(f"{rel}: {why}")
