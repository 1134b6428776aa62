#!/usr/bin/env bash
# The study's worked examples with `kvtier plan` (add -o json for the KVCacheTier status shape).
# Needs kvtier on PATH: `pipx install .` (or `python3 -m pip install .`) from the checkout.
set -euo pipefail

if ! command -v kvtier >/dev/null 2>&1; then
  echo "plan-study.sh: kvtier is not on PATH; install the CLI from the checkout first:" >&2
  echo "  pipx install .        # or: python3 -m pip install .  (in a virtualenv)" >&2
  exit 127
fi

# Llama 3.1 70B, 16-bit KV: 327,680 B/token, a 128K context is 40 GiB, 5 MiB blocks; a 64 GB
# CPU tier holds ~1.5 such contexts.
kvtier plan --model llama-3.1-70b --tp 8 --context 128Ki --cpu 64G

# Nemotron-Ultra-253B at TP 8 (32,768 B/token per rank), ~50K-token agentic sessions over two
# replicas on 2 TiB nodes: the working set does not fit, so CephFS shares one cache. With the
# study's 205 MB/s CephFS ceiling, restoring a whole 50K context (~64 s) loses to a 60 s
# recompute although the p99 crossover (500 tokens) is far below it: the plan shows both
# checks. Put your own fio p99, bandwidth and baseline TTFT here.
kvtier plan --model nemotron-ultra-253b --tp 8 --context 50000 --sessions 128 --replicas 2 \
  --node-memory 2Ti --ttft 60 --tier-p99 cephfs=0.6 --tier-bandwidth cephfs=205MB/s

# gpt-oss-120b: 1,179,648 B blocks, the fio --bs for its disk-tier probe.
kvtier plan --model gpt-oss-120b --context 50000 --sessions 32 --node-memory 512Gi
