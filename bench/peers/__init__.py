"""Peer systems and network baselines for side-by-side benchmarks."""
