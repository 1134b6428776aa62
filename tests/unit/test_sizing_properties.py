"""Property tests: monotonicity and TP invariants of the sizing."""

from hypothesis import assume, given
from hypothesis import strategies as st

from kvtier.sizing import (
    ModelGeometry,
    SizingInput,
    bytes_per_token,
    bytes_per_token_per_rank,
    crossover_tokens,
    kv_heads_per_rank,
    plan,
)

positive = st.integers(min_value=1, max_value=256)
heads = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128])
tps = st.sampled_from([1, 2, 4, 8, 16, 32])
dtype_bytes = st.sampled_from([1, 2])


@st.composite
def geometries(draw: st.DrawFn) -> ModelGeometry:
    if draw(st.booleans()):
        return ModelGeometry(draw(positive), 1, draw(positive), latent_attention=True)
    return ModelGeometry(draw(positive), draw(heads), draw(positive))


@given(geometries(), tps, dtype_bytes)
def test_server_is_per_rank_times_tp(g: ModelGeometry, tp: int, b: int) -> None:
    assert bytes_per_token(g, tp, b) == bytes_per_token_per_rank(g, tp, b) * tp


@given(positive, heads, positive, tps, dtype_bytes)
def test_tp_within_heads_only_shards(layers: int, h: int, d: int, tp: int, b: int) -> None:
    g = ModelGeometry(layers, h, d)
    per_tp1 = bytes_per_token(g, 1, b)
    if h % tp == 0:  # sharding: the server total does not change
        assert bytes_per_token(g, tp, b) == per_tp1
        assert kv_heads_per_rank(g, tp) * tp == h
    else:  # replication: one head per rank, the server holds more than one copy
        assert kv_heads_per_rank(g, tp) == 1
        assert bytes_per_token(g, tp, b) == per_tp1 * tp // h


@given(positive, heads, positive, tps, positive, positive)
def test_bytes_grow_with_every_dimension(
    layers: int, h: int, d: int, tp: int, extra_layers: int, extra_dim: int
) -> None:
    g = ModelGeometry(layers, h, d)
    if h % tp and tp % h:
        return
    base = bytes_per_token(g, tp, 2)
    assert bytes_per_token(ModelGeometry(layers + extra_layers, h, d), tp, 2) > base
    assert bytes_per_token(ModelGeometry(layers, h, d + extra_dim), tp, 2) > base
    assert bytes_per_token(g, tp, 1) * 2 == base


@given(
    context=st.integers(1, 1_000_000),
    more_context=st.integers(0, 1_000_000),
    sessions=st.integers(1, 512),
    more_sessions=st.integers(0, 512),
    replicas=st.integers(1, 16),
    cpu=st.integers(1, 2**42),
)
def test_working_set_and_fit_are_monotone(
    context: int, more_context: int, sessions: int, more_sessions: int, replicas: int, cpu: int
) -> None:
    g = ModelGeometry(80, 8, 128)
    cpu = max(cpu, 16 * bytes_per_token(g, 8, 2))
    assume(context >= 16)  # vLLM stores whole 16-token chunks: a shorter context stores none

    def run(ctx: int, n: int) -> tuple[int, bool, float]:
        s = plan(
            SizingInput(
                g,
                ctx,
                concurrent_sessions=n,
                replicas=replicas,
                tensor_parallel_size=8,
                cpu_bytes=cpu,
            )
        ).sizing
        return s.working_set_bytes, s.fits_in_cpu, s.contexts_in_cpu

    small = run(context, sessions)
    large = run(context + more_context, sessions + more_sessions)
    assert large[0] >= small[0]
    assert large[1] <= small[1]  # a larger working set never starts to fit
    assert large[2] <= small[2]  # nor do more of its contexts fit


@given(
    p99=st.floats(0.001, 10),
    ttft=st.floats(0.1, 600),
    context=st.integers(1, 1_000_000),
    factor=st.floats(1.01, 10),
)
def test_crossover_moves_with_latency_and_ttft(
    p99: float, ttft: float, context: int, factor: float
) -> None:
    base = crossover_tokens(p99, ttft, context)
    assert crossover_tokens(p99 * factor, ttft, context) >= base  # slower tier: longer L
    assert crossover_tokens(p99, ttft * factor, context) <= base  # slower prefill: shorter L


@given(cpu_small=st.integers(1, 2**40), extra=st.integers(0, 2**40))
def test_more_cpu_never_unfits(cpu_small: int, extra: int) -> None:
    g = ModelGeometry(64, 8, 128)
    cpu_small = max(cpu_small, 16 * bytes_per_token(g, 8, 2))

    def fits(cpu: int) -> bool:
        inp = SizingInput(g, 50_000, concurrent_sessions=16, tensor_parallel_size=8, cpu_bytes=cpu)
        return plan(inp).sizing.fits_in_cpu

    if fits(cpu_small):
        assert fits(cpu_small + extra)


@given(
    node=st.integers(64 * 2**30, 8 * 2**40),
    pods=st.integers(1, 8),
    sessions=st.integers(1, 256),
    context=st.integers(1, 500_000),
)
def test_auto_cpu_tier_fits_the_node_budget(
    node: int, pods: int, sessions: int, context: int
) -> None:
    assume(node // 2 // pods > 8 * 2**30)  # room for headroom and a block; less is refused
    inp = SizingInput(
        ModelGeometry(64, 8, 128),
        context,
        concurrent_sessions=sessions,
        tensor_parallel_size=8,
        node_memory_bytes=node,
        model_server_pods_per_node=pods,
    )
    s = plan(inp).sizing
    assert s.cpu_bytes_to_use % s.block_bytes == 0
    # The pod memory the tier costs stays within the pod's share of the node.
    assert s.pod_memory_bytes <= node * inp.max_node_memory_fraction / pods + 1
    assert s.fits_in_cpu == (s.cpu_bytes_to_use >= s.working_set_bytes)
