"""Mixture-of-experts what-ifs: expert parallelism, the number of experts, top-k and the experts' width.

Every MoE layer of the base keeps its tasks; what each does is re-timed for the target, layer by layer and
micro-batch by micro-batch, with the base's own routing unevenness (`lumos.durations.routing`):

- the experts' GEMMs do the target's rows (the traced rank's share of the tokens x T x top-k') and width over
  its experts per rank, by a line fitted on the base's own layers (`lumos.durations.experts`; a loop of
  per-expert GEMMs, without the fit, by rows x width with the fixed part kept), their activation by its bytes;
- the router's GEMMs and top-k scale with the experts (one logit each), the permutations with top-k;
- each token exchange (all-to-all) moves over the target's EP group what its busiest rank sends or
  receives, timed by the base's fitted collective model, plus what the base's exchanges took beyond that
  model (`exchange_offsets`: the peers' drift); the exchange after the experts (the forward's combine, the
  backward's dispatch) also waits for the group's busiest rank to finish its experts: the fitted time per
  row x (busiest share - its own) x T x k';
- the experts' gradient all-reduces move the rank's target experts over the target's expert data-parallel
  group (TP x DP / EP ranks; none at EP = TP x DP); the all-gather of the token counts takes the new group.

`draw`: a random generator to draw each (layer, micro-batch)'s routing (a `--samples` draw); without one,
every layer takes the expected shares. Refused: a base without an all-to-all (EP 1, or the all-gather or
DeepEP dispatchers), a target of EP 1, and a target whose experts' gradients need a group the base never
reduced over.
"""

from __future__ import annotations

import numpy as np

from lumos.durations import CollectiveSpec
from lumos.errors import UserError
from lumos.graph.model import TaskKind
from lumos.model.ops import GEMM_OPS, GROUPED_GEMM_OPS, gemm_mkn

from .plan import Plan, edp_group, ep_group

PERMUTE_OPS = ("aten::_moe_permute", "aten::_moe_unpermute", "aten::index_select")
ROUTER_ELEMENTWISE = ("aten::topk", "aten::_softmax_backward_data")


