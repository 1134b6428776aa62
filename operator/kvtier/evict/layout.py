"""vLLM's fs secondary tier on disk: which names are its block files.

vLLM (0.24 and 0.33 alike) keeps, under the tier's `root_dir`:

    <model>_<digest>/config.json                      what the digest stands for
    <model>_<digest>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin

where <digest> is 12 hex digits of a hash over model, block size, parallelism and dtype,
<hash> is the block's content hash in hex and <hhh>, <hh> are its first five digits (to keep
directories small). A block is written to `<hash>.bin_<random>.tmp` and renamed into place,
so a `.tmp` file that has not changed for long was left by a killed writer.

Only names of that shape are ever eviction candidates; everything else in the tree (config
files, a user's own files) only counts towards the tier's usage.
"""

from __future__ import annotations

import re

_RANK_DIR = re.compile(r".+_[0-9a-f]{12}_r[0-9]+")
_PREFIX_DIR = re.compile(r"[0-9a-f]{3}")
_GROUP_DIR = re.compile(r"([0-9a-f]{2})_g(0|[1-9][0-9]{0,8})")  # a group index fits 32 bits
_BLOCK = re.compile(r"([0-9a-f]{5,})\.bin(_[0-9]+\.tmp)?")

NOT_A_BLOCK, BLOCK, TEMPORARY = range(3)


def is_rank_dir(name: str) -> bool:
    """`<model>_<digest>_r<rank>`: a directory of one model digest and rank."""
    return _RANK_DIR.fullmatch(name) is not None


def is_prefix_dir(name: str) -> bool:
    """`<hhh>`: the first three hex digits of the block hashes below it."""
    return _PREFIX_DIR.fullmatch(name) is not None


def group_dir(name: str) -> tuple[str, int] | None:
    """`<hh>_g<group>` → (`<hh>`, the 4th and 5th hex digits; group), else None."""
    match = _GROUP_DIR.fullmatch(name)
    return (match[1], int(match[2])) if match else None


def block_kind(name: str, prefix: str) -> int:
    """BLOCK for `<hash>.bin`, TEMPORARY for a writer's `<hash>.bin_<n>.tmp`, with a hash
    starting with prefix (the five hex digits its two directories spell); else NOT_A_BLOCK."""
    match = _BLOCK.fullmatch(name)
    if match is None or not match[1].startswith(prefix):
        return NOT_A_BLOCK
    return TEMPORARY if match[2] else BLOCK


def block_dirs(hash_hex: str, group: int) -> str:
    """`<hhh>/<hh>_g<group>`: where vLLM puts the block with this hash."""
    return f"{hash_hex[:3]}/{hash_hex[3:5]}_g{group}"
