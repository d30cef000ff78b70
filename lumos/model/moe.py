"""What a mixture-of-experts layer's forward ops say: experts, top-k, EP, expert width, tokens per expert.

An MoE layer's GEMMs after its attention projection are a router (T x h -> E, T the rank's tokens, E
the experts in all) and then its local experts one after another, each a SwiGLU MLP (gate, up, down:
rows x h -> f, rows x h -> f, rows x f -> h; or gate and up fused, rows x h -> 2f) whose rows are the
tokens that expert got, possibly followed by a shared expert that sees all T tokens (Megatron-Core's
`SequentialMLP` and `SharedExpertMLP`, megatron/core/transformer/moe/experts.py, shared_experts.py).
A dense MLP has three GEMMs (or two), none of them T x h -> E, so the two are never confused.

Each number is read from its own evidence, and where two readings of one number exist they must agree:

- experts in all: the router's output width, and the local experts x EP;
- EP: the size of the process group of the layer's all-to-alls (the `Process Group Ranks` / `Group size`
  args where the trace has them, else the one process group `distributedInfo` lists: gloo's ops name
  none); 1 when the layer has no all-to-all;
- top-k: the permutation's row copy (the first `index_select` of the T x h activations, by T x k
  indices), or the dispatch all-to-all's T x k rows;
- tokens per expert: each expert GEMM's rows; over the EP ranks of one layer and micro-batch they must
  add up to T x EP x k (every token's k picks, from every rank's tokens). A layer where they do not
  (tokens dropped by a capacity factor, or padded) is named in one line, and no count is printed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ExpertLayout", "MoEReading", "split_experts", "read_moe", "MoEDisagreement"]

PERMUTE_OPS = ("aten::index_select",)      # Megatron's `permute` (moe_utils.py) and ours copy rows this way
FUSED_PERMUTE_OPS = ("aten::_moe_permute",)   # Transformer Engine's fused moe_permute: [T x k, h] out


class MoEDisagreement(ValueError):
    """Two readings of an MoE number disagree: which, and what each says."""


@dataclass(frozen=True)
class ExpertLayout:
    """One layer's MoE GEMMs on one rank: the router, then each expert's rows and width."""
    router: tuple                 # (T, h, E)
    rows: tuple                   # per local expert, in launch order: the rows (tokens) its GEMMs took
    width: int                    # the experts' FFN width
    fused: bool                   # gate and up in one GEMM
    shared_width: int = 0         # the shared expert's width (0: none)
    grouped: bool = False         # one grouped GEMM for all experts: `rows` an equal share of its total rows
                                  #   (the GEMMs between the router and them are the shared expert)


def _expert(gemms: list, i: int, h: int):
    """(rows, width, GEMMs used) of the SwiGLU expert starting at gemms[i], or None."""
    g = gemms[i:i + 3]
    if len(g) == 3 and g[0][1] == h and g[1][1] == h and g[0][2] == g[1][2] == g[2][1] and g[2][2] == h \
            and g[0][0] == g[1][0] == g[2][0]:
        return int(g[0][0]), int(g[0][2]), 3, False
    if len(g) >= 2 and g[0][1] == h and g[1][2] == h and g[0][2] == 2 * g[1][1] and g[0][0] == g[1][0]:
        return int(g[0][0]), int(g[1][1]), 2, True
    return None


def split_experts(mlp: list, h: int, tokens: int, grouped: int = 0) -> ExpertLayout | None:
    """The MoE layout of the GEMMs after a layer's attention projection ((m, k, n) each), or None when
    they are no router followed by experts. A last expert of all `tokens` rows and a width of its own is
    the shared expert; with `grouped` (the per-expert GEMMs of grouped GEMMs, last), any expert between the
    router and them is."""
    if len(mlp) < 3 or int(mlp[0][0]) != tokens or int(mlp[0][1]) != h:
        return None
    if grouped:   # the last `grouped` GEMMs are the grouped experts'; any between the router and them, a shared expert
        lay = split_experts([mlp[0], *mlp[len(mlp) - grouped:]], h, tokens)
        between = mlp[1:len(mlp) - grouped]
        shared = _expert(between, 0, h) if between else None
        if lay is None or (between and (shared is None or shared[2] != len(between) or shared[0] != tokens)):
            return None
        return ExpertLayout(router=lay.router, rows=lay.rows, width=lay.width, fused=lay.fused,
                            shared_width=shared[1] if shared else 0, grouped=True)
    found, i = [], 1
    while i < len(mlp):
        e = _expert(mlp, i, h)
        if e is None:
            return None
        found.append(e)
        i += e[2]
    if not found:
        return None
    shared = 0
    if len(found) > 1 and found[-1][0] == tokens and found[-1][1] != found[0][1]:
        shared = found.pop()[1]
    if len({w for _, w, _, _ in found}) != 1 or len({f for *_, f in found}) != 1:
        return None
    return ExpertLayout(router=tuple(int(x) for x in mlp[0]), rows=tuple(r for r, *_ in found), width=found[0][1],
                        fused=found[0][3], shared_width=shared, grouped=grouped)


@dataclass(frozen=True)
class MoEReading:
    experts: int                  # in all
    experts_local: int            # per EP rank
    top_k: int
    ep: int
    expert_ffn: int
    shared_expert_ffn: int
    tokens: int                   # T: tokens per rank and micro-batch
    # (layer, micro-batch) -> rows each expert got, by global expert index (EP rank r holds r x E/EP ..)
    tokens_per_expert: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)
    disagreement: str = ""        # one line where the token counts do not add up; then no counts
    # (rank, layer, micro-batch) -> tokens the rank's experts received (their GEMM rows), every layer forward
    received: dict = field(default_factory=dict)
    grouped: bool = False         # the experts ran as grouped GEMMs


def read_moe(layouts: dict, permuted_rows: dict, a2a: dict, where: str = "",
             permute_op: str = "index_select") -> MoEReading:
    """The MoE reading of a run from, per layer forward block `(rank, layer, micro-batch)`: its
    `ExpertLayout` (`layouts`), the rows of its first row copy by the router's picks (`permuted_rows`: 0
    where none was seen) and its all-to-alls (`a2a`: a list of (group size, where the size came from, input
    rows) per call, in launch order). EP ranks are the ranks in order. Raises MoEDisagreement when the
    experts, EP or top-k readings disagree."""
    first = min(layouts)
    lay = layouts[first]
    T, h, E = lay.router
    local = len(lay.rows)
    ev = {}
    def differs(x):
        return len(x.rows) != local or x.width != lay.width or x.router != lay.router

    if any(differs(x) for x in layouts.values()):
        odd = next(k for k, x in layouts.items() if differs(x))
        raise MoEDisagreement(f"the MoE layers differ: rank {first[0]} layer {first[1]} has {local} experts of "
                              f"width {lay.width}, rank {odd[0]} layer {odd[1]} {len(layouts[odd].rows)} of "
                              f"{layouts[odd].width} ({where})")
    sizes = {(s, src) for calls in a2a.values() for s, src, _ in calls if s}
    if not any(a2a.values()):
        ep, ev["EP"] = 1, "no all-to-all in the MoE layers: every expert on every rank"
    elif len({s for s, _ in sizes}) == 1:
        ep, src = next(iter(sizes))
        ev["EP"] = f"the all-to-alls' process group ({src})"
    else:
        seen = "/".join(sorted({str(s) for s, _ in sizes}))
        raise MoEDisagreement(f"the MoE layers' all-to-alls run over groups of {seen} ranks ({where})")
    ranks = sorted({r for r, _, _ in layouts})
    partial = ep > 1 and len(ranks) != ep   # one rank per stage (a prediction's base): each its own EP group
    if local * ep != E:
        raise MoEDisagreement(f"the router picks among {E} experts, but {local} experts per rank x EP {ep} = "
                              f"{local * ep} ({where})")
    ev["experts"] = (f"the router's output width ({h} -> {E}), {local} expert{'s' * (local != 1)}"
                     f"{chr(39) + 's' if local == 1 else chr(39)} GEMMs per rank x EP {ep}")
    ks = {}
    for key, rows in permuted_rows.items():
        if rows and rows % T == 0:
            ks.setdefault(rows // T, f"the permutation's row copy ({permute_op} of T x k rows)")
    for key, calls in a2a.items():
        big = [n for _, _, n in calls if n and n >= T]
        if big and big[0] % T == 0 and key[0] == first[0]:
            ks.setdefault(big[0] // T, "the dispatch all-to-all's T x k rows")
    if len(ks) > 1:
        raise MoEDisagreement(f"the evidence on top-k disagrees: {', '.join(f'{k} ({w})' for k, w in ks.items())} "
                              f"({where})")
    if ks:
        k, ev["top-k"] = next(iter(ks.items()))
        ev["top-k"] += f": {k} x {T} tokens"
    else:
        total = sum(lay.rows) * ep
        k = total // (T * ep) if total % (T * ep) == 0 else 0
        ev["top-k"] = "the rows the experts took over the tokens (no row copy or all-to-all says it)"
    ev["expert FFN"] = (f"each expert's down projection's input ({lay.width}; gate and up "
                        f"{'fused' if lay.fused else 'separate'})")
    if lay.shared_width:
        ev["shared expert"] = f"a last SwiGLU of all {T} tokens, {lay.shared_width} wide"
    per: dict = {}
    bad = []
    received = {key: sum(x.rows) for key, x in layouts.items()}
    for (r, layer, mb), x in sorted(layouts.items()) if not (partial or lay.grouped) else ():
        counts = per.setdefault((layer, mb), [0] * E)
        base = ranks.index(r) * local if ep > 1 else 0
        for e, rows in enumerate(x.rows):
            counts[base + e] = rows
    for (layer, mb), counts in sorted(per.items()):
        if k and sum(counts) != T * ep * k:
            bad.append(f"layer {layer} micro-batch {mb}: {sum(counts)}")
    dis = ""
    if bad:
        dis = (f"the tokens per expert do not add up to tokens x top-k ({T} x {ep} ranks x {k} = {T * ep * k}) in "
               f"{len(bad)} of {len(per)} layer forwards ({bad[0]}): tokens dropped or padded; no counts shown")
        per = {}
    ev["tokens per expert"] = "each expert's GEMM rows, every EP rank's; global index = EP rank x E/EP + launch order"
    if partial or lay.grouped:
        why = (f"the run holds {len(ranks)} of each EP group's {ep} ranks" if partial else
               "grouped GEMMs (one per projection for all the rank's experts) do not say each expert's rows")
        ev["tokens per expert"] = f"not read: {why}; each rank's received tokens are (its experts' GEMM rows)"
    return MoEReading(experts=E, experts_local=local, top_k=k, ep=ep, expert_ffn=lay.width,
                      shared_expert_ffn=lay.shared_width, tokens=T, tokens_per_expert=per, evidence=ev,
                      disagreement=dis, received=received, grouped=lay.grouped)
