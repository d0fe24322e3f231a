"""The discretionary-caching study (paper §4-5): cache simulator, study runs, plots."""
