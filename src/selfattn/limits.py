"""Limits on numbers that several rooms accept (CLI arguments and the library calls they reach), written once.

Pure Python: the CLI checks its arguments against these before importing torch.
"""

from __future__ import annotations

__all__ = ["MAX_SEED", "MAX_THREADS"]

MAX_SEED = 2**63 - 1
"""Largest seed of training, sampling and benchmarks: a signed 64-bit integer, which torch.Generator
and NumPy both take (torch refuses 2**64 with "Overflow when unpacking long long")."""

MAX_THREADS = 1024
"""Most torch threads a run may ask for: more than any machine this runs on has cores (torch accepts
100,000 and then crashes the process at exit)."""
