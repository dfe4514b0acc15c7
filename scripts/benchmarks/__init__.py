"""Developer benchmarks (`make bench-data`, `make bench-wait`): measured ratios, not tests."""
