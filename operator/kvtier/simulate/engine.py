"""The discrete-event model (simpy): sessions, a router, model-server replicas and tiers.

A replica is vLLM's scheduler loop in miniature. Each engine step decodes one token for every
running request and spends the rest of the token budget (`max_num_batched_tokens`) on prompt
chunks, first come first served; the step lasts as long as its compute (prompt tokens and
their attention) or its HBM reads (weights, plus the KV of every decoding request),
whichever is longer. A request is admitted only when its prompt and output fit in the GPU
KV cache; admission takes its prefix from the GPU prefix cache, then from the CPU tier, then
from the disk tier, and only what none holds is computed. Restores cost no GPU time: the
request waits for its copies (a disk tier's bandwidth is one queue, shared by all replicas
when the tier is shared) while the GPU serves others; with restore_policy "faster" a request
recomputes its disk part instead when the queue would make the restore slower than that.
Computed prompt blocks are stored in the CPU tier and written through to the disk tier (vLLM
offloads prompts only by default).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from kvtier.simulate.cache import PrefixLRU
from kvtier.simulate.config import SimConfig
from kvtier.simulate.setup import Derived
from kvtier.sizing.tiers import bandwidth_restore_seconds

Process = Generator[simpy.Event, Any, None]
Progress = Callable[[str, float], None]
PROGRESS_STEPS = 100


@dataclass(slots=True)
class Request:
    key: int  # the session
    prompt: int  # tokens, with the shared system prompt
    output: int
    arrival: float
    done: simpy.Event
    need: int = 0  # GPU KV tokens reserved while it runs
    hits: tuple[int, int, int] = (0, 0, 0)  # tokens from GPU, CPU, disk
    position: int = 0  # prompt tokens whose KV is on the GPU
    first_token: float = -1.0
    finished: float = -1.0


@dataclass
class Stats:
    """Requests that arrived after the warm-up, as they complete."""

    warmup: float
    requests: list[Request] = field(default_factory=list)

    def record(self, request: Request) -> None:
        if request.arrival >= self.warmup:
            self.requests.append(request)


class DiskTierModel:
    """A secondary tier's contents and its bandwidth: restores are served one after another."""

    def __init__(self, tokens: int, config: SimConfig, derived: Derived) -> None:
        assert config.disk is not None
        self.cache = PrefixLRU(tokens, config.block_tokens)
        self.p99 = config.disk.p99_seconds
        self.bandwidth = config.disk.bandwidth_bytes_per_second
        self.block_tokens = derived.block_tokens
        self.block_bytes = derived.block_tokens * derived.bytes_per_token
        self.free_at = 0.0  # when the restores queued so far have all been read

    def done_at(self, now: float, tokens: int) -> float:
        """When a restore of `tokens` queued now would have its last block read."""
        transfer = bandwidth_restore_seconds(
            tokens, self.block_tokens, self.block_bytes, self.bandwidth
        )
        return max(now, self.free_at) + transfer + self.p99  # the slowest block lands last


