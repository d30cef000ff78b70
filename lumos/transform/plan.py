"""The state a chain of transforms passes along: a run graph plus what the transforms need to know.

Per task: the collective's kind, process group, message bytes and role (tp, dp,
pp), the launching op and its Input Dims; per run: the model shape and the
parallel layout; and the send/recv pairs still to be joined by rendezvous.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from lumos.durations import AlphaBeta, ComputeModel
from lumos.durations.contention import NO_CONTENTION, Contention
from lumos.graph.model import Graph
from lumos.model.parallel_layout import is_cp_collective
from lumos.model.structure import ModelShape, RunStructure


@dataclass
class Plan:
    graph: Graph
    st: RunStructure            # blocks and per-task facts, aligned with graph tasks
    role: np.ndarray            # object per task: 'tp' | 'dp' | 'pp' | None
    shape: ModelShape
    tp: int
    pp: int
    dp: int
    layers: int
    microbatches: int
    ranks: list                 # global rank of each stage's representative
    collectives: AlphaBeta
    compute: ComputeModel
    base_shape: ModelShape | None = None   # the profiled model's shape (parameter counts of the base)
    pairs: list = field(default_factory=list)   # rendezvous groups not yet in the graph
    notes: list = field(default_factory=list)   # assumptions taken from flags/config, said aloud
    measured_memory: object = None   # MeasuredPeak of the base (memory_calibration.py), when its trace has one
    profiled_steps: dict = field(default_factory=dict)   # rank -> ProfiledSteps its medians are over
    host_draw: bool = False   # host work a median, so an interval draws it one profiled step at a time
    sharding: str = ""   # the base's sharded DP flavour (whatif.SHARDED_MEMORY), '' for all-reduce DP
    # (role, kind) of the collectives whose group spanned hosts in the base: their measured times
    # hold their share of the NIC (lumos.predict.nic_sharing)
    base_crossing: frozenset = frozenset()
    # (role, kind) of those whose base sharing the rebuild took out, to be shared again in the target's
    # replay: the overlapped pipeline exchange moved to another schedule (lumos.transform.p2p_overlap.unshared)
    reshared: frozenset = frozenset()
    # compute kernels' slowdown under communication, fitted on the base (durations/contention.py);
    # the graph's compute durations are then their time alone, put back by lumos.predict.contention
    contention: Contention = NO_CONTENTION
    # the cluster profile the suppliers were fitted with (lumos.durations.collectives.load_profile), and the
    # kinds of collective added because the base had none (add_collectives.py: 'tp', 'dp', 'pp')
    profile: dict = field(default_factory=dict, repr=False)
    inserted: tuple = ()
    host_gaps: object = None    # a CPU capture's gaps inside its ops (lumos.model.host_gaps), re-timed as they are
    chunks: int = 1             # model chunks per stage: interleaved 1F1B when > 1 (`schedule.interleaved`)
    stage_layers: tuple = ()    # layers of each stage (empty: split as `schedule.layers_per_stage` does)
    chunk_layers: tuple = ()    # per stage, the layers of each chunk (empty: each stage's split evenly)
    cp: int = 1                 # context-parallel ranks per sequence; `dp` counts them (the gradients' group)
    cp_form: str = "allgather"  # the base's: Llama 3's all-gather of keys and values, or the p2p ring (`cp_ring.py`)
    ep: int = 1                 # expert-parallel ranks of an MoE run (`st.moe`: what the base's MoE layers are)
    routing: object = None      # an MoE base's routing unevenness (lumos.durations.routing.RoutingFit)
    expert_cost: object = None  # its experts' GEMMs against their rows (lumos.durations.experts.ExpertCost)
    exchange_offsets: dict = field(default_factory=dict)   # its exchanges' time beyond the model (transform/moe.py)
    moe_parts: dict = field(default_factory=dict)   # block index -> its MoE layer's exchanges and experts' tasks
    moe_experts: int = 0        # an MoE target's experts, top-k and expert width (0: the base's, `st.moe`)
    moe_top_k: int = 0
    moe_expert_ffn: int = 0
    # what is derived from this graph and structure alone (the rebuild's templates); clone() starts
    # a fresh one, since a clone is made to be changed
    memo: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def host_steps(self) -> dict:
        """rank -> ProfiledSteps an interval draws host work from (none where host work is one step's)."""
        return self.profiled_steps if self.host_draw else {}

    def clone(self) -> "Plan":
        p = copy.copy(self)
        p.graph = self.graph.copy()
        p.st = copy.copy(self.st)
        for f in ("coll", "group", "nbytes", "op_name", "op_dims", "task_block"):
            setattr(p.st, f, getattr(self.st, f).copy())
        p.role = self.role.copy()
        p.shape = copy.copy(self.shape)
        p.pairs = [list(g) for g in self.pairs]
        p.notes = list(self.notes)
        if self.host_gaps is not None:
            p.host_gaps = copy.copy(self.host_gaps)
            p.host_gaps.op_dims = self.host_gaps.op_dims.copy()
        p.memo = {}
        return p


def refuse_rebucketing(plan: Plan, change: str) -> None:
    """A sharded optimizer's base (`zero12`) predicts DP and hardware-speed changes only: any other
    change would have to re-cut its buckets (their reduce-scatters and the parameter all-gathers after
    the step), which is not built, so `change` is refused with the reason. An FSDP base takes
    every change (`dp.change_dp`, `tp.change_tp`, `width.change_width`, the rebuild with `dp_shard_units.py`)."""
    if plan.sharding == "zero12":
        raise ValueError(f"the base trains with sharded data parallelism ({plan.sharding}): Lumos does not predict "
                         f"{change} from it (its buckets' reduce-scatters and parameter all-gathers would have to "
                         "be re-cut for the new layout; docs/prediction.md, 'Sharded data parallelism')")


def stage_ranks(pp: int, tp: int, dp: int) -> list[int]:
    """Megatron rank layout (TP innermost, then DP, then PP): rank of (stage s, dp 0, tp 0)."""
    return [s * tp * dp for s in range(pp)]


def dp_group(rank: int, tp: int, dp: int) -> tuple:
    return tuple(rank + d * tp for d in range(dp))


def tp_group(rank: int, tp: int) -> tuple:
    return tuple(range(rank, rank + tp))


def mp_group(rank: int, tp: int, pp: int, dp: int) -> tuple:
    """The model-parallel group of `rank`: its TP ranks in every stage (Megatron's grad-norm all-reduce)."""
    base = (rank // tp) % dp * tp
    return tuple(s * tp * dp + base + t for s in range(pp) for t in range(tp))


def ep_group(rank: int, tp: int, dp: int, ep: int) -> tuple:
    """The expert-parallel group of `rank`: `ep` consecutive ranks of its stage's TP x DP ranks (Megatron-Core's
    expert layout with expert TP 1, megatron/core/parallel_state.py)."""
    per = tp * dp
    first = rank - (rank % per) % ep
    return tuple(range(first, first + ep))


def edp_group(rank: int, tp: int, dp: int, ep: int) -> tuple:
    """The expert data-parallel group of `rank`: the stage's ranks holding the same experts, one per EP group
    (TP x DP / EP of them), over which the experts' gradients are reduced."""
    per = tp * dp
    base, j = rank - rank % per, rank % per
    return tuple(base + j % ep + i * ep for i in range(per // ep))


def comm_roles(st: RunStructure) -> np.ndarray:
    """tp / cp / dp / pp / mp / ep / edp per communication task, from its group's size and stride (Megatron's layout:
    TP ranks adjacent, CP and DP ranks TP apart, stages TP x CP x DP apart; an MoE run's expert-parallel groups
    `ep_group`, its experts' gradient groups `edp_group`): cp is a layer's context-parallel
    gather or reduce-scatter (`parallel_layout.is_cp_collective`), mp the model-parallel group, TP x PP ranks
    (Megatron's grad-norm all-reduce); anything else is "other"."""
    role = np.empty(len(st.coll), dtype=object)
    moe = getattr(st, "moe", None)
    ep = moe.ep if moe is not None else 1
    for t in np.flatnonzero(st.coll != None):  # noqa: E711
        g = st.group[t] or ()
        kind = st.blocks[st.task_block[t]].kind if st.task_block[t] >= 0 else ""
        if st.coll[t] in ("send", "recv") and not _ring_exchange(st, g, kind, st.coll[t]):
            role[t] = "pp"
        elif st.coll[t] in ("send", "recv"):
            role[t] = "cp"      # a ring's exchange of a key/value chunk (on its CP group, or timed on its pair)
        elif ep > 1 and kind == "layer" and len(g) == ep and tuple(sorted(g)) == ep_group(min(g), st.tp, st.dp, ep):
            role[t] = "ep"      # an MoE layer's token exchange (and its counts' all-gather)
        elif moe is not None and kind == "dp" and len(g) > 1 and len(g) != st.dp \
                and tuple(sorted(g)) == edp_group(min(g), st.tp, st.dp, ep):
            role[t] = "edp"     # the experts' gradients, over the ranks that hold the same experts
        elif st.cp > 1 and len(g) == st.cp and st.task_block[t] >= 0 and is_cp_collective(
                st.coll[t], g, st.blocks[st.task_block[t]].kind, st.tp):
            role[t] = "cp"
        elif len(g) == st.tp and st.tp > 1 and (len(g) < 2 or g[1] - g[0] == 1):
            role[t] = "tp"
        elif len(g) == st.dp and st.dp > 1 and (len(g) < 2 or g[1] - g[0] == st.tp):
            role[t] = "dp"      # (a model-parallel group, TP x PP ranks, of the same size strides by TP x DP)
        elif st.pp > 1 and len(g) == st.tp * st.pp and tuple(sorted(g)) == mp_group(min(g), st.tp, st.pp, st.dp):
            role[t] = "mp"
        else:
            role[t] = "other"
    return role


def _ring_exchange(st: RunStructure, g: tuple, block_kind: str, kind: str) -> bool:
    """A send or receive of context parallelism's ring: inside a layer, on the CP group as the trace names it, or on
    the pair of ring neighbours it runs between (`cp_ring.pair_groups`), ranks TP apart within one CP group."""
    if st.cp < 2 or block_kind != "layer":
        return False
    if len(g) == st.cp and is_cp_collective(kind, g, block_kind, st.tp):
        return True
    return len(g) == 2 and (g[1] - g[0]) % st.tp == 0 and 0 < g[1] - g[0] < st.tp * st.cp


def cp_form(st: RunStructure, role: np.ndarray) -> str:
    """The base's form of context parallelism: `ring` where its CP exchanges are sends and receives."""
    return "ring" if np.any((role == "cp") & np.isin(st.coll.astype(str), ("send", "recv"))) else "allgather"


def block_mask(st: RunStructure, kinds) -> np.ndarray:
    """Per task: whether its block is of one of `kinds` (False outside any block)."""
    of_kind = np.array([b.kind in kinds for b in st.blocks] + [False], bool)
    return of_kind[st.task_block]       # task_block -1 (no block) reads the trailing False
