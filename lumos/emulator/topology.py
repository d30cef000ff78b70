"""Where each rank sits (host, TP/DP/PP coordinates) and which process groups it belongs to.

Megatron order: TP innermost, then DP, then PP, so a TP group never leaves a host
and a DP group spans hosts once tp*dp > gpus_per_host.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Group:
    """A NCCL communicator: its ranks, how many hosts it spans, and who is emulated in full."""

    kind: str                 # tp | dp | pp (2-rank pipeline channel) | mp (model-parallel: TP x PP) | cp
                              #   | ep (expert-parallel) | edp (expert data-parallel)
    key: tuple
    name: str                 # "Process Group Name" (a number, as PyTorch writes it)
    ranks: tuple
    hosts: int
    per_host: int
    real: tuple = ()          # emulated ranks in this group
    virtual: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def ranks_str(self) -> str:
        s = self.__dict__.get("_ranks_str")
        if s is None:
            s = self.__dict__["_ranks_str"] = "[" + ", ".join(str(r) for r in self.ranks) + "]"
        return s


class Topology:
    """`model_parallel_group`: the job also creates Megatron's model-parallel groups (TP x PP ranks of one
    DP index, for the grad-norm all-reduce); they are then listed in each rank's `pg_config`."""

    def __init__(self, tp: int, pp: int, dp: int, gpus_per_host: int, model_parallel_group: bool = False,
                 ring: bool = False, cp: int = 1, ep: int = 1, moe: bool = False):
        """`dp`: the data-parallel ranks of a stage, context-parallel ones included (Megatron's order is TP, CP,
        DP, PP: `cp` consecutive ones of them, TP apart, share each sequence; the gradients are reduced over
        all of them, Megatron's data-parallel group with context parallelism)."""
        self.tp, self.pp, self.dp, self.gph = tp, pp, dp, gpus_per_host
        self.with_mp = model_parallel_group
        self.ring = ring and pp > 2    # interleaved 1F1B: the last stage also sends to the first
        self.cp = cp
        self.ep = ep   # expert-parallel ranks, drawn from a stage's TP x DP ranks (expert tensor parallelism 1)
        self.moe = moe
        self.world = tp * pp * dp
        self.hosts = -(-self.world // gpus_per_host)
        self._groups: dict[tuple, Group] = {}
        self.emulated: tuple = ()

    def rank(self, pp_idx: int, dp_idx: int, tp_idx: int) -> int:
        return pp_idx * self.tp * self.dp + dp_idx * self.tp + tp_idx

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(pp_idx, dp_idx, tp_idx)"""
        per_stage = self.tp * self.dp
        return rank // per_stage, (rank % per_stage) // self.tp, rank % self.tp

    def host(self, rank: int) -> int:
        return rank // self.gph

    def stage_reps(self) -> list[int]:
        return [self.rank(s, 0, 0) for s in range(self.pp)]

    def set_emulated(self, ranks) -> None:
        self.emulated = tuple(sorted(ranks))
        self._groups.clear()

    def _make(self, kind: str, key: tuple, ranks: tuple, number: int) -> Group:
        g = self._groups.get(key)
        if g is None:
            hosts = sorted({self.host(r) for r in ranks})
            em = set(self.emulated)
            real = tuple(r for r in ranks if r in em)
            virt = np.array([r for r in ranks if r not in em], dtype=np.int64)
            g = Group(kind=kind, key=key, name=str(number), ranks=ranks, hosts=len(hosts),
                      per_host=-(-len(ranks) // len(hosts)), real=real, virtual=virt)
            self._groups[key] = g
        return g

    # Group names are numbered like PyTorch numbers process groups: 0 is WORLD,
    # then all TP groups, all DP groups, then the pipeline channels.
    def tp_group(self, rank: int) -> Group:
        s, d, _ = self.coords(rank)
        ranks = tuple(self.rank(s, d, t) for t in range(self.tp))
        return self._make("tp", ("tp", s, d), ranks, 1 + s * self.dp + d)

    def dp_group(self, rank: int) -> Group:
        s, _, t = self.coords(rank)
        ranks = tuple(self.rank(s, d, t) for d in range(self.dp))
        return self._make("dp", ("dp", s, t), ranks, 1 + self.pp * self.dp + s * self.tp + t)

    def pp_channel(self, rank: int, peer: int) -> Group:
        """The 2-rank communicator between neighbouring stages (same dp and tp index)."""
        lo, hi = min(rank, peer), max(rank, peer)
        s, d, t = self.coords(lo)
        base = 1 + self.pp * self.dp + self.pp * self.tp
        number = base + (d * self.tp + t) * max(self.pp - 1, 1) + s
        if self.coords(hi)[0] - s > 1:   # the ring's wrap (last stage -> first), numbered after the mp groups
            number = base + self.dp * self.tp * max(self.pp - 1, 1) + self.dp + d * self.tp + t
        return self._make("pp", ("pp", lo, hi), (lo, hi), number)

    def mp_group(self, rank: int) -> Group:
        """Megatron's model-parallel group: every TP and PP rank of one data-parallel index (numbered after
        the pipeline channels)."""
        _, d, _ = self.coords(rank)
        ranks = tuple(self.rank(s, d, t) for s in range(self.pp) for t in range(self.tp))
        base = 1 + self.pp * self.dp + self.pp * self.tp + self.dp * self.tp * max(self.pp - 1, 1)
        return self._make("mp", ("mp", d), tuple(sorted(ranks)), base + d)

    def cp_group(self, rank: int) -> Group:
        """The context-parallel group of `rank`: the `cp` ranks, TP apart, that hold the parts of its sequences
        (numbered after every other group)."""
        s, d, t = self.coords(rank)
        first = d - d % self.cp
        ranks = tuple(self.rank(s, first + c, t) for c in range(self.cp))
        base = 1 + self.pp * self.dp + self.pp * self.tp + self.dp * self.tp * max(self.pp - 1, 1) + self.dp \
            + self.dp * self.tp
        return self._make("cp", ("cp", s, first, t), ranks, base + (s * (self.dp // self.cp) + first // self.cp) * self.tp + t)

    def cp_channel(self, rank: int, peer: int) -> Group:
        """The 2-rank communicator of a context-parallel ring's neighbours (ProcessGroupNCCL's point-to-point
        communicator of the pair; the trace names the CP group the call was made on). Never listed in
        `pg_config`."""
        lo, hi = min(rank, peer), max(rank, peer)
        return self._make("cpp", ("cpp", lo, hi), (lo, hi), -1)

    def _after_cp(self) -> int:
        """First group number after the context-parallel groups (an upper bound of theirs)."""
        return 2 + self.pp * self.dp + self.pp * self.tp + self.dp * self.tp * max(self.pp - 1, 1) + self.dp \
            + self.dp * self.tp + self.pp * self.dp * self.tp

    def ep_group(self, rank: int) -> Group:
        """The expert-parallel group of `rank`: `ep` consecutive ranks of its stage (TP innermost, so an EP
        group of up to a host's GPUs stays on NVLink; Megatron-Core's expert rank order with expert TP 1,
        megatron/core/parallel_state.py, initialize_model_parallel's expert_decoder_rank_generator)."""
        s = self.coords(rank)[0]
        j = rank - s * self.tp * self.dp
        first = j - j % self.ep
        ranks = tuple(s * self.tp * self.dp + first + i for i in range(self.ep))
        return self._make("ep", ("ep", s, first), ranks, self._after_cp() + s * (self.tp * self.dp // self.ep)
                          + first // self.ep)

    def separate_edp(self) -> bool:
        """Whether the experts' gradients have a group of their own: unless TP and EP are both 1, where the
        expert data-parallel ranks are the DP group's and the experts' gradients join the dense buckets."""
        return self.moe and (self.tp > 1 or self.ep > 1)

    def ep_index(self, rank: int) -> int:
        """Which expert-parallel group of its stage `rank` is in (each routes its own tokens)."""
        return (rank % (self.tp * self.dp)) // self.ep

    def edp_group(self, rank: int) -> Group:
        """The expert data-parallel group: the ranks of the stage holding the same experts (one per EP group),
        over which the experts' gradients are all-reduced."""
        s = self.coords(rank)[0]
        j = rank - s * self.tp * self.dp
        ranks = tuple(s * self.tp * self.dp + j % self.ep + i * self.ep for i in range(self.tp * self.dp // self.ep))
        return self._make("edp", ("edp", s, j % self.ep), ranks, self._after_cp() + self.pp * self.tp * self.dp
                          + s * self.ep + j % self.ep)

    def copies_on_host(self, g: Group, rank: int) -> tuple[int, int]:
        """(GPUs of `rank`'s host that run this call of `g` across hosts at once, how many of them are emulated).

        Every rank of a pipeline stage runs the same program, so each of them makes the same call on its
        own group (its own DP ring, its own pipeline channel); of a pipeline channel, only the ranks whose
        partner is on another host leave the host."""
        h = self.host(rank)
        stage = self.coords(rank)[0]
        other = None
        if g.kind == "cpp":
            return self._ring_copies_on_host(h, stage)
        if g.kind == "pp":
            other = self.coords(g.ranks[0] if g.ranks[1] == rank else g.ranks[1])[0]
        em = set(self.emulated)
        n = n_em = 0
        for q in range(h * self.gph, min((h + 1) * self.gph, self.world)):
            s, d, t = self.coords(q)
            if s != stage or (other is not None and self.host(self.rank(other, d, t)) == h):
                continue
            n += 1
            n_em += q in em
        return n, n_em

    def _ring_copies_on_host(self, h: int, stage: int) -> tuple[int, int]:
        """Of a context-parallel ring: the ranks of `stage` on host `h` whose next ring neighbour is on another
        host (each ring step, every CP group sends at once), and how many of them are emulated."""
        em = set(self.emulated)
        n = n_em = 0
        for q in range(h * self.gph, min((h + 1) * self.gph, self.world)):
            s, d, t = self.coords(q)
            if s != stage:
                continue
            first = d - d % self.cp
            if self.host(self.rank(s, first + (d - first + 1) % self.cp, t)) != h:
                n += 1
                n_em += q in em
        return n, n_em

    def pg_config(self, rank: int) -> list[dict]:
        out = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                "pg_size": self.world, "ranks": list(range(self.world))}]
        groups = [self.tp_group(rank), self.dp_group(rank)]
        s, d, t = self.coords(rank)
        for nb in (s - 1, s + 1):
            if 0 <= nb < self.pp:
                groups.append(self.pp_channel(rank, self.rank(nb, d, t)))
        if self.ring and s in (0, self.pp - 1):
            groups.append(self.pp_channel(rank, self.rank(self.pp - 1 - s, d, t)))
        if self.with_mp:
            groups.append(self.mp_group(rank))
        if self.cp > 1:
            groups.append(self.cp_group(rank))
        if self.ep > 1:
            groups.append(self.ep_group(rank))
        if self.separate_edp() and self.ep < self.tp * self.dp:
            groups.append(self.edp_group(rank))
        for g in groups:
            out.append({"pg_name": g.name, "pg_desc": f"{g.kind}_group", "backend_config": "cuda:nccl",
                        "pg_size": len(g.ranks), "ranks": list(g.ranks)})
        return out
