"""Faster (or slower) hardware: compute kernels X times faster, collective bandwidth Y times.

- Compute (`--compute-speed X`): every GPU task that is not a collective and not a
  host<->device or peer copy (those ride PCIe / NVLink, not the SMs or HBM) keeps the
  compute supplier's fixed part of its class and divides the rest by X.
- Network (`--network-speed Y`): the collective supplier's bandwidth of every level
  (NVLink and the inter-host network alike) is multiplied by Y, latencies kept; each
  collective gets the model's change (the part spent waiting for peers is kept, as in
  every other collective re-timing), and later transforms use the faster model.
"""

from __future__ import annotations

import copy

import numpy as np

from lumos.durations import CollectiveSpec
from lumos.graph.model import TaskKind
from lumos.model.ops import op_class

from .plan import Plan

NOT_COMPUTE = ("Memcpy HtoD", "Memcpy DtoH", "Memcpy PtoP", "Memcpy HtoH")


def compute_kernels(plan: Plan) -> np.ndarray:
    """Per task: a GPU kernel that runs on the SMs (not a collective, not a copy over PCIe / NVLink)."""
    return compute_mask(plan.graph, plan.st)


def compute_mask(g, st) -> np.ndarray:
    """`compute_kernels` of a graph and its structure, before they are a plan."""
    coll = np.array([c is not None for c in st.coll], dtype=bool)
    copy_op = np.array([str(n).startswith(NOT_COMPUTE) for n in g.name], dtype=bool)
    return (g.kind == TaskKind.GPU) & ~g.comm.astype(bool) & ~coll & ~copy_op


def change_speed(plan: Plan, compute: float | None = None, network: float | None = None) -> Plan:
    compute = 1.0 if compute is None else float(compute)
    network = 1.0 if network is None else float(network)
    if compute <= 0 or network <= 0:
        raise ValueError(f"speed factors must be > 0 (compute {compute}, network {network})")
    if compute == 1.0 and network == 1.0:
        return plan
    out = plan.clone()
    g, st = out.graph, out.st
    if compute != 1.0:
        for t in np.flatnonzero(compute_kernels(out)):
            g.dur[t] = out.compute.scale(g.dur[t], op_class(str(st.op_name[t] or "")), 1.0 / compute)
        out.notes.append(f"compute kernels x{compute:g} faster (fixed part per class kept)")
    if network != 1.0:
        old = out.collectives
        new = copy.deepcopy(old)
        new.beta_bytes_per_us = {lv: b * network for lv, b in old.beta_bytes_per_us.items()}
        for t in range(g.n_tasks):
            if st.coll[t] is None or not st.group[t]:
                continue
            spec = CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t])
            g.dur[t] = max(g.dur[t] + new.time_us(spec) - old.time_us(spec), 0.0)
        out.collectives = new
        out.notes.append(f"collective bandwidth x{network:g} on every level (latencies kept)")
    return out
