"""Workload shapes beyond agentic sessions: shared-prefix groups and a user's trace, with their
arrivals (a closed loop of clients, or open-loop Poisson stages as llm-d-benchmark runs them).

A prompt is a chain of segments `(key, tokens)`: a segment is reusable only after every
segment before it, as vLLM's block hashes chain each block to its parent. Equal keys are equal
token runs, so two requests with the same first segments share those blocks.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kvtier.sizing import SizingError

Segment = tuple[Hashable, int]
PROMPT_ORDERS = ("uniform", "list")


@dataclass(frozen=True)
class Stages:
    """Open-loop Poisson arrivals: `rates` requests/s, each held for `seconds`, in order.

    With `pause_seconds` unset the stages follow each other at once and a stage's queue
    carries into the next. Set, they run as inference-perf (llm-d-benchmark's harness) runs
    them: a stage sends exactly rate × seconds requests, waits until every one of them has
    finished, then pauses `pause_seconds` (its `interval`) before the next; so every stage
    starts on idle servers and its latencies are its own.
    """

    rates: tuple[float, ...]
    seconds: float = 60.0
    pause_seconds: float | None = None

    def validate(self) -> None:
        if not self.rates or any(not (math.isfinite(r) and r > 0) for r in self.rates):
            raise SizingError("rate", f"must be requests/s above zero, got {self.rates}")
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise SizingError("stageSeconds", f"must be above zero, got {self.seconds}")
        if self.pause_seconds is not None and not (
            math.isfinite(self.pause_seconds) and self.pause_seconds >= 0
        ):
            raise SizingError("stagePause", f"must be zero or more, got {self.pause_seconds}")
        if self.waits and any(int(r * self.seconds) < 1 for r in self.rates):
            raise SizingError("rate", "each stage must send at least one request")

    @property
    def waits(self) -> bool:
        """Each stage waits for its requests to finish (inference-perf's stages)."""
        return self.pause_seconds is not None

    @property
    def duration(self) -> float:
        """Seconds of arrivals; with waiting stages, the least the sweep can take."""
        return (self.seconds + (self.pause_seconds or 0.0)) * len(self.rates)

    def stage(self, t: float) -> int:
        return min(int(t // self.seconds), len(self.rates) - 1)


@dataclass(frozen=True)
class SharedPrefix:
    """`groups` system prompts of `prefix_tokens`, each with `questions` distinct questions.

    Every request is a uniformly drawn (group, question): llm-d-benchmark's shared_prefix
    data. Sent open loop (`stages`) or by `concurrency` clients one after another.
    """

    groups: int = 250
    questions: int = 5
    prefix_tokens: int = 16_000
    question_tokens: int = 256
    output_tokens: int = 256  # fixed, as the benchmark asks for (ignore_eos)
    stages: Stages | None = None
    concurrency: int = 0  # closed loop when stages is None
    # uniform: every request draws its (group, question); list: inference-perf's order, the
    # groups × questions prompts shuffled once and sent in that order, each stage from the
    # first (so a stage repeats the previous stage's prompts in the same order).
    order: str = "uniform"

    def validate(self) -> None:
        for name, value in (
            ("groups", self.groups),
            ("questions", self.questions),
            ("prefixTokens", self.prefix_tokens),
            ("questionTokens", self.question_tokens),
            ("outputTokens", self.output_tokens),
        ):
            if value <= 0:
                raise SizingError(name, f"must be greater than zero, got {value}")
        if self.order not in PROMPT_ORDERS:
            raise SizingError("order", f"use {'|'.join(PROMPT_ORDERS)}")
        if self.stages is not None:
            self.stages.validate()
        elif self.concurrency <= 0:
            raise SizingError("concurrency", "give a rate (open loop) or a concurrency above 0")

    @property
    def longest_prompt(self) -> int:
        return self.prefix_tokens + self.question_tokens

    def segments(self, group: int, question: int) -> tuple[Segment, ...]:
        return (
            (("group", group), self.prefix_tokens),
            (("question", group, question), self.question_tokens),
        )


@dataclass(frozen=True)
class TraceRequest:
    arrival: float  # seconds from the trace's start
    segments: tuple[Segment, ...]
    output_tokens: int
    affinity: Hashable  # the prefix id, or the first block hash


@dataclass(frozen=True)
class Trace:
    """A user's requests replayed at their own arrival times (open loop)."""

    requests: tuple[TraceRequest, ...]
    source: str = "trace"

    def validate(self) -> None:
        if not self.requests:
            raise SizingError("trace", f"{self.source} has no requests")

    @property
    def duration(self) -> float:
        return self.requests[-1].arrival

    @property
    def longest_prompt(self) -> int:
        return max(sum(n for _, n in r.segments) for r in self.requests)


# Field spellings accepted in a trace line: ours first, then Mooncake's (timestamp in ms).
_ARRIVAL = ("arrival", "arrival_time")
_INPUT = ("input_tokens", "input_length")
_OUTPUT = ("output_tokens", "output_length")


def read_trace(path: str | Path, hash_block_tokens: int = 512) -> Trace:
    """Read a JSONL trace: one request a line, sorted into arrival order.

    Each line has an arrival (`arrival` seconds, or Mooncake's `timestamp` in ms), the input
    and output token counts, and what its prompt shares: `prefix_id` with `prefix_tokens`
    (that many leading tokens are the same for every line with that id), or `hash_ids`, one
    hash per `hash_block_tokens` leading tokens (Mooncake's format). Neither: all unique.
    """
    source = str(path)
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise SizingError("trace", f"{source}: {exc.strerror}") from None
    out = [
        _trace_line(line, f"{source}:{n}", n, hash_block_tokens)
        for n, line in enumerate(lines, 1)
        if line.strip()
    ]
    out.sort(key=lambda r: r.arrival)
    if out:
        start = out[0].arrival
        out = [
            TraceRequest(r.arrival - start, r.segments, r.output_tokens, r.affinity) for r in out
        ]
    return Trace(tuple(out), source)


def _trace_line(line: str, where: str, n: int, hash_block: int) -> TraceRequest:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise SizingError("trace", f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(item, dict):
        raise SizingError("trace", f"{where}: each line must be a JSON object")
    if "timestamp" in item and not any(k in item for k in _ARRIVAL):
        arrival = _number(item, ("timestamp",), where) / 1000
    else:
        arrival = _number(item, _ARRIVAL, where)
    prompt = int(_number(item, _INPUT, where, whole=True))
    output = int(_number(item, _OUTPUT, where, whole=True))
    if prompt <= 0 or output <= 0:
        raise SizingError("trace", f"{where}: input and output tokens must be above zero")
    segments: list[Segment] = []
    affinity: Hashable = ("line", n)
    if "hash_ids" in item:
        hashes = item["hash_ids"]
        if not isinstance(hashes, list):
            raise SizingError("trace", f"{where}: hash_ids must be a list")
        chain: tuple[Hashable, ...] = ()
        for h in hashes:
            chain = (*chain, h) if len(chain) < 4 else (*chain[1:], h)
            # A block's identity is its hash and its place after the ones before it.
            segments.append((("hash", len(segments), *chain), hash_block))
        affinity = ("hash", hashes[0]) if hashes else affinity
    elif "prefix_id" in item:
        shared = int(_number(item, ("prefix_tokens",), where, whole=True))
        segments.append((("prefix", str(item["prefix_id"])), min(shared, prompt)))
        affinity = ("prefix", str(item["prefix_id"]))
    used = sum(t for _, t in segments)
    if used > prompt:  # hashes cover the last, partial block too
        key, tokens = segments[-1]
        segments[-1] = (key, tokens - (used - prompt))
        segments = [s for s in segments if s[1] > 0]
    elif used < prompt:
        segments.append((("unique", n), prompt - used))
    return TraceRequest(arrival, tuple(segments), output, affinity)


def _number(
    item: dict[str, object], names: tuple[str, ...], where: str, whole: bool = False
) -> float:
    for name in names:
        if name in item:
            value = item[name]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise SizingError("trace", f"{where}: {name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0 or (whole and value != int(value)):
                rule = "a whole number, zero or more" if whole else "zero or more"
                raise SizingError("trace", f"{where}: {name} must be {rule}, got {value!r}")
            return float(value)
    raise SizingError("trace", f"{where}: needs {' or '.join(names)}")


def harness_arrivals(rate: float, count: int, rng: random.Random) -> Iterator[float]:
    """Offsets from a stage's start of `count` requests sent as inference-perf's Poisson
    timer sends them: each second a Poisson number of requests (none: the second passes
    empty), spread over that second by exponential gaps scaled to fill it."""
    sent, second = 0, 0.0
    while sent < count:
        gaps: list[float] = []
        t = rng.expovariate(rate)
        while t < 1.0:  # a Poisson count: arrivals of a rate-`rate` process in one second
            gaps.append(0.0)
            t += rng.expovariate(rate)
        if gaps:
            gaps = [rng.expovariate(1.0) for _ in gaps]
            scale = 1.0 / sum(gaps)
            at = second
            for gap in gaps:
                at += gap * scale
                yield at
                sent += 1
                if sent == count:
                    return
        second += 1.0


def poisson_arrivals(stages: Stages, rng: random.Random) -> Iterator[float]:
    """Arrival times of a Poisson process whose rate steps through `stages`."""
    for index, rate in enumerate(stages.rates):
        t, end = index * stages.seconds, (index + 1) * stages.seconds
        while True:
            t += rng.expovariate(rate)  # memoryless: each stage starts afresh at its rate
            if t >= end:
                break
            yield t
