"""Per-client compression maths, used on both sides: Top-k selection, compressors, error
feedback and the compression gain."""
