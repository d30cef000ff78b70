"""Fuzzing lumos's compiled kernels against their plain twins (fuzz/README.md)."""
