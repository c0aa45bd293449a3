"""Command-line scripts: the simulation launcher, comparisons and benchmarks."""
