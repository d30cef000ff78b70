"""The four-part breakdown and the duty cycle on timelines with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from lumos.analysis import breakdown, component_l1_us, duty_cycle, relative_error_pct


def test_breakdown_parts():
    # compute [0,10] and [20,30]; comm [5,25]; idle [30,35] then a compute op [35,40]
    start = np.array([0, 20, 5, 35.0])
    end = np.array([10, 30, 25, 40.0])
    gpu = np.ones(4, bool)
    comm = np.array([False, False, True, False])
    b = breakdown(start, end, gpu, comm, gpu)
    assert b.iteration_us == 40
    assert b.overlapped_us == 10      # [5,10] + [20,25]
    assert b.exposed_compute_us == 15  # [0,5] + [25,30] + [35,40]
    assert b.exposed_comm_us == 10     # [10,20]
    assert b.other_us == 5             # [30,35]


def test_span_is_set_by_the_iteration_ops_but_carried_in_work_counts_as_busy():
    start = np.array([0.0, 10.0])
    end = np.array([20.0, 30.0])
    gpu = np.ones(2, bool)
    in_step = np.array([False, True])
    b = breakdown(start, end, gpu, np.zeros(2, bool), in_step)
    assert b.iteration_us == 20 and b.exposed_compute_us == 20 and b.other_us == 0


def test_cpu_only_timeline_is_all_other():
    b = breakdown(np.array([0.0, 5.0]), np.array([3.0, 9.0]), np.zeros(2, bool), np.zeros(2, bool), np.zeros(2, bool))
    assert (b.iteration_us, b.other_us) == (9.0, 9.0)


def test_duty_cycle_per_bin():
    start = np.array([0.0, 1500.0])
    end = np.array([500.0, 2500.0])
    gpu = np.ones(2, bool)
    np.testing.assert_allclose(duty_cycle(start, end, gpu, gpu, bin_us=1000), [0.5, 0.5, 1.0])


def test_errors():
    assert relative_error_pct(103, 100) == pytest.approx(3.0)
    assert relative_error_pct(1, 0) is None
    a = breakdown(np.array([0.0]), np.array([10.0]), np.ones(1, bool), np.zeros(1, bool), np.ones(1, bool))
    b = breakdown(np.array([0.0]), np.array([12.0]), np.ones(1, bool), np.ones(1, bool), np.ones(1, bool))
    assert component_l1_us(b, a) == 22.0  # compute 10 -> 0, comm 0 -> 12
