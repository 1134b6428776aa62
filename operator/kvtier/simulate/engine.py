"""The discrete-event model (simpy): clients, a router, model-server replicas and tiers.

A replica is vLLM's scheduler loop in miniature. Each engine step decodes one token for every
running request and spends the rest of the token budget (`max_num_batched_tokens`) on prompt
chunks, first come first served; the step lasts as long as its compute (prompt tokens and
their attention) or its HBM reads (weights, plus the KV of every decoding request),
whichever is longer.

The GPU KV cache is vLLM's block-level prefix cache over prompt and output tokens: a prompt
is a chain of segments (kvtier.simulate.workload), running requests pin their segments'
blocks, and free blocks stay cached until evicted least recently used. A request is admitted
when its prompt fits (its output grows a block at a time); when a step has no room for the
decoders' next tokens, the latest admitted request is preempted, its blocks freed (still
cached) and it goes back to the head of the queue to recompute, as vLLM's default
preemption does. Admission takes the prefix from the GPU prefix cache, then the CPU tier,
then the disk tier; only what none holds is computed. Restores cost no GPU time: the request
waits for its copies (a disk tier's bandwidth is one queue, shared by all replicas when the
tier is shared) while the GPU serves others. Computed prompt blocks are stored in the CPU
tier and written through to the disk tier once the prefill ends (with offload_every_block,
as vLLM v0.22.0 does, at every step that computes them); output blocks too with
offload_prompt_only off, when the request finishes.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Generator, Hashable
from dataclasses import dataclass, field
from typing import Any

import simpy

from kvtier.simulate.cache import PrefixLRU, block_chain_hit, chain_hit, store_chain
from kvtier.simulate.config import SimConfig, Workload
from kvtier.simulate.router import Router
from kvtier.simulate.setup import Derived
from kvtier.simulate.workload import (
    Segment,
    SharedPrefix,
    Trace,
    harness_arrivals,
    poisson_arrivals,
)
from kvtier.sizing.tiers import bandwidth_restore_seconds

Process = Generator[simpy.Event, Any, None]
Progress = Callable[[str, float], None]
PROGRESS_STEPS = 100
MAX_DECODE_RUN = 4096  # decode steps one event may stand for
SYSTEM = ("system",)  # the agentic sessions' shared system prompt


@dataclass(slots=True, eq=False)
class Request:
    segments: tuple[Segment, ...]  # the prompt
    output: int
    arrival: float
    affinity: Hashable  # what sticky routing keeps on one replica (a session, a group)
    done: simpy.Event | None = None
    produced: int = 0  # output tokens decoded before a preemption (recomputed with the prompt)
    prompt_now: int = 0  # tokens of this schedule's prompt (the prompt, plus `produced`)
    position: int = 0  # tokens of this schedule's prompt whose KV is on the GPU
    decode_start: int = -1  # engine step at which this schedule's decoding began
    epoch: int = 0  # bumped on preemption: stale decode-heap entries are skipped
    restoring: bool = False
    hits: tuple[int, int, int] = (0, 0, 0)  # first schedule: tokens from GPU, CPU, disk
    scheduled: bool = False
    # vLLM's counters, summed over every schedule of the request (a preempted one counts again).
    queries: int = 0
    gpu_hits: int = 0
    external_queries: int = 0
    external_hits: int = 0
    preemptions: int = 0
    first_token: float = -1.0
    finished: float = -1.0
    stage: int = -1  # the open-loop stage that sent it (waiting stages only)
    gpu_segments: tuple[Segment, ...] = ()  # this schedule's blocks as held on the GPU

    @property
    def prompt(self) -> int:
        return sum(n for _, n in self.segments)

    def schedule_segments(self) -> tuple[Segment, ...]:
        """The prompt of the next schedule: after a preemption, the output so far too."""
        if not self.produced:
            return self.segments
        key, tokens = self.segments[-1]
        return (*self.segments[:-1], (key, tokens + self.produced))


@dataclass
class Stats:
    """Requests that arrived after the warm-up, as they complete; preemptions of all."""

    warmup: float
    requests: list[Request] = field(default_factory=list)
    preemptions: int = 0
    stage_starts: list[float] = field(default_factory=list)  # waiting stages: when each began
    end: float | None = None  # when a sweep of waiting stages had all its requests answered

    def record(self, request: Request) -> None:
        if request.arrival >= self.warmup:
            self.requests.append(request)


class DecodeRun:
    """`steps` decode steps from `start`; step i lasts max(a + b·i, c + e·i) (compute and
    HBM reads, both growing with the context), so step ends have a closed form."""

    def __init__(
        self, start: float, steps: int, compute: tuple[float, float], memory: tuple[float, float]
    ) -> None:
        self.start, self.steps = start, steps
        # The longer line at step 0 lasts until the other, growing faster, overtakes it.
        first, second = (compute, memory) if compute[0] >= memory[0] else (memory, compute)
        if second[1] <= first[1]:
            cross = steps
        else:
            cross = min(steps, math.ceil((first[0] - second[0]) / (second[1] - first[1])))
        self.first, self.second, self.cross = first, second, cross
        # end()'s terms for the steps up to the crossing: computed once, as end() would.
        (a, b), m = first, cross
        self.head, self.head_pairs = m * a + b * m * (m - 1) / 2, m * (m - 1) / 2
        # The last answer: `answer` steps ended by any time in [low, high).
        self.answer, self.low, self.high = 0, start, self.end(1)

    def end(self, n: int) -> float:
        """When step n (1-based) ends."""
        m = self.cross
        if n <= m:
            a, b = self.first
            return self.start + (n * a + b * n * (n - 1) / 2)
        c, e = self.second
        return self.start + (self.head + ((n - m) * c + e * (n * (n - 1) / 2 - self.head_pairs)))

    def done_by(self, t: float) -> int:
        """Steps ended by time t (asked again and again within one step: the router's scores).
        The inverse of the closed form gives it to within rounding, end() itself then settles
        it (ends grow with n, so it is the same n a search over end() would find)."""
        if self.low <= t < self.high:
            return self.answer
        (a, b), (c, e), m = self.first, self.second, self.cross
        elapsed = t - self.start
        n = _within(a, b, elapsed)
        if n >= m:
            n = m + _within(c + e * m, e, elapsed - self.head)
        steps = self.steps
        n = min(n, steps)
        low, high = self.end(n), self.end(n + 1) if n < steps else math.inf
        while high <= t:
            n += 1
            low, high = high, self.end(n + 1) if n < steps else math.inf
        while n > 0 and low > t:
            n -= 1
            low, high = self.end(n), low
        self.answer, self.low, self.high = n, low, high
        return n


def _within(a: float, b: float, elapsed: float) -> int:
    """About how many steps lasting a, a + b, a + 2b, … fit in `elapsed` seconds (an
    estimate, at least 0: int() rounds toward zero)."""
    elapsed = max(0.0, elapsed)  # below zero only by rounding
    if b > 0:
        half = a - b / 2
        return int(((half * half + 2 * b * elapsed) ** 0.5 - half) / b)
    return int(elapsed / a) if a > 0 else 0


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
        self.capacity = derived.gpu_kv_tokens
        self.block = derived.block_tokens
        self.lru = PrefixLRU(self.capacity, derived.block_tokens)  # free, cached blocks
        self.pins: dict[Hashable, list[int]] = {}  # in use: key → [requests, tokens]
        self.cpu = PrefixLRU(derived.cpu_tokens, derived.block_tokens) if cpu else None
        self.disk = disk
        self.load_aware = config.restore_policy == "faster"
        self.prompt_only = config.offload_prompt_only
        self.every_block = config.offload_every_block  # stores each step, not at prefill end
        self.stats = stats
        self.budget = config.max_batched_tokens
        self.max_seqs = config.max_num_seqs
        self.reserved = 0  # tokens of pinned blocks and of the running requests' outputs
        self.waiting: deque[Request] = deque()
        self.loading = 0  # admitted requests whose prefix is still being copied from a tier
        self.running: list[Request] = []  # admission order: preemption takes the last
        self.prefilling: list[Request] = []
        self.decoding: list[tuple[int, int, int, Request]] = []  # heap: (last step, order, …)
        self.decoders = 0
        self.decode_context = 0  # KV tokens every decode step reads
        self.window = derived.window_tokens  # a sliding-window page at a prefix's end (0: none)
        self.copies = 0
        self.steps = 0
        self.order = 0
        self.wake = env.event()
        self.macro: DecodeRun | None = None  # decode-only steps under way as one event
        self.process = env.process(self.run())

    @property
    def kv_usage(self) -> float:
        """vLLM's kv_cache_usage_perc: blocks in use (free cached blocks do not count)."""
        return min(1.0, self._reserved_now() / self.capacity)

    @property
    def kv_usage_floor(self) -> float:
        """kv_usage without a decode run's steps: never above it, and cheap to ask."""
        return min(1.0, self.reserved / self.capacity)

    @property
    def num_requests_waiting(self) -> int:
        """vLLM's num_requests_waiting: requests not admitted yet and those whose KV is still
        being loaded from a tier (WAITING_FOR_REMOTE_KVS: the scheduler keeps them among its
        waiting requests until the load is done)."""
        return len(self.waiting) + self.loading

    def _reserved_now(self) -> int:
        """`reserved` with the tokens of a decode run's steps already over."""
        macro = self.macro
        if macro is None:
            return self.reserved
        return self.reserved + self.decoders * macro.done_by(self.env.now)

    def submit(self, request: Request) -> None:
        self.waiting.append(request)
        self.admit()

    def admit(self) -> None:
        while self.waiting and len(self.running) < self.max_seqs:
            request = self.waiting[0]
            segments = request.schedule_segments()
            held, gpu, need = self._gpu_lookup(segments)
            if self._reserved_now() + need + self.decoders > self.capacity:
                # First come, first served: the head waits for room, keeping the decoders'
                # next tokens free (else a preempted request would come straight back).
                return
            self.waiting.popleft()
            request.gpu_segments = held
            self._pin(held)
            self.reserved += need
            self.lru.shrink(self.capacity - self._reserved_now())
            self.running.append(request)
            prompt = sum(n for _, n in segments)
            request.prompt_now = prompt
            top = prompt - 1  # the last prompt token is always computed, for its logits
            gpu = min(gpu, top)
            cpu = disk = 0
            if self.cpu is not None:
                cpu = max(0, min(self._tier_hit(self.cpu, segments), top) - gpu)
            read_by = self.env.now
            if self.disk is not None:
                disk = max(0, min(self._tier_hit(self.disk.cache, segments), top) - gpu - cpu)
                if disk:
                    read_by = self.disk.done_at(self.env.now, disk)
                    if self.load_aware and read_by - self.env.now >= self._compute(disk, gpu + cpu):
                        disk = 0  # the queue is too long: computing the part is sooner
                    else:
                        self.disk.free_at = read_by - self.disk.p99
            if not request.scheduled:
                request.scheduled = True
                request.hits = (gpu, cpu, disk)
            request.queries += prompt
            request.gpu_hits += gpu
            if self.cpu is not None:
                request.external_queries += prompt - gpu
                request.external_hits += cpu + disk
            request.position = gpu + cpu + disk
            if cpu or disk:
                request.restoring = True
                self.loading += 1
                self.env.process(self.restore(request, segments, cpu, disk, read_by))
            else:
                self.start_prefill(request)

    def _gpu_lookup(self, segments: tuple[Segment, ...]) -> tuple[tuple[Segment, ...], int, int]:
        """(the blocks a schedule holds on the GPU, leading tokens the GPU prefix cache holds,
        tokens admission adds to `reserved`); one prefix match for the blocks and the hit."""
        if not self.window:
            hit, need = self._gpu_hit_and_need(segments)
            return segments, hit, need
        hit, shared = self._hybrid_hit(segments, self._gpu_held, self.lru)
        held = self._gpu_segments(segments, shared)
        return held, hit, self._gpu_hit_and_need(held)[1]

    def _gpu_hit(self, segments: tuple[Segment, ...]) -> int:
        """_gpu_lookup's hit alone: the private copies a schedule would make do not change it
        (a copy's key is held nowhere, and no page was found past the shared segments)."""
        if self.window:
            return self._hybrid_hit(segments, self._gpu_held, self.lru)[0]
        return self._gpu_hit_and_need(segments)[0]

    def _gpu_hit_and_need(self, segments: tuple[Segment, ...]) -> tuple[int, int]:
        """(leading tokens the GPU prefix cache holds without sliding-window layers, tokens
        admission adds to `reserved`)."""
        hit, need, whole = 0, 0, True
        for key, tokens in segments:
            pin = self.pins.get(key)
            held = pin[1] if pin else self.lru.cached(key)
            if whole:
                got = min(held, tokens)
                hit += got
                whole = got == tokens
            need += max(0, tokens - pin[1]) if pin else tokens
        return hit, need

    def _gpu_held(self, key: Hashable) -> int:
        pin = self.pins.get(key)
        return pin[1] if pin else self.lru.cached(key)

    def _hybrid_hit(
        self, segments: tuple[Segment, ...], held: Callable[[Hashable], int], pages: PrefixLRU
    ) -> tuple[int, int]:
        """(tokens, leading segments) of the longest prefix hit with sliding-window layers:
        the full-attention blocks up to a point and the window's page at that point. A
        shared segment ends inside a block, so its point is the last block boundary in it;
        the prompt's own end is its last token."""
        best = count = end = 0
        last = len(segments) - 1
        for i, (key, tokens) in enumerate(segments):
            if held(key) < tokens - tokens % self.block:
                break
            end += tokens
            if pages.cached(("window", key, tokens)):
                best, count = (end if i == last else end - end % self.block), i + 1
        return best, count

    def _gpu_segments(self, segments: tuple[Segment, ...], shared: int) -> tuple[Segment, ...]:
        """The blocks a schedule holds on the GPU with sliding-window layers (vLLM's hybrid
        KV cache): a prefix is found only with the sliding-window page at its end (the first
        `shared` segments are); a request that misses it computes the prefix into blocks of
        its own, even while another running request holds the same prefix, so those are
        private copies here."""
        out: list[Segment] = list(segments[:shared])
        for key, tokens in segments[shared:]:
            if key in self.pins:
                self.copies += 1
                key = ("copy", key, self.copies)
            out.append((key, tokens))
        return tuple(out)

    def _passed(self, request: Request, before: int) -> None:
        """A prefill moved from `before` to `request.position`: the sliding-window pages at
        the prefix points it passed are freed (and stay cached, least recent first)."""
        end = 0
        last = len(request.gpu_segments) - 1
        for i, (key, tokens) in enumerate(request.gpu_segments):
            end += tokens
            point = end if i == last else end - end % self.block
            if point > request.position:
                return
            if point >= before:
                name = key[1] if isinstance(key, tuple) and key and key[0] == "copy" else key
                self.lru.touch(("window", name, tokens), self.window)

    def _tier_hit(self, tier: PrefixLRU, segments: tuple[Segment, ...]) -> int:
        """Leading tokens a CPU or disk tier returns. With sliding-window layers the
        OffloadingConnector keeps a request's sliding-window chunks only at the end of what
        it stored (its prompt), so a stored prefix is found only up to such an end."""
        if not self.window:
            return chain_hit(tier, segments)
        if self.every_block:  # every window block stored: any stored block boundary
            return block_chain_hit(tier, segments)
        return self._hybrid_hit(segments, tier.cached, tier)[0]

    def _tier_store(self, tier: PrefixLRU, segments: tuple[Segment, ...], tokens: int) -> None:
        """Store the first `tokens` of a chain in a tier (and, with sliding-window layers,
        the window's chunk where the stored part ends, if that is a segment's end)."""
        store_chain(tier, segments, tokens)
        if not self.window or self.every_block:
            return
        end = 0
        for key, n in segments:
            end += n
            if end == tokens:
                tier.touch(("window", key, n), self.window)
            if end >= tokens:
                return

    def _store_computed(self, request: Request) -> None:
        """Store a prefill's blocks as the step computes them (vLLM v0.22.0's connector)."""
        if self.cpu is None:
            return
        segments = request.schedule_segments()
        self._tier_store(self.cpu, segments, request.position)
        if self.disk is not None:
            self._tier_store(self.disk.cache, segments, request.position)

    def _count_blocked(self, steps: int) -> None:
        """vLLM looks a waiting request up in its prefix cache at every engine step that tries
        to schedule it, and counts the query (and its hits) even when its blocks do not fit."""
        if not self.waiting or len(self.running) >= self.max_seqs:
            return
        request = self.waiting[0]
        segments = request.schedule_segments()
        gpu = self._gpu_hit(segments)
        prompt = sum(n for _, n in segments)
        request.queries += steps * prompt
        request.gpu_hits += steps * min(gpu, prompt - 1)

    def _pin(self, segments: tuple[Segment, ...]) -> None:
        for key, tokens in segments:
            pin = self.pins.get(key)
            if pin is None:
                self.lru.take(key)  # its cached tokens are now in use (counted in reserved)
                self.pins[key] = [1, tokens]
            else:
                pin[0] += 1
                pin[1] = max(pin[1], tokens)

    def _unpin(self, segments: tuple[Segment, ...], valid: int, output: int) -> None:
        """Free a request's blocks; the first `valid` prompt tokens (and `output` after the
        last segment) stay cached as free blocks."""
        last = len(segments) - 1
        for i, (key, tokens) in enumerate(segments):
            pin = self.pins[key]
            pin[0] -= 1
            if pin[0] == 0:
                del self.pins[key]
                self.reserved -= pin[1]
                keep = min(pin[1], max(0, valid)) + (output if i == last else 0)
                if keep:
                    self.lru.touch(key, keep)
            valid -= tokens
        self.lru.shrink(self.capacity - self.reserved)

    def _compute(self, tokens: int, start: int) -> float:
        """Seconds the GPUs take to prefill `tokens` after `start` cached ones, if idle."""
        d = self.d
        pair = d.attention_seconds_per_token_pair
        return tokens * (d.prefill_seconds_per_token + pair * (start + tokens / 2))

    def restore(
        self, request: Request, segments: tuple[Segment, ...], cpu: int, disk: int, read_by: float
    ) -> Process:
        """Copy the CPU and disk parts of a prefix to the GPU; the GPU computes meanwhile."""
        d = self.d
        if disk:
            assert self.disk is not None
            self._tier_store(self.disk.cache, segments, request.position)
            yield self.env.timeout(read_by - self.env.now)
        if self.cpu is not None:  # disk reads are staged through the CPU tier
            self._tier_store(self.cpu, segments, request.position)
        yield self.env.timeout((cpu + disk) * d.bytes_per_token / d.host_link_bytes_per_second)
        request.restoring = False
        self.loading -= 1
        self.start_prefill(request)

    def start_prefill(self, request: Request) -> None:
        self.prefilling.append(request)
        if self.macro is not None:
            self.macro = None
            self.process.interrupt()  # a prompt to chunk: back to one step at a time
        elif not self.wake.triggered:
            self.wake.succeed()

    def run(self) -> Process:
        d = self.d
        env = self.env
        while True:
            if not self.prefilling and not self.decoders:
                self.wake = env.event()
                yield self.wake
                continue
            while self.reserved + self.decoders > self.capacity and self._preempt():
                pass
            if not self.prefilling:
                done = yield from self._decode_run()
                if done:
                    continue
            decoders = self.decoders
            budget = self.budget - decoders
            chunks: list[tuple[Request, int]] = []
            compute = decoders * d.prefill_seconds_per_token
            compute += self.decode_context * d.attention_seconds_per_token_pair
            for request in self.prefilling:
                if budget <= 0:
                    break
                n = min(request.prompt_now - request.position, budget)
                budget -= n
                chunks.append((request, n))
                compute += n * (
                    d.prefill_seconds_per_token
                    + d.attention_seconds_per_token_pair * (request.position + n / 2)
                )
            tokens = self.budget - budget
            memory = (
                d.weight_read_seconds(tokens) + self.decode_context * d.kv_read_seconds_per_token
            )
            yield env.timeout(max(compute, memory))
            self.steps += 1
            self.decode_context += decoders
            self.reserved += decoders  # each decoder's next token takes a slot
            self.lru.shrink(self.capacity - self.reserved)
            while self.decoding and self.decoding[0][0] <= self.steps:
                _, _, epoch, request = heapq.heappop(self.decoding)
                if epoch == request.epoch:
                    self.finish(request)
            for request, n in chunks:
                before = request.position
                request.position += n
                if self.window:
                    self._passed(request, before)
                if self.every_block:
                    self._store_computed(request)
                if request.position == request.prompt_now:
                    self.prefilling.remove(request)
                    self.prefilled(request)
            self.admit()
            if budget > 0:
                self._count_blocked(1)

    def _decode_run(self) -> Generator[simpy.Event, Any, bool]:
        """Decode-only steps, up to the next finish, as one event (the engine loop's cost
        is per event): the same step times as one at a time, stopped at the end of the step
        under way when a prompt arrives. False when fewer than two steps would run."""
        d = self.d
        while self.decoding and self.decoding[0][2] != self.decoding[0][3].epoch:
            heapq.heappop(self.decoding)  # a preempted request's stale entry
        decoders = self.decoders
        if not self.decoding or not decoders:
            return False
        steps = min(
            self.decoding[0][0] - self.steps,
            (self.capacity - self.reserved) // decoders,  # no preemption inside the run
            MAX_DECODE_RUN,
        )
        if steps < 2:
            return False
        run = DecodeRun(
            self.env.now,
            steps,
            # A step's compute and its HBM reads, each growing by a token per decoder.
            (
                decoders * d.prefill_seconds_per_token
                + self.decode_context * d.attention_seconds_per_token_pair,
                decoders * d.attention_seconds_per_token_pair,
            ),
            (
                d.weight_read_seconds(decoders) + self.decode_context * d.kv_read_seconds_per_token,
                decoders * d.kv_read_seconds_per_token,
            ),
        )
        self.macro = run
        try:
            yield self.env.timeout(run.end(steps) - self.env.now)
            done = steps
        except simpy.Interrupt:
            now = self.env.now
            done = min(steps, run.done_by(now) + 1)
            yield self.env.timeout(max(0.0, run.end(done) - now))  # the step under way ends
        self.macro = None
        self.steps += done
        self.decode_context += decoders * done
        self.reserved += decoders * done
        self.lru.shrink(self.capacity - self.reserved)
        self._count_blocked(done - 1)  # the steps before the last: the same head was refused
        while self.decoding and self.decoding[0][0] <= self.steps:
            _, _, epoch, request = heapq.heappop(self.decoding)
            if epoch == request.epoch:
                self.finish(request)
        self.admit()
        self._count_blocked(1)
        return True

    def _preempt(self) -> bool:
        """Preempt the latest admitted running request; False if none can be."""
        for request in reversed(self.running):
            if request.restoring:
                continue  # its copies are under way
            segments = request.gpu_segments
            if request.decode_start >= 0:
                made = self._made(request)
                self._stop_decoding(request, made)
                self.reserved -= made
                self._unpin(segments, request.prompt_now, made)
                request.produced += made
            else:
                self.prefilling.remove(request)
                self._unpin(segments, request.position, 0)
            self.running.remove(request)
            request.epoch += 1
            request.decode_start = -1
            request.preemptions += 1
            self.stats.preemptions += 1
            self.waiting.appendleft(request)
            return True
        return False

    def _made(self, request: Request) -> int:
        """Output tokens this schedule has produced: the prefill's, then one per step."""
        return 1 + self.steps - request.decode_start

    def _stop_decoding(self, request: Request, made: int) -> None:
        self.decoders -= 1
        self.decode_context -= request.prompt_now + made

    def prefilled(self, request: Request) -> None:
        """A token is out: store the prompt's blocks, decode the rest."""
        if request.first_token < 0:
            request.first_token = self.env.now
        segments = request.schedule_segments()
        if self.cpu is not None:
            self._tier_store(self.cpu, segments, request.prompt_now)
            if self.disk is not None:
                self._tier_store(self.disk.cache, segments, request.prompt_now)
        self.reserved += 1
        request.decode_start = self.steps
        left = request.output - request.produced - 1
        if left <= 0:
            self.finish(request)
            return
        self.order += 1
        self.decoders += 1
        self.decode_context += request.prompt_now + 1
        heapq.heappush(self.decoding, (self.steps + left, self.order, request.epoch, request))

    def finish(self, request: Request) -> None:
        request.finished = self.env.now
        made = self._made(request)
        if request.output - request.produced > 1:
            self._stop_decoding(request, made)
        self.reserved -= made
        self._unpin(request.gpu_segments, request.prompt_now, made)
        segments = request.schedule_segments()
        if self.cpu is not None and not self.prompt_only:  # the output's blocks too
            key, tokens = segments[-1]
            with_output = (*segments[:-1], (key, tokens + made))
            self._tier_store(self.cpu, with_output, request.prompt_now + made)
            if self.disk is not None:
                self._tier_store(self.disk.cache, with_output, request.prompt_now + made)
        self.running.remove(request)
        request.produced += made
        self.stats.record(request)
        if request.done is not None:
            request.done.succeed()
        self.admit()


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
    if cpu and not config.connector_hybrid_kv:
        derived = derived.without_hybrid()
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
    router = Router(config, replicas, derived.block_tokens, cpu=cpu, gpu_blocks=derived.gpu_blocks)
    w = config.workload
    if isinstance(w, Workload) and w.concurrency:
        pool: simpy.Store = simpy.Store(env)
        for slot in range(w.sessions):
            pool.put(_Session(config, w, slot, len(replicas)))
        for _ in range(w.concurrency):
            env.process(_agent_client(env, w, router, pool))
    elif isinstance(w, Workload):
        for slot in range(w.sessions):
            env.process(_sessions(env, config, w, router, slot))
    sweep: simpy.Process | None = None
    if isinstance(w, SharedPrefix):
        if w.stages is not None and w.stages.waits:
            sweep = env.process(_harness_stages(env, config, w, router, stats))
        elif w.stages is not None:
            env.process(_open_loop_groups(env, config, w, router))
        else:
            for client in range(w.concurrency):
                env.process(_closed_loop_groups(env, config, w, router, client))
    elif not isinstance(w, Workload):
        env.process(_replay(env, w, router))
    for step in range(1, PROGRESS_STEPS + 1):
        at = config.duration_seconds * step / PROGRESS_STEPS
        env.run(until=at if sweep is None else env.any_of([sweep, env.timeout(at - env.now)]))
        if progress is not None:
            progress(scenario, env.now)
        if sweep is not None and not sweep.is_alive:
            break  # every stage sent and answered: nothing more to measure
    return stats


def _sessions(
    env: simpy.Environment, config: SimConfig, w: Workload, router: Router, slot: int
) -> Process:
    """One agent: session after session, turn after turn; the draws depend on the seed only."""
    rng = random.Random(f"{config.seed}/{slot}")
    span = w.end_tokens - w.start_tokens
    replicas = len(router.replicas)
    # The first session starts somewhere in its life, so that contexts are spread at t=0.
    context = w.start_tokens + round(rng.random() * span)
    yield env.timeout(rng.random() * max(w.think_seconds, 1.0))
    session = 0
    while True:
        session += 1
        key = ("session", slot, session)
        home = rng.randrange(replicas)
        while context <= w.end_tokens:
            output = max(1, round(rng.expovariate(1 / w.output_tokens)))
            tool = round(rng.expovariate(1 / w.tool_tokens)) if w.tool_tokens else 0
            think = rng.expovariate(1 / w.think_seconds) if w.think_seconds else 0.0
            pick = rng.randrange(replicas)
            segments: tuple[Segment, ...] = (
                ((SYSTEM, w.system_prompt_tokens), (key, context - w.system_prompt_tokens))
                if w.system_prompt_tokens
                else ((key, context),)
            )
            done = env.event()
            request = Request(segments, output, env.now, key, done)
            router.route(request, random_pick=pick, home=home)
            yield done
            context += output + tool
            yield env.timeout(think)
        context = w.start_tokens


class _Session:
    """One agentic session's state, served by whichever client takes it (--concurrency)."""

    def __init__(self, config: SimConfig, w: Workload, slot: int, replicas: int) -> None:
        self.rng = random.Random(f"{config.seed}/{slot}")
        self.slot, self.replicas, self.number = slot, replicas, 0
        span = w.end_tokens - w.start_tokens
        self.context = w.start_tokens + round(self.rng.random() * span)
        self.new_session()

    def new_session(self) -> None:
        self.number += 1
        self.key = ("session", self.slot, self.number)
        self.home = self.rng.randrange(self.replicas)


def _agent_client(
    env: simpy.Environment, w: Workload, router: Router, pool: simpy.Store
) -> Process:
    """A client of `concurrency`: it takes the idle session waiting longest, sends its next
    turn, and hands it back after the tool time; so sessions (distinct prefixes) and
    concurrency are set apart."""
    while True:
        session: _Session = yield pool.get()
        rng = session.rng
        output = max(1, round(rng.expovariate(1 / w.output_tokens)))
        tool = round(rng.expovariate(1 / w.tool_tokens)) if w.tool_tokens else 0
        think = rng.expovariate(1 / w.think_seconds) if w.think_seconds else 0.0
        pick = rng.randrange(session.replicas)
        segments: tuple[Segment, ...] = (
            (
                (SYSTEM, w.system_prompt_tokens),
                (session.key, session.context - w.system_prompt_tokens),
            )
            if w.system_prompt_tokens
            else ((session.key, session.context),)
        )
        done = env.event()
        router.route(
            Request(segments, output, env.now, session.key, done),
            random_pick=pick,
            home=session.home,
        )
        yield done
        session.context += output + tool
        if session.context > w.end_tokens:
            session.context = w.start_tokens
            session.new_session()
        env.process(_hand_back(env, pool, session, think))


def _hand_back(
    env: simpy.Environment, pool: simpy.Store, session: _Session, think: float
) -> Process:
    yield env.timeout(think)
    yield pool.put(session)


def _group_request(env: simpy.Environment, w: SharedPrefix, rng: random.Random) -> Request:
    group, question = rng.randrange(w.groups), rng.randrange(w.questions)
    return Request(w.segments(group, question), w.output_tokens, env.now, ("group", group))


def _open_loop_groups(
    env: simpy.Environment, config: SimConfig, w: SharedPrefix, router: Router
) -> Process:
    """Poisson arrivals stage by stage: nobody waits for an answer before the next request."""
    assert w.stages is not None
    rng = random.Random(f"{config.seed}/arrivals")
    for at in poisson_arrivals(w.stages, rng):
        yield env.timeout(at - env.now)
        router.route(_group_request(env, w, rng))


def _harness_stages(
    env: simpy.Environment, config: SimConfig, w: SharedPrefix, router: Router, stats: Stats
) -> Process:
    """Stages as inference-perf runs them: rate × seconds requests each, then a wait for all
    of them to finish and a pause. With the list order, every stage sends the same shuffled
    list of prompts from its first."""
    stages = w.stages
    assert stages is not None and stages.pause_seconds is not None
    rng = random.Random(f"{config.seed}/arrivals")
    prompts = [(g, q) for g in range(w.groups) for q in range(w.questions)]
    random.Random(f"{config.seed}/prompts").shuffle(prompts)
    for index, rate in enumerate(stages.rates):
        start = env.now
        stats.stage_starts.append(start)
        count = int(rate * stages.seconds)
        answered: list[simpy.Event] = []
        for sent, at in enumerate(harness_arrivals(rate, count, rng)):
            yield env.timeout(start + at - env.now)
            if w.order == "list":
                group, question = prompts[sent % len(prompts)]
                request = Request(
                    w.segments(group, question), w.output_tokens, env.now, ("group", group)
                )
            else:
                request = _group_request(env, w, rng)
            request.stage = index
            request.done = env.event()
            answered.append(request.done)
            router.route(request)
        yield env.all_of(answered)
        stats.end = env.now
        if index < len(stages.rates) - 1:
            yield env.timeout(stages.pause_seconds)


def _closed_loop_groups(
    env: simpy.Environment, config: SimConfig, w: SharedPrefix, router: Router, client: int
) -> Process:
    """One of `concurrency` clients: the next request as soon as the last one is answered."""
    rng = random.Random(f"{config.seed}/client/{client}")
    while True:
        request = _group_request(env, w, rng)
        request.done = done = env.event()
        router.route(request)
        yield done


def _replay(env: simpy.Environment, trace: Trace, router: Router) -> Process:
    for item in trace.requests:
        yield env.timeout(item.arrival - env.now)
        router.route(Request(item.segments, item.output_tokens, env.now, item.affinity))
