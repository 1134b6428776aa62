"""A KV-cache tier as an LRU of prompt segments, counted in tokens of whole blocks.

Every request of a session reads its cached prefix from the first block on, so all blocks of
one prefix are touched together and share one recency. Eviction takes blocks from the tail
of the least recently used prefix first (a prefix without its head is useless, which is why
vLLM frees a request's blocks tail first), so an entry is just "the first n tokens".
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence


class PrefixLRU:
    """Prefixes by key (a session, or the shared system prompt); capacity in tokens."""

    def __init__(self, capacity_tokens: int, block_tokens: int) -> None:
        self.capacity = capacity_tokens
        self.block = block_tokens
        self.used = 0
        self._entries: OrderedDict[Hashable, int] = OrderedDict()

    def cached(self, key: Hashable) -> int:
        """Tokens of `key`'s prefix this tier holds (without touching it)."""
        return self._entries.get(key, 0)

    def touch(self, key: Hashable, tokens: int) -> None:
        """Hold the first `tokens` (whole blocks) of `key`, most recently used."""
        tokens = tokens // self.block * self.block
        if tokens > self.capacity:
            tokens = self.capacity
        held = self._entries.pop(key, 0)
        if held > tokens:
            tokens = held
        self._entries[key] = tokens
        self.used += tokens - held
        if self.used > self.capacity:
            self.shrink(self.capacity)

    def take(self, key: Hashable) -> int:
        """Remove `key`'s prefix and return its length (a running request now owns it)."""
        held = self._entries.pop(key, 0)
        self.used -= held
        return held

    def shrink(self, capacity: int) -> None:
        """Evict least-recently-used tails until at most `capacity` tokens are held."""
        entries = self._entries
        while self.used > capacity and entries:
            key, held = next(iter(entries.items()))
            drop = min(held, -(-(self.used - capacity) // self.block) * self.block)
            self.used -= drop
            if drop == held:
                del entries[key]
            else:
                entries[key] = held - drop


def chain_hit(cache: PrefixLRU, segments: Sequence[tuple[Hashable, int]]) -> int:
    """Leading tokens of a prompt's chain `cache` holds: a segment counts only after whole
    parents (vLLM's block hashes include the parent's)."""
    entries = cache._entries  # read directly: this is the simulator's innermost loop
    total = 0
    for key, tokens in segments:
        held = entries.get(key, 0)
        if held < tokens:
            return total + held
        total += tokens
    return total


def block_chain_hit(cache: PrefixLRU, segments: Sequence[tuple[Hashable, int]]) -> int:
    """Leading tokens of a prompt's chain `cache` holds, up to one of the prompt's own block
    boundaries (or its end). A segment ending inside a block counts whole once its whole
    blocks are held: the block it shares with the next segment is held with that one."""
    block, entries = cache.block, cache._entries
    end = 0
    for key, tokens in segments:
        held = entries.get(key, 0)  # uncapped: read only when below `tokens`
        if held < tokens - tokens % block:
            return end + held - (end + held) % block
        end += tokens
    return end


def block_chain_hits(
    caches: Sequence[PrefixLRU], segments: Sequence[tuple[Hashable, int]], limit: int
) -> list[int]:
    """block_chain_hit in each of `caches`, at most `limit`. One look-up says most of them:
    a cache without a prompt's first segment holds none of it, once that has a whole block."""
    key, tokens = segments[0]
    return [
        min(block_chain_hit(cache, segments), limit)
        if key in cache._entries or tokens < cache.block
        else 0
        for cache in caches
    ]


def store_chain(cache: PrefixLRU, segments: Sequence[tuple[Hashable, int]], tokens: int) -> None:
    """Hold the first `tokens` of a prompt's chain in `cache` (whole blocks)."""
    for key, n in segments:
        if tokens <= 0:
            return
        cache.touch(key, min(n, tokens))
        tokens -= n