def moe_target(plan: Plan, ep=None, experts=None, top_k=None, expert_ffn=None, capacity=None, pad=False,
               dp: int | None = None) -> dict:
    """The target's (experts, top_k, ep, expert_ffn, capacity, pad), the base's where not asked; checked against
    the target's DP (`dp`, default the base's). The base is taken as dropless (its experts' rows say what they
    got, not what was dropped)."""
    moe = plan.st.moe
    asked = {k: v for k, v in (("--ep", ep), ("--experts", experts), ("--top-k", top_k),
                               ("--expert-ffn", expert_ffn), ("--capacity-factor", capacity),
                               ("--pad-to-capacity", pad or None)) if v is not None}
    if moe is None:
        if asked:
            raise UserError(f"{', '.join(asked)}: the base has no mixture-of-experts layers (`lumos replay "
                            "--structure` says what it read)")
        return {}
    t = {"experts": experts or moe.experts, "top_k": top_k or moe.top_k, "ep": ep or plan.ep,
         "expert_ffn": expert_ffn or moe.expert_ffn, "capacity": float(capacity or 0.0), "pad": bool(pad)}
    if t["capacity"] < 0 or (pad and not t["capacity"]):
        raise UserError("--capacity-factor must be > 0 (0: dropless), and --pad-to-capacity needs one")
    per = plan.tp * (dp or plan.dp // plan.cp)
    if t["experts"] % t["ep"] or per % t["ep"]:
        raise UserError(f"EP {t['ep']} must divide the experts ({t['experts']}) and TP x DP ({per}): the expert-"
                        "parallel ranks are a stage's TP x DP ranks (expert TP 1)")
    if not 1 <= t["top_k"] <= t["experts"]:
        raise UserError(f"--top-k {t['top_k']}: each token picks between 1 and {t['experts']} experts")
    return t


def change_moe(plan: Plan, target: dict, draw: np.random.Generator | None = None) -> Plan:
    moe = plan.st.moe
    if moe is None or not target:
        return plan
    same = (target["experts"], target["top_k"], target["ep"], target["expert_ffn"], target["capacity"]) == (
        moe.experts, moe.top_k, plan.ep, moe.expert_ffn, 0.0)
    if same and draw is None:
        return plan
    _refuse(plan, target)
    out = plan.clone()
    fit = plan.routing
    E, k, f, ep = target["experts"], target["top_k"], target["expert_ffn"], target["ep"]
    cf, pad = target.get("capacity", 0.0), target.get("pad", False)
    expected = fit.expected(E, ep, capacity=cf, pad=pad)
    dp = plan.dp // plan.cp
    received = {(layer, mb): rows for (_, layer, mb), rows in moe.received.items()}   # a layer is on one stage
    drawn: dict = {}
    for i, parts in plan.moe_parts.items():   # the base's blocks, in the same order in every target
        b = out.st.blocks[i]
        base_own = received.get((b.layer, b.mb), 0) / (moe.tokens * moe.top_k)
        if draw is None:
            shares = expected
        else:   # one draw per layer and micro-batch: its backward routes as its forward did
            shares = drawn.setdefault((b.layer, b.mb), tuple(float(x[0]) for x in fit.draw(draw, E, ep, 1, cf, pad)))
        _retime_layer(out, b, parts, moe, base_own, shares, E, k, f, ep, dp)
    _retime_expert_grads(out, moe, E, f, ep, dp)
    out.ep = ep
    out.moe_experts, out.moe_top_k, out.moe_expert_ffn = E, k, f   # (the shape keeps the base's: a new FFN
    # there would read as a width change, which rebuilds the layers)
    drops = f", capacity factor {cf:g}{' padded' if pad else ''}" if cf else ""
    out.notes.append(f"MoE: {moe.experts} -> {E} experts, top-{moe.top_k} -> top-{k}, EP {plan.ep} -> {ep}, expert "
                     f"FFN {moe.expert_ffn} -> {f}{drops}; routing from the base's spread (Dirichlet alpha "
                     f"{fit.as_dict()['alpha']}, {fit.samples} layer forwards): the traced rank's share "
                     f"{expected[0]:.3f}, its group's busiest {expected[1]:.3f} on average (lumos/transform/moe.py)")
    return out


def moe_now(plan: Plan) -> tuple[int, int, int]:
    """(experts, top-k, expert FFN) of an MoE plan: the target's where `change_moe` set them, else the base's."""
    m = plan.st.moe
    return plan.moe_experts or m.experts, plan.moe_top_k or m.top_k, plan.moe_expert_ffn or m.expert_ffn


def _refuse(plan: Plan, target: dict) -> None:
    moe, st = plan.st.moe, plan.st
    if plan.ep <= 1 or not np.any((plan.role == "ep") & (st.coll == "all_to_all")):
        raise UserError("the base's MoE layers exchange no tokens by all-to-all (EP 1, or the all-gather or DeepEP "
                        "dispatchers): its routing and exchange cannot be re-timed from it")
    if not moe.received:
        raise UserError("the base's MoE layers do not say how many tokens their experts received")
    if target["ep"] == 1:
        raise UserError("EP 1 puts every expert on every rank: no token exchange is left, and the experts' gradients "
                        "would join the dense buckets; not predicted (any EP above 1 is)")
    per = plan.tp * (plan.dp // plan.cp)
    if per // target["ep"] > 1 and not np.any(plan.role == "edp"):
        raise UserError(f"EP {target['ep']} reduces the experts' gradients over {per // target['ep']} ranks, but the "
                        f"base (EP {plan.ep} = TP x DP) reduced them over none: no collective of the base to time "
                        "that from")


def layer_parts(plan: Plan, b) -> tuple | None:
    """(its two token exchanges, the experts' GEMM tasks between them, the other compute between them) of a
    layer block, each in launch order; None where the block does not exchange tokens twice."""
    g, st = plan.graph, plan.st
    tasks = b.tasks[g.kind[b.tasks] == TaskKind.GPU]
    tasks = tasks[np.argsort(g.ts[tasks], kind="stable")].tolist()
    exch = [t for t in tasks if plan.role[t] == "ep" and st.coll[t] == "all_to_all"]
    if len(exch) != 2:
        return None
    lo, hi = g.end[exch[0]] - 1e-3, g.ts[exch[1]] + 1e-3   # (end = ts + dur: rounding either way)
    span = [t for t in tasks if not g.comm[t] and plan.role[t] is None and lo <= g.ts[t] < hi
            and not str(st.op_name[t]).startswith(PERMUTE_OPS)]
    gemms = [t for t in span if str(st.op_name[t]) in GEMM_OPS or str(st.op_name[t]) in GROUPED_GEMM_OPS]
    return exch, gemms, [t for t in span if t not in set(gemms)]


def moe_layer_parts(plan: Plan) -> dict:
    """Block index -> `layer_parts` of every MoE layer block of a base, read once (a target keeps the base's
    blocks, in their order, and their tasks)."""
    out = {}
    for i, b in enumerate(plan.st.blocks):
        parts = layer_parts(plan, b) if b.kind == "layer" else None
        if parts is not None:
            out[i] = parts
    return out


def exchange_us(plan: Plan, group: tuple, shares: tuple, T: int, k: int, h: int, per_row: float,
                after_experts: bool) -> tuple[float, float]:
    """(transfer, wait) of one token exchange as this module models it: the busiest rank's tokens (sent or
    received) over the fitted collective model and, after the experts, the wait for the busiest rank's experts
    (`per_row` us per row x the rows it had beyond the traced rank's)."""
    own, busiest, sent = shares
    transfer = plan.collectives.time_us(CollectiveSpec("all_to_all", max(sent, busiest) * T * k * h * 2.0, group))
    return transfer, per_row * max(busiest - own, 0.0) * T * k if after_experts else 0.0


def exchange_offsets(plan: Plan) -> dict:
    """(backward, which exchange of the pass) -> what the base's exchanges took beyond this module's model of
    them, on average over its layers: the transfer of the busiest rank's tokens and, after the experts, the
    wait for its experts (at the base's expected shares), the rest being the peers' own drift, kept as
    measured for any target."""
    moe, fit, cost = plan.st.moe, plan.routing, plan.expert_cost
    if moe is None or fit is None or cost is None or plan.ep <= 1:
        return {}
    shares = fit.expected(moe.experts, plan.ep)
    T, k, h = moe.tokens, moe.top_k, plan.shape.hidden
    dp = plan.dp // plan.cp
    left: dict = {}
    for b, parts in ((plan.st.blocks[i], p) for i, p in plan.moe_parts.items()):
        backward = b.phase == "backward"
        for i, t in enumerate(parts[0]):
            group = ep_group(int(plan.graph.rank[t]), plan.tp, dp, plan.ep)
            transfer, wait = exchange_us(plan, group, shares, T, k, h, cost.per_row_us(backward), i == 1)
            left.setdefault((backward, i), []).append(float(plan.graph.dur[t]) - (transfer + wait))
    return {key: float(np.mean(v)) for key, v in left.items()}


def expert_samples(plan: Plan) -> list:
    """(backward, rows, [each expert GEMM's duration]) of every MoE layer pass of the base, for
    `durations.experts.fit_expert_cost`: the rows its experts got (the layer forward's), the GEMMs between
    its two exchanges."""
    moe, out = plan.st.moe, []
    for b, parts in ((plan.st.blocks[i], p) for i, p in plan.moe_parts.items()):
        rows = moe.received.get((b.rank, b.layer, b.mb))
        if rows is None or not parts[1]:
            continue
        out.append((b.phase == "backward", float(rows), [float(plan.graph.dur[t]) for t in parts[1]]))
    return out


def _retime_layer(plan: Plan, b, parts, moe, base_own, shares, E, k, f, ep, dp) -> None:
    own = shares[0]
    g, st, comp = plan.graph, plan.st, plan.compute
    T, h = moe.tokens, plan.shape.hidden
    exch, gemms, others = parts
    backward = b.phase == "backward"
    rows, base_rows = own * T * k, base_own * T * moe.top_k
    width = f / moe.expert_ffn
    cost = plan.expert_cost
    fitted = cost is not None and moe.grouped and len(gemms) == (len(cost.slopes) - cost.forward if backward
                                                                  else cost.forward)
    if fitted:
        for t, new in zip(gemms, cost.times_us(backward, rows, E // ep, width)):
            g.dur[t] = new
        per_row = cost.per_row_us(backward, width)
    else:   # GEMMs by their rows x width (the fixed part kept): a loop of per-expert GEMMs, or no fit
        ratio = rows * f / max(base_rows * moe.expert_ffn, 1e-9)
        old = sum(float(g.dur[t]) for t in gemms)
        for t in gemms:
            g.dur[t] = comp.scale(g.dur[t], "gemm", ratio)
        per_row = sum(float(g.dur[t]) for t in gemms) / max(rows, 1e-9) if old else 0.0
    act = rows * f / max(base_rows * moe.expert_ffn, 1e-9)
    for t in others:   # the experts' activation (and any element-wise work between the exchanges)
        g.dur[t] = comp.scale(g.dur[t], "elementwise", act)
    for t in b.tasks.tolist():
        if g.kind[t] != TaskKind.GPU:
            continue
        op, dims = str(st.op_name[t]), st.op_dims[t]
        if plan.role[t] == "ep" and st.coll[t] != "all_to_all":   # the token counts' all-gather: a count per
            old = CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t])   # expert and rank, over the new group
            group = ep_group(int(g.rank[t]), plan.tp, dp, ep)
            new = CollectiveSpec(st.coll[t], st.nbytes[t] * (E * ep) / (moe.experts * len(old.group)), group)
            g.dur[t] = plan.collectives.retime(g.dur[t], old, new)
            st.group[t], st.nbytes[t] = group, new.nbytes
        elif g.comm[t] or plan.role[t] is not None:
            continue
        elif op.startswith(PERMUTE_OPS):
            g.dur[t] = comp.scale(g.dur[t], "elementwise", k / moe.top_k)
        elif op in ROUTER_ELEMENTWISE:
            g.dur[t] = comp.scale(g.dur[t], "elementwise", E / moe.experts)
        elif op in GEMM_OPS and _is_router(gemm_mkn(op, dims), T, h, moe.experts):
            g.dur[t] = comp.scale(g.dur[t], "gemm", E / moe.experts)
    for i, t in enumerate(exch):   # the second exchange follows the experts: it also waits for the busiest's
        group = ep_group(int(g.rank[t]), plan.tp, dp, ep)
        transfer, wait = exchange_us(plan, group, shares, T, k, h, per_row, i == 1)
        st.group[t], st.nbytes[t] = group, max(shares[2], shares[1]) * T * k * h * 2.0
        g.dur[t] = transfer + plan.exchange_offsets.get((backward, i), 0.0)
        g.dur[t] += wait


def _is_router(mkn, T: int, h: int, E: int) -> bool:
    """A router GEMM: forward T x h -> E, or its backward (dgrad T x E -> h, wgrad E x T -> h)."""
    return mkn is not None and tuple(int(x) for x in mkn) in ((T, h, E), (T, E, h), (E, T, h))


def _retime_expert_grads(plan: Plan, moe, E: int, f: int, ep: int, dp: int) -> None:
    """The experts' gradient all-reduces: the rank's target experts over the target's expert DP group."""
    g, st = plan.graph, plan.st
    ratio = (E / ep * f) / (moe.experts / plan.ep * moe.expert_ffn)
    for t in np.flatnonzero(plan.role == "edp").tolist():
        group = edp_group(int(g.rank[t]), plan.tp, dp, ep)
        old = CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t])
        new = CollectiveSpec(st.coll[t], st.nbytes[t] * ratio, group)
        g.dur[t] = 0.0 if len(group) <= 1 else plan.collectives.retime(g.dur[t], old, new)
        st.group[t], st.nbytes[t] = group, new.nbytes
