"""How a prediction is made: one frozen set of options for `predict`, `base_plan` and `dp_host`.

The inputs stay separate arguments (the base's traces, the target layout dict, other recordings,
the actual run, a plan fitted earlier); everything that says how the base is read, what is
changed besides the layout, and how the target is replayed is here, checked once when made.

>>> o = PredictOptions(global_batch=16, clocks="off")
>>> o.changed(samples=40).samples, o.samples
(40, 0)
>>> PredictOptions(contention="always")
Traceback (most recent call last):
...
ValueError: contention must be one of fit, off, got 'always'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from lumos.durations.clocks import CLOCK_MODES
from lumos.durations.collectives import cluster_path
from lumos.durations.contention import CONTENTION_MODES
from lumos.transform.dp_sharding import STRATEGIES

from .micro_batch_count import MICROBATCH_RULES
from .peer_waits import PEER_WAIT_MODES

__all__ = ["PredictOptions", "STEP_MODES", "GEMM_EFFICIENCIES", "ENGINES", "PLAN_FIELDS"]

# How the base's host work and its kernels are timed: the median over its profiled steps (and other
# recordings'), or the selected step's own (lumos.graph.profiled_steps).
STEP_MODES = ("median", "step")
GEMM_EFFICIENCIES = ("waves", "flops")
ENGINES = ("auto", "reference", "compiled")
# the options `base_plan` reads: predictions that agree on these can share one fitted plan
PLAN_FIELDS = ("step", "gemm_efficiency", "host", "kernels", "contention", "cluster", "nccl_tests")


@dataclass(frozen=True)
class PredictOptions:
    """How a prediction is made; the defaults are `lumos predict`'s. `changed(**kw)`: a copy with changes."""

    # --- what changes besides the layout dict (tp, pp, dp, layers, hidden, ffn) ---
    # sequences per iteration: micro-batches = global_batch / (dp x micro_batch); None: `microbatch_rule`
    global_batch: int | None = None
    # sequences per micro-batch of the target (`lumos.transform.micro_batch_size`); None: the base's
    micro_batch: int | None = None
    # micro-batches per iteration without `global_batch` (`micro_batch_count`): tp_x_pp (the paper's: the
    # target's TP x PP), keep (the base's count) or auto (tp_x_pp where the base's count is its TP x PP, else keep)
    microbatch_rule: str = "auto"
    # compute kernels this many times faster (0.5: half as fast); None: as the base
    compute_speed: float | None = None
    # collective bandwidth (NVLink and network) this many times higher; None: as the base
    network_speed: float | None = None
    # FSDP strategy of the target, from an FSDP base: full_shard or shard_grad_op
    # (`lumos.transform.dp_sharding`); None: the base's own
    fsdp_strategy: str | None = None
    # memory-model overrides (`memory.MemorySettings` field -> value, None: the profile's or calibrated);
    # None: none (`whatif.memory_settings`)
    memory: Mapping[str, object] | None = None

    # --- how the base is read and fitted (`base_plan`; PLAN_FIELDS) ---
    # ProfilerStep number of the base (and of the actual run); None: a steady-state one (`trace.steps.select_step`)
    step: int | None = None
    # how a re-shaped GEMM is re-timed (`lumos.durations.compute`): waves (wave quantization over the
    # GPU's SMs where the kernel names its tile) or flops (the FLOP ratio alone)
    gemm_efficiency: str = "waves"
    # the base's host work (CPU ops and the gaps between them): median (each over its profiled steps and
    # other recordings'; `samples` draws one step's at a time) or step (the selected step's own)
    host: str = "median"
    # the base's kernel durations (all but collectives), before the suppliers are fitted on them:
    # median or step, as `host` (without a draw)
    kernels: str = "median"
    # compute kernels slowed by the communication beside them (`lumos.durations.contention`): fit (the
    # base's slowdown taken out, the target's overlap puts it back in the replay) or off (as measured)
    contention: str = "fit"
    # the cluster profile (config/predict/clusters/NAME.yaml; None: the default, h100_roce): what a topology
    # level the base has no collective on, and every collective a target needs and the base lacks, are timed by
    cluster: str | None = None
    # nccl-tests output files measured on the target cluster (`lumos.durations.nccl_tests`): the levels the
    # base has no collective on are fitted on them instead of taken from the profile; (): none
    nccl_tests: tuple[str, ...] = ()

    # --- how the target is replayed ---
    # the sustained-clock model of the base's GPU (`lumos.durations.clocks`): recorded (the clock a
    # recording of the target made like the base's would show), steady (a long run), off (as measured)
    # or auto (recorded where the profile has the GPU and the base says its profiler schedule, else off)
    clocks: str = "auto"
    # what the base's DP collectives waited for their peers (`peer_waits`): additive (kept as kernel time),
    # anchored (replayed as the peers' arrival; a target that keeps the base's tasks only) or auto
    # (anchored for a sharded base where the target keeps its tasks, else additive)
    peer_waits: str = "auto"
    # the replay engine (`lumos.sim.simulate`): auto (compiled where built), reference or compiled
    engine: str = "auto"
    # > 0: also this many replays with durations drawn from the base's spread, an `interval`
    # (`lumos.analysis.uncertainty.predict_interval`)
    samples: int = 0
    # seed of the `samples` draws
    seed: int = 0

    def __post_init__(self):
        _one_of("contention", self.contention, CONTENTION_MODES)
        if self.gemm_efficiency not in GEMM_EFFICIENCIES:
            raise ValueError(f"gemm_efficiency must be 'waves' or 'flops', got {self.gemm_efficiency!r}")
        _one_of("host", self.host, STEP_MODES)
        _one_of("kernels", self.kernels, STEP_MODES)
        _one_of("peer_waits", self.peer_waits, PEER_WAIT_MODES)
        _one_of("micro-batch rule", self.microbatch_rule, MICROBATCH_RULES)
        if self.fsdp_strategy is not None:
            _one_of("FSDP strategy", self.fsdp_strategy, STRATEGIES)
        _one_of("clocks", self.clocks, CLOCK_MODES)
        _one_of("engine", self.engine, ENGINES)
        if self.cluster is not None:
            cluster_path(self.cluster)     # a ValueError naming the known profiles
        object.__setattr__(self, "nccl_tests", tuple(str(p) for p in self.nccl_tests))
        if self.memory is not None:   # a copy: a caller's later change to its dict does not reach these
            object.__setattr__(self, "memory", dict(self.memory))

    def changed(self, **changes) -> "PredictOptions":
        """A copy with `changes` (checked as a new one is)."""
        return dataclasses.replace(self, **changes)

    def plan_key(self) -> tuple:
        """The values of PLAN_FIELDS: the options a fitted base plan depends on."""
        return tuple(getattr(self, f) for f in PLAN_FIELDS)


def _one_of(what: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
