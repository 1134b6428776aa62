"""Thin Kubernetes API I/O: reads and writes, no decisions."""
