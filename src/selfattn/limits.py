"""Limits on numbers that several rooms accept (CLI arguments and the library calls they reach), written once.

Pure Python: the CLI checks its arguments against these before importing torch.
"""

from __future__ import annotations

__all__ = ["MAX_SEED", "MAX_THREADS", "MAX_PARAMETERS", "MAX_LOAD", "TEMPERATURE_RANGE"]

MAX_SEED = 2**63 - 1
"""Largest seed of training, sampling and benchmarks: a signed 64-bit integer, which torch.Generator
and NumPy both take (torch refuses 2**64 with "Overflow when unpacking long long")."""

MAX_THREADS = 1024
"""Most torch threads a run may ask for: more than any machine this runs on has cores (torch accepts
100,000 and then crashes the process at exit)."""

MAX_PARAMETERS = 2_000_000_000
"""Largest module or model (parameters, estimated from its sizes before any tensor is allocated): 8 GB of
float32, which must fit in memory with room for activations. Wider asks get a ValueError naming the sizes,
not torch's "can't allocate memory" from deep inside."""


MAX_LOAD = 256
"""Most busy processes `selfattn bench --load` starts (`selfattn.bench.load`)."""

TEMPERATURE_RANGE = (0.01, 100.0)
"""Lowest and highest softmax temperature, of sampling (`selfattn.model.generate`) and of the explainer's
intervention: logits / 0.01 stay finite in float32 for any logit a model gives (a temperature like 1e-300
turns them into ±inf and the probabilities into NaN), and at 100 the distribution is all but uniform."""
