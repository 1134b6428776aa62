"""Which replica serves a request: random, round-robin, session-sticky, or prefix-aware.

`prefix` is llm-d's inference scheduler (the Gateway API Inference Extension's endpoint
picker) with its scorers weighed and the highest score picked, ties at random:
- prefix-cache-scorer: the share of the request's blocks the router believes the replica
  holds. Its belief is its own index, not the replica's cache: every request routed to a
  replica is recorded there, in an LRU of `lruCapacityPerServer` blocks per replica, so an
  index sized to HBM forgets what a CPU tier still holds.
- queue-scorer: (most waiting − this replica's waiting) ÷ (most − fewest), 1 when all equal;
  waiting as vLLM's num_requests_waiting counts it, with the requests whose prefix is still
  being loaded from the CPU or disk tier.
- kv-cache-utilization-scorer: 1 − the replica's KV-cache usage.
Weights and capacity: SimConfig.router_weights and lru_capacity_per_server (docs/simulator.md
gives their sources).
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from kvtier.simulate.cache import PrefixLRU, chain_hit, store_chain
from kvtier.simulate.config import SimConfig

if TYPE_CHECKING:
    from kvtier.simulate.engine import Replica, Request

ROUTER_BLOCK_TOKENS = 16  # the index's block: vLLM's default block size
# The scorer hashes at most this many leading blocks of a prompt (its maxPrefixBlocksToMatch):
# two prompts alike in their first 4,096 tokens look the same to it.
MAX_PREFIX_BLOCKS = 256


class Router:
    def __init__(
        self, config: SimConfig, replicas: Sequence[Replica], block_tokens: int, cpu: bool = False
    ) -> None:
        self.replicas = list(replicas)
        self.policy = config.routing
        self.rng = random.Random(f"{config.seed}/router")
        self.turn = 0
        self.homes: dict[Hashable, int] = {}
        self.weights = config.router_weights
        capacity = config.lru_capacity_per_server * ROUTER_BLOCK_TOKENS
        self.index = [PrefixLRU(capacity, ROUTER_BLOCK_TOKENS) for _ in self.replicas]
        # With a CPU tier, the tiered guide's second prefix scorer: its own index (sized for
        # the CPU tier) of the same routed requests.
        self.cpu_weight = config.cpu_prefix_weight if cpu else 0.0
        cpu_capacity = config.cpu_lru_capacity_per_server * ROUTER_BLOCK_TOKENS
        self.cpu_index = [PrefixLRU(cpu_capacity, ROUTER_BLOCK_TOKENS) for _ in self.replicas]
        self.matched = MAX_PREFIX_BLOCKS * ROUTER_BLOCK_TOKENS

    def route(
        self, request: Request, random_pick: int | None = None, home: int | None = None
    ) -> None:
        """Send `request` to its replica. Agentic sessions bring their own draws
        (`random_pick`, `home`) so that a seed's workload is the same under every policy."""
        n = len(self.replicas)
        if self.policy == "random":
            chosen = self.rng.randrange(n) if random_pick is None else random_pick
        elif self.policy == "round-robin":
            chosen = self.turn % n
            self.turn += 1
        elif self.policy == "sticky":
            if home is not None:
                chosen = home
            else:
                chosen = self.homes.setdefault(request.affinity, self.rng.randrange(n))
        else:
            chosen = self._best(request)
            hashed = min(request.prompt, self.matched)
            store_chain(self.index[chosen], request.segments, hashed)
            if self.cpu_weight:
                store_chain(self.cpu_index[chosen], request.segments, hashed)
        self.replicas[chosen].submit(request)

    def _best(self, request: Request) -> int:
        if len(self.replicas) == 1:
            return 0
        w_queue, w_kv, w_prefix = self.weights
        queues = [r.num_requests_waiting for r in self.replicas]
        low, high = min(queues), max(queues)
        hashed = min(request.prompt, self.matched)
        best: list[int] = []
        top = -1.0
        for i, replica in enumerate(self.replicas):
            queue = 1.0 if high == low else (high - queues[i]) / (high - low)
            prefix = min(chain_hit(self.index[i], request.segments), hashed) / hashed
            score = w_queue * queue + w_kv * (1 - replica.kv_usage) + w_prefix * prefix
            if self.cpu_weight:
                cpu = min(chain_hit(self.cpu_index[i], request.segments), hashed) / hashed
                score += self.cpu_weight * cpu
            if score > top + 1e-12:
                best, top = [i], score
            elif abs(score - top) <= 1e-12:
                best.append(i)
        return best[0] if len(best) == 1 else self.rng.choice(best)
