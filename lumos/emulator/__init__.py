"""A discrete-event stand-in for a GPU cluster running one Megatron-style GPT iteration.

It is the ground truth of every emulated experiment, so it carries physics the
trace-driven predictor does not see (jitter, straggling peers, SM contention,
shared NICs, congestion, host stalls) and it never imports the predictor
(`lumos.graph`, `lumos.sim`, `lumos.transform`, `lumos.analysis`,
`lumos.baselines`). Everything it produces is *emulated*, not measured.
"""

from .emulate import EmulationResult, emulate, emulate_config, write_result

__all__ = ["EmulationResult", "emulate", "emulate_config", "write_result"]
