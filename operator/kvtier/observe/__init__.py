"""Tier health observed from vLLM's own metrics: read counters, turn them into figures, decide.

Pure: `series` (samples, snapshots, window deltas), `figures` (per-tier figures over a
window), `effective` (the TierEffective decision with hysteresis), `queries` (the PromQL
kvtier sends). I/O: `prometheus` (the HTTP API client) and `scrape` (direct pod scrapes).
"""
