"""`lumos.lean_numpy` gives np.median's and np.unique's values without importing numpy.ma (the replay's start-up)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lumos.lean_numpy import median, median_by_key, unique
from lumos.trace import schema

values = st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=1, max_size=40)


def test_median_small_cases():
    assert median([3.0]) == 3.0
    assert median([4.0, 1.0]) == 2.5
    assert median([5, 1, 3]) == 3.0
    assert np.isnan(median([1.0, float("nan"), 2.0]))
    with pytest.raises(ValueError, match="no values"):
        median([])


@given(st.lists(st.integers(-5, 5), max_size=30))
def test_unique_is_numpys(xs):
    assert np.array_equal(unique(np.array(xs, dtype=np.int64)), np.unique(np.array(xs, dtype=np.int64)))


@given(values)
def test_median_is_numpys(xs):
    assert median(xs) == float(np.median(xs))


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "cudaLaunchKernel"]), st.floats(0, 1e6)),
                min_size=1, max_size=60))
def test_median_by_key_is_numpys_per_key(pairs):
    keys = np.array([k for k, _ in pairs])
    vals = np.array([v for _, v in pairs])
    got = median_by_key(keys, vals)
    want = np.array([np.median(vals[keys == k]) for k in keys])
    assert np.array_equal(got, want)


def test_median_by_key_nan_spoils_only_its_key():
    got = median_by_key(np.array(["a", "b", "a", "b"]), np.array([1.0, 2.0, np.nan, 6.0]))
    assert np.isnan(got[0]) and np.isnan(got[2])
    assert got[1] == got[3] == 4.0


REAL = Path(__file__).resolve().parent.parent / "resources" / "traces" / "real" / "hta"
CHECK = """
import sys
from lumos.cli import main
main(["replay", sys.argv[1]])
print("numpy.ma" in sys.modules)
"""


@pytest.mark.parametrize("trace", ["nccl_parser_config__nccl_data.json.gz",   # runtime calls' medians
                                   "more/amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"])  # steps' median
def test_replay_does_not_import_numpy_ma(trace):
    """np.median's first call imports numpy.ma (~10 ms of a 0.3 s replay); the replay path calls ours."""
    out = subprocess.run([sys.executable, "-c", CHECK, str(REAL / trace)], capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines()[-1] == "False"


def test_comm_kernel_names():
    """The pattern split into a prefix matched and words searched for keeps what it recognises."""
    yes = ["ncclDevKernel_Generic", "void ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
           "ncclKernel_SendRecv", "mscclKernel_Sum_half_Simple", "c10d::allreduce_", "nccl::all_gather",
           "cross_device_reduce_1stage<__nv_bfloat16, 8>", "void vllm::one_shot_all_reduce<float>",
           "multimem_all_reduce_kernel", "userbuffers_fp16_sum_inplace_gpu_rw", "rccl_AllGather",
           "void at::native::reduce_scatter_kernel"]
    no = ["void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>",
          "ampere_sgemm_128x64_tn", "void at::native::vectorized_elementwise_kernel<4, ...>",
          "Memcpy DtoD (Device -> Device)", "void cross_device_copy"]
    assert [n for n in yes if not schema.is_comm_kernel(n)] == []
    assert [n for n in no if schema.is_comm_kernel(n)] == []
