"""An MoE run's experts, top-k and EP read over every layer forward block (`moe.read_moe` on each block's GEMMs
after the router, its row copy and its all-to-alls); `structure.read_structure` calls it once the layer
shape says the layers are MoE."""

from __future__ import annotations

from lumos.graph.model import Graph, TaskKind
from lumos.trace import TraceTable
from lumos.trace.collectives import classify_name, parse_ranks, pg_config

from .moe import FUSED_PERMUTE_OPS, PERMUTE_OPS, MoEDisagreement, MoEReading, read_moe, split_experts
from .ops import GEMM_OPS, GROUPED_GEMM_OPS, expert_gemms, gemm_mkn, grouped_mkn, is_batched


def _ops_in_order(tasks, op_name, op_dims, is_gpu, op_row) -> list:
    """(op name, input dims) of each op behind `tasks` (in their order), once per op."""
    out, seen = [], set()
    for t in tasks:
        if (is_gpu is not None and not is_gpu[t]) or op_dims[t] is None or op_name[t] is None:
            continue
        key = op_row[t] if op_row is not None else id(op_dims[t])
        if key not in seen:
            seen.add(key)
            out.append((str(op_name[t]), op_dims[t]))
    return out


def _layer_gemms(ops: list) -> tuple[list, int]:
    """A layer forward's GEMMs as (m, k, n), grouped GEMMs' experts one by one (`ops.expert_gemms`), and
    how many of them (the last ones) came from grouped GEMMs."""
    gemms, grouped, from_grouped = [], [], 0
    for n, d in ops:
        if n in GEMM_OPS and not is_batched(d):
            m = gemm_mkn(n, d)
            if m is not None:
                gemms.append(m)
        elif n in GROUPED_GEMM_OPS and grouped_mkn(d) is not None:
            grouped.append(grouped_mkn(d))
            if len(grouped) == 2:
                experts = expert_gemms(*grouped)
                gemms.extend(experts)
                from_grouped = len(experts)
    return gemms, from_grouped


def _all_to_alls(graph: Graph, table: TraceTable, tasks, coll, group, h: int = 0) -> list:
    """(group size, where it came from, input rows) of each all-to-all a layer's block ran, in order:
    its kernels' (device collectives) or, in a run without kernels, its `c10d::` ops'. gloo's ops name no
    group: then the one process group distributedInfo lists (the world)."""
    calls, seen = [], set()
    groups = pg_config(table.metadata)
    for t in sorted(tasks.tolist(), key=lambda t: graph.ts[t]):
        e = int(graph.event[t])
        if graph.kind[t] == TaskKind.GPU:
            if coll[t] != "all_to_all":
                continue
            size = len(group[t]) if group[t] else 0
            rows = int(table.in_nelems[e]) // h if h and table.in_nelems[e] and table.in_nelems[e] > 0 else 0
            calls.append((size, "its Process Group Ranks" if size else "", rows))
            continue
        name = str(table.name[e])
        if not name.startswith("c10d::") or classify_name(name) != "all_to_all" or e in seen:
            continue
        seen.add(e)
        ranks = parse_ranks(table.pg_ranks[e])
        dims = table.input_dims[e] or []
        rows = int(dims[1][0]) if len(dims) > 1 and dims[1] else 0
        if ranks:
            calls.append((len(ranks), "its Process Group Ranks", rows))
        elif len(groups) == 1:
            members = next(iter(groups.values()))
            calls.append((len(members), f"{len(members)} ranks: the one process group distributedInfo lists; "
                                        f"{name} names none", rows))
        else:
            calls.append((int(table.world_size), f"the world ({int(table.world_size)} ranks): "
                                                 f"{name} names no group", rows))
    return calls


def read_moe_blocks(graph: Graph, by_rank: dict, blocks: list, coll, group, shape, is_gpu,
              op_name, op_dims, op_row) -> MoEReading:
    """`moe.read_moe` over every layer forward block of the run: each one's experts from its GEMMs after
    the router (`shape.moe_at`), its row copy and its all-to-alls."""
    layouts, permuted, a2a, fused = {}, {}, {}, False
    for b in blocks:
        if b.kind != "layer" or b.phase != "forward":
            continue
        ops = _ops_in_order(b.tasks, op_name, op_dims, is_gpu, op_row)
        gemms, grouped = _layer_gemms(ops)
        T = int(gemms[0][0]) if gemms else 0
        lay = split_experts(gemms[shape.moe_at:], shape.hidden, T, grouped=grouped)
        key = (b.rank, b.layer, b.mb)
        if lay is None:
            first = next(x.layer for x in blocks if x.kind == "layer")
            raise MoEDisagreement(f"layer {b.layer} forward, micro-batch {b.mb} of {by_rank[b.rank].path} has no "
                                  f"router and experts where layer {first} has them")
        layouts[key] = lay
        permuted[key] = next((_permuted_rows(n, d, T, shape.hidden) for n, d in ops
                              if _permuted_rows(n, d, T, shape.hidden)), 0)
        fused = fused or any(n in FUSED_PERMUTE_OPS for n, _ in ops)
        a2a[key] = _all_to_alls(graph, by_rank[b.rank], b.tasks, coll, group, shape.hidden)
    how = "a fused permute's output" if fused else "index_select"
    where = ", ".join(sorted({str(t.path) for t in by_rank.values()})[:1])
    return read_moe(layouts, permuted, a2a, permute_op=how, where=where)


def _permuted_rows(name: str, dims, tokens: int, h: int) -> int:
    """Rows of the permutation by the router's picks (T x k), or 0: an `index_select` of the T x h activations
    by T x k indices, or a fused permute's output (Transformer Engine's moe_permute, [T x k, h])."""
    if name in PERMUTE_OPS and len(dims) > 2 and dims[2] and tuple(dims[0]) == (tokens, h):
        return int(dims[2][0])
    if name in FUSED_PERMUTE_OPS and dims and len(dims[0]) == 2 and int(dims[0][1]) == h:
        return int(dims[0][0])
    return 0
