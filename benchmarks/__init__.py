"""Measurement tools: each prints the figures it measures (benchmarks/README.md lists them
with their commands). No product package imports them."""