class Replica:
    def __init__(
        self,
        env: simpy.Environment,
        config: SimConfig,
        derived: Derived,
        cpu: bool,
        disk: DiskTierModel | None,
        stats: Stats,
    ) -> None:
        self.env = env
        self.d = derived
        self.system = config.workload.system_prompt_tokens  # kept hot in HBM by every request
        self.capacity = derived.gpu_kv_tokens - self.system
        self.gpu = PrefixLRU(self.capacity, derived.block_tokens)
        self.cpu = PrefixLRU(derived.cpu_tokens, derived.block_tokens) if cpu else None
        self.disk = disk
        self.load_aware = config.restore_policy == "faster"
        self.stats = stats
        self.budget = config.max_batched_tokens
        self.reserved = 0
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Request] = []
        self.decoding: list[tuple[int, int, Request]] = []  # heap: (last step, order, request)
        self.decode_context = 0  # KV tokens every decode step reads
        self.steps = 0
        self.order = 0
        self.wake = env.event()
        env.process(self.run())

    def submit(self, request: Request) -> None:
        self.waiting.append(request)
        self.admit()

    def admit(self) -> None:
        while self.waiting:
            request = self.waiting[0]
            session = request.prompt - self.system
            need = session + request.output
            if need > self.capacity - self.reserved:
                return  # first come, first served: the head waits for room
            self.waiting.popleft()
            request.need = need
            self.reserved += need
            key = request.key
            gpu = self.gpu.take(key)
            self.gpu.shrink(self.capacity - self.reserved)
            top = session - 1  # the last prompt token is always computed, for its logits
            gpu = min(gpu, top)
            cpu = disk = 0
            if self.cpu is not None:
                cpu = max(0, min(self.cpu.cached(key), top) - gpu)
            read_by = self.env.now
            if self.disk is not None:
                disk = max(0, min(self.disk.cache.cached(key), top) - gpu - cpu)
                if disk:
                    read_by = self.disk.done_at(self.env.now, disk)
                    if self.load_aware and read_by - self.env.now >= self._compute(
                        disk, self.system + gpu + cpu
                    ):
                        disk = 0  # the queue is too long: computing the part is sooner
                    else:
                        self.disk.free_at = read_by - self.disk.p99
            request.hits = (gpu + self.system, cpu, disk)
            request.position = self.system + gpu + cpu + disk
            if cpu or disk:
                self.env.process(self.restore(request, cpu, disk, read_by if disk else 0.0))
            else:
                self.start_prefill(request)

    def _compute(self, tokens: int, start: int) -> float:
        """Seconds the GPUs take to prefill `tokens` after `start` cached ones, if idle."""
        d = self.d
        pair = d.attention_seconds_per_token_pair
        return tokens * (d.prefill_seconds_per_token + pair * (start + tokens / 2))

    def restore(self, request: Request, cpu: int, disk: int, read_by: float) -> Process:
        """Copy the CPU and disk parts of a prefix to the GPU; the GPU computes meanwhile."""
        d = self.d
        held = request.position - self.system
        if disk:
            assert self.disk is not None
            self.disk.cache.touch(request.key, held)
            yield self.env.timeout(read_by - self.env.now)
        if self.cpu is not None:  # disk reads are staged through the CPU tier
            self.cpu.touch(request.key, held)
        yield self.env.timeout((cpu + disk) * d.bytes_per_token / d.host_link_bytes_per_second)
        self.start_prefill(request)

    def start_prefill(self, request: Request) -> None:
        self.prefilling.append(request)
        if not self.wake.triggered:
            self.wake.succeed()

    def run(self) -> Process:
        d = self.d
        env = self.env
        while True:
            if not self.prefilling and not self.decoding:
                self.wake = env.event()
                yield self.wake
                continue
            decoders = len(self.decoding)
            budget = self.budget - decoders
            chunks: list[tuple[Request, int]] = []
            compute = decoders * d.prefill_seconds_per_token
            compute += self.decode_context * d.attention_seconds_per_token_pair
            for request in self.prefilling:
                if budget <= 0:
                    break
                n = min(request.prompt - request.position, budget)
                budget -= n
                chunks.append((request, n))
                compute += n * (
                    d.prefill_seconds_per_token
                    + d.attention_seconds_per_token_pair * (request.position + n / 2)
                )
            memory = d.decode_step_seconds + self.decode_context * d.kv_read_seconds_per_token
            yield env.timeout(max(compute, memory))
            self.steps += 1
            self.decode_context += decoders
            while self.decoding and self.decoding[0][0] <= self.steps:
                self.finish(heapq.heappop(self.decoding)[2])
            for request, n in chunks:
                request.position += n
                if request.position == request.prompt:
                    self.prefilling.remove(request)
                    self.prefilled(request)
            self.admit()

    def prefilled(self, request: Request) -> None:
        """The first token is out: store the prompt's blocks, decode the rest."""
        request.first_token = self.env.now
        session = request.prompt - self.system
        if self.cpu is not None:
            self.cpu.touch(request.key, session)
            if self.disk is not None:
                self.disk.cache.touch(request.key, session)
        if request.output == 1:
            self.finish(request)
            return
        self.order += 1
        self.decode_context += request.prompt + 1
        heapq.heappush(self.decoding, (self.steps + request.output - 1, self.order, request))

    def finish(self, request: Request) -> None:
        request.finished = self.env.now
        if request.output > 1:
            self.decode_context -= request.prompt + request.output
        self.reserved -= request.need
        self.gpu.touch(request.key, request.need)
        self.gpu.shrink(self.capacity - self.reserved)
        self.stats.record(request)
        request.done.succeed()


def run_scenario(
    config: SimConfig, derived: Derived, scenario: str, progress: Progress | None = None
) -> Stats:
    """Simulate `config.duration_seconds` of the workload with the scenario's tiers.

    `progress(scenario, simulated seconds)` is called a hundred times along the way (it may
    raise to stop the run).
    """
    env = simpy.Environment()
    stats = Stats(config.warmup_seconds)
    cpu = scenario != "none"
    shared_disk: DiskTierModel | None = None
    if scenario == "cpu+disk" and config.disk is not None and config.disk.shared:
        shared_disk = DiskTierModel(derived.disk_tokens, config, derived)
    replicas = [
        Replica(
            env,
            config,
            derived,
            cpu,
            shared_disk
            if shared_disk is not None or scenario != "cpu+disk"
            else DiskTierModel(derived.disk_tokens, config, derived),
            stats,
        )
        for _ in range(config.replicas)
    ]
    for slot in range(config.workload.sessions):
        env.process(_sessions(env, config, replicas, slot))
    for step in range(1, PROGRESS_STEPS + 1):
        env.run(until=config.duration_seconds * step / PROGRESS_STEPS)
        if progress is not None:
            progress(scenario, env.now)
    return stats


def _sessions(
    env: simpy.Environment, config: SimConfig, replicas: list[Replica], slot: int
) -> Process:
    """One agent: session after session, turn after turn; the draws depend on the seed only."""
    w = config.workload
    rng = random.Random(f"{config.seed}/{slot}")
    span = w.end_tokens - w.start_tokens
    # The first session starts somewhere in its life, so that contexts are spread at t=0.
    context = w.start_tokens + round(rng.random() * span)
    yield env.timeout(rng.random() * max(w.think_seconds, 1.0))
    session = 0
    while True:
        session += 1
        key = slot * 1_000_000 + session
        home = rng.randrange(len(replicas))
        while context <= w.end_tokens:
            output = max(1, round(rng.expovariate(1 / w.output_tokens)))
            tool = round(rng.expovariate(1 / w.tool_tokens)) if w.tool_tokens else 0
            think = rng.expovariate(1 / w.think_seconds) if w.think_seconds else 0.0
            pick = rng.randrange(len(replicas))
            replica = replicas[home if config.routing == "sticky" else pick]
            request = Request(key, context, output, env.now, env.event())
            replica.submit(request)
            yield request.done
            context += output + tool
            yield env.timeout(think)
        context = w.start_tokens
