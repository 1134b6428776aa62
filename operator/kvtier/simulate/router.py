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
- no-hit-lru-scorer (with its weight set): 0.5 everywhere when some replica's index matches a
  block of the request; otherwise replicas that never took such a cold request first, then
  the least recently chosen for one: 1 − rank ÷ (replicas − 1).
Weights and capacities: SimConfig.router_weights, lru_capacity_per_server, router_autotune
and the CPU scorer's fields (docs/simulator.md gives their sources).
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from kvtier.simulate.cache import PrefixLRU, block_chain_hits, store_chain
from kvtier.simulate.config import ROUTER_BLOCK_TOKENS, SimConfig

if TYPE_CHECKING:
    from kvtier.simulate.engine import Replica, Request
    from kvtier.simulate.workload import Segment

# The scorer hashes at most this many leading blocks of a prompt (its maxPrefixBlocksToMatch):
# two prompts alike that far look the same to it.
MAX_PREFIX_BLOCKS = 256


class PrefixIndex:
    """One prefix producer's belief: an LRU of its blocks per replica, fed with every request
    routed there, matching at most MAX_PREFIX_BLOCKS blocks of a prompt."""

    def __init__(self, replicas: int, blocks: int, block_tokens: int) -> None:
        self.block = block_tokens
        self.lrus = [PrefixLRU(blocks * block_tokens, block_tokens) for _ in range(replicas)]
        self.limit = MAX_PREFIX_BLOCKS * block_tokens

    def hits(self, segments: Sequence[Segment], hashed: int) -> list[int]:
        """Leading tokens of a prompt each replica's index matches, up to `hashed`."""
        return block_chain_hits(self.lrus, segments, hashed)

    def record(self, replica: int, segments: Sequence[Segment], hashed: int) -> None:
        store_chain(self.lrus[replica], segments, hashed)


class Router:
    def __init__(
        self,
        config: SimConfig,
        replicas: Sequence[Replica],
        block_tokens: int,
        cpu: bool = False,
        gpu_blocks: int = 0,
    ) -> None:
        self.replicas = list(replicas)
        n = len(self.replicas)
        self.policy = config.routing
        self.rng = random.Random(f"{config.seed}/router")
        self.turn = 0
        self.homes: dict[Hashable, int] = {}
        self.weights = config.router_weights
        if config.router_autotune and gpu_blocks:  # the servers' block size and block count
            self.index = PrefixIndex(n, gpu_blocks, block_tokens)
        else:
            self.index = PrefixIndex(n, config.lru_capacity_per_server, ROUTER_BLOCK_TOKENS)
        # With a CPU tier, the tiered guide's second prefix scorer: its own index (sized for
        # the CPU tier) of the same routed requests.
        self.cpu_weight = config.cpu_prefix_weight if cpu else 0.0
        self.cpu_index = PrefixIndex(
            n, config.cpu_lru_capacity_per_server, config.cpu_router_block_tokens
        )
        self.no_hit_weight = config.no_hit_lru_weight
        self.cold_order: list[int] = []  # replicas that took a cold request, least recent first

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
            segments, prompt = request.segments, request.prompt
            hashed = min(prompt, self.index.limit)
            held = self.index.hits(segments, hashed)
            gpu = [hit / hashed for hit in held]
            # Cold: no replica's GPU index matches a block (what the no-hit-LRU scorer reads).
            cold = bool(self.no_hit_weight) and all(hit < self.index.block for hit in held)
            cpu: list[float] = []
            cpu_hashed = min(prompt, self.cpu_index.limit)
            if self.cpu_weight:
                cpu = [hit / cpu_hashed for hit in self.cpu_index.hits(segments, cpu_hashed)]
            chosen = self._best(gpu, cpu, cold)
            if cold:
                if chosen in self.cold_order:
                    self.cold_order.remove(chosen)
                self.cold_order.append(chosen)
            self.index.record(chosen, segments, hashed)
            if self.cpu_weight:
                self.cpu_index.record(chosen, segments, cpu_hashed)
        self.replicas[chosen].submit(request)

    def _best(self, gpu: list[float], cpu: list[float], cold: bool) -> int:
        """The highest score; `gpu` and `cpu` are the prefix scores (no CPU scorer: empty)."""
        if len(self.replicas) == 1:
            return 0
        queues = [r.num_requests_waiting for r in self.replicas]
        low, high = min(queues), max(queues)
        no_hit = self._no_hit_scores(cold) if self.no_hit_weight else None
        best: list[int] = []
        top = -1.0
        for i, replica in enumerate(self.replicas):
            queue = 1.0 if high == low else (high - queues[i]) / (high - low)
            # The same sum on a usage no higher is no lower (each float operation in it is
            # monotonic): a replica it leaves below the best so far needs no exact usage.
            floor = replica.kv_usage_floor
            score = self._score(i, queue, floor, gpu, cpu, no_hit)
            if top - score > 1e-12:
                continue
            usage = replica.kv_usage
            if usage != floor:
                score = self._score(i, queue, usage, gpu, cpu, no_hit)
            if score > top + 1e-12:
                best, top = [i], score
            elif abs(score - top) <= 1e-12:
                best.append(i)
        return best[0] if len(best) == 1 else self.rng.choice(best)

    def _score(
        self,
        i: int,
        queue: float,
        usage: float,
        gpu: list[float],
        cpu: list[float],
        no_hit: list[float] | None,
    ) -> float:
        """Replica i's weighed sum, `queue` and `usage` its queue score and KV usage."""
        w_queue, w_kv, w_prefix = self.weights
        score = w_queue * queue + w_kv * (1 - usage) + w_prefix * gpu[i]
        if cpu:
            score += self.cpu_weight * cpu[i]
        if no_hit is not None:
            score += self.no_hit_weight * no_hit[i]
        return score

    def _no_hit_scores(self, cold: bool) -> list[float]:
        """The no-hit-lru-scorer: neutral unless no replica matches; then by rank, replicas
        never given a cold request first (in order), then the least recently given one."""
        n = len(self.replicas)
        if not cold:
            return [0.5] * n
        used = set(self.cold_order)
        ranked = [i for i in range(n) if i not in used] + self.cold_order
        scores = [0.0] * n
        for rank, i in enumerate(ranked):
            scores[i] = 1 - rank / (n - 1)
        return scores
