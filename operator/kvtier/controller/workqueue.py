"""A de-duplicating work queue with per-key exponential backoff (as controller-runtime's).

A key is processed by one worker at a time; a key added while it is processed runs once
more afterwards, so no change is ever lost and no key is reconciled concurrently. Work about
a key can also be held until the key's processing is done (`hold`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
log = logging.getLogger("kvtier.workqueue")


class WorkQueue(Generic[K]):
    def __init__(self, base_delay: float = 0.5, max_delay: float = 300.0) -> None:
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._pending: set[K] = set()
        self._active: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._held: dict[K, list[Callable[[], None]]] = {}
        self.base_delay = base_delay
        self.max_delay = max_delay

    def add(self, key: K) -> None:
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._pending:
            self._pending.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self.add, key)

    def retry(self, key: K) -> float:
        """Schedule `key` again after a failure; returns the delay chosen."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay: float = min(self.base_delay * (2**failures), self.max_delay)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts the backoff afresh."""
        self._failures.pop(key, None)

    async def get(self) -> K:
        key = await self._queue.get()
        self._pending.discard(key)
        self._active.add(key)
        return key

    def hold(self, key: K, callback: Callable[[], None]) -> bool:
        """Run `callback` when `key`'s processing is done (callbacks in the order held);
        False, and nothing held, when `key` is not being processed."""
        if key not in self._active:
            return False
        self._held.setdefault(key, []).append(callback)
        return True

    def done(self, key: K) -> None:
        self._active.discard(key)
        for callback in self._held.pop(key, ()):
            try:
                callback()
            except Exception:  # a held callback must not stop the worker that finished
                log.exception("work held for %s failed", key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def idle(self) -> bool:
        return not self._pending and not self._active
