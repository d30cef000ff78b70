"""Faster hardware: compute kernels and collective bandwidth scaled (EMULATED tiny base)."""

from __future__ import annotations

import numpy as np
import pytest

from lumos.graph.model import TaskKind
from lumos.transform.speed import change_speed
from lumos.durations import CollectiveSpec
from lumos.model.ops import op_class


def test_compute_speed_divides_kernel_time_above_the_fixed_part(tiny_plan):
    out = change_speed(tiny_plan, compute=2.0)
    g0, g1, st = tiny_plan.graph, out.graph, tiny_plan.st
    comp = (g0.kind == TaskKind.GPU) & ~g0.comm & np.array([c is None for c in st.coll])
    assert comp.sum() > 100
    fixed = np.array([min(tiny_plan.compute.fixed_us.get(op_class(str(st.op_name[t] or "")), 0.0), g0.dur[t])
                      for t in range(g0.n_tasks)])
    copies = np.array([str(n).startswith(("Memcpy HtoD", "Memcpy DtoH")) for n in g0.name])
    k = comp & ~copies
    assert np.allclose(g1.dur[k], fixed[k] + (g0.dur[k] - fixed[k]) / 2.0)
    rest = ~k
    assert np.array_equal(g1.dur[rest], g0.dur[rest])        # CPU, collectives and host copies untouched
    assert "compute kernels x2 faster" in out.notes[-1]


def test_network_speed_scales_bandwidth_and_keeps_waiting(tiny_plan):
    out = change_speed(tiny_plan, network=2.0)
    st, old, new = tiny_plan.st, tiny_plan.collectives, out.collectives
    assert new.beta_bytes_per_us == {lv: 2.0 * b for lv, b in old.beta_bytes_per_us.items()}
    assert new.alpha_us == old.alpha_us
    comm = [t for t in range(len(st.coll)) if st.coll[t] is not None and st.group[t]]
    assert comm
    for t in comm:
        spec = CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t])
        expect = max(tiny_plan.graph.dur[t] + new.time_us(spec) - old.time_us(spec), 0.0)
        assert out.graph.dur[t] == pytest.approx(expect)
        assert out.graph.dur[t] <= tiny_plan.graph.dur[t]
    assert change_speed(tiny_plan) is tiny_plan
    with pytest.raises(ValueError, match="must be > 0"):
        change_speed(tiny_plan, compute=0.0)
