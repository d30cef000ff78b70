"""Dims rewritten by role, on the shapes of the H200 base (s == h == 2048, b*s == FFN == 8192)."""

from __future__ import annotations

import pytest

from lumos.transform.shapes import parameter_shapes, rewrite_batch, rewrite_width
from lumos.durations.compute import ComputeSpec, work
from lumos.model.ops import attention_bshd, gemm_mkn

T, H, F, HEADS, HD = 8192, 2048, 8192, 16, 128
WIDTH = {2048: 3072, 6144: 9216, 8192: 12288, 16: 24}      # hidden / FFN / heads x1.5
QKV_FWD = ((6144,), (8192, 2048), (2048, 6144), (), ())     # aten::addmm: bias, x, W^T
FC1_FWD = ((8192,), (8192, 2048), (2048, 8192), (), ())
FC1_WGRAD = ((8192, 8192), (8192, 2048))                     # aten::mm: dY^T [f, T] @ X [T, h]
FC2_DGRAD = ((8192, 2048), (2048, 8192))                     # aten::mm: dY [T, h] @ W [h, f]
CUDNN = ((4, 16, 2048, 128),) * 3 + ((),) * 10                # (b, heads, s, d)


def test_gemm_shapes_of_every_op_form():
    assert gemm_mkn("aten::addmm", QKV_FWD) == (8192, 2048, 6144)
    assert gemm_mkn("aten::mm", FC1_WGRAD) == (8192, 8192, 2048)
    assert gemm_mkn("aten::linear", ((4, 2048, 2048), (6144, 2048), (6144,))) == (8192, 2048, 6144)
    assert gemm_mkn("aten::matmul", ((4, 2048, 2048), (2048, 1024))) == (8192, 2048, 1024)
    assert gemm_mkn("aten::bmm", ((8, 64, 32), (8, 32, 16))) == (512, 32, 16)
    assert gemm_mkn("aten::mm", ((8192,),)) is None


def test_attention_layouts():
    assert attention_bshd("aten::_cudnn_attention_forward", CUDNN) == (4, 2048, 16, 128)
    assert attention_bshd("aten::_flash_attention_forward", ((1, 2048, 8, 128),) * 3) == (1, 2048, 8, 128)
    assert work(ComputeSpec("aten::_cudnn_attention_forward", CUDNN)) == 4.0 * 2048 ** 2 * 16 * 128


@pytest.mark.parametrize("op,dims,ratio", [
    ("aten::addmm", QKV_FWD, 2.25), ("aten::addmm", FC1_FWD, 2.25),
    ("aten::mm", FC1_WGRAD, 2.25), ("aten::mm", FC2_DGRAD, 2.25),
    ("aten::_cudnn_attention_forward", CUDNN, 1.5)])
def test_width_keeps_tokens_and_sequence(op, dims, ratio):
    new = rewrite_width(op, dims, WIDTH, T, HD, HEADS, 24)
    w0, w1 = work(ComputeSpec(op, dims)), work(ComputeSpec(op, new))
    assert w1 / w0 == pytest.approx(ratio)
    if "attention" in op:
        assert attention_bshd(op, new) == (4, 2048, 24, 128)


def test_width_on_element_wise_ops_maps_features_only():
    ln = ((4, 2048, 2048), (), (2048,), (2048,), ())
    assert rewrite_width("aten::native_layer_norm", ln, WIDTH, T, HD, HEADS, 24) == \
        ((4, 2048, 3072), (), (3072,), (3072,), ())
    assert rewrite_width("aten::gelu", ((4, 2048, 8192), ()), WIDTH, T, HD, HEADS, 24) == ((4, 2048, 12288), ())
    # a [b, s, heads, d] copy: the heads change, the head dim and the sequence do not
    assert rewrite_width("aten::copy_", ((4, 2048, 16, 128),), WIDTH, T, HD, HEADS, 24) == ((4, 2048, 24, 128),)


def test_micro_batch_scales_activations_not_parameters():
    params = parameter_shapes(["aten::addmm", "aten::addmm"], [QKV_FWD, FC1_FWD])
    assert (2048, 8192) in params and (8192, 2048) in params
    new = rewrite_batch("aten::addmm", QKV_FWD, 4, T, 2.0, params)
    assert gemm_mkn("aten::addmm", new) == (16384, 2048, 6144)
    # the weight gradient's token count is its inner dimension
    assert work(ComputeSpec("aten::mm", rewrite_batch("aten::mm", FC1_WGRAD, 4, T, 2.0, params))) == \
        2 * work(ComputeSpec("aten::mm", FC1_WGRAD))
    assert rewrite_batch("aten::native_layer_norm", ((4, 2048, 2048), (), (2048,), (2048,), ()), 4, T, 0.5,
                         params) == ((2, 2048, 2048), (), (2048,), (2048,), ())
    # gradient accumulation into an FC1 weight [f, h] (== [T, h] by value) keeps its size
    assert rewrite_batch("aten::add_", ((8192, 2048), (8192, 2048), ()), 4, T, 2.0, params) is None
    assert rewrite_batch("aten::sum", ((8192, 2048), (), (), ()), 4, T, 2.0, params) == \
        ((16384, 2048), (), (), ())
    assert attention_bshd("aten::_cudnn_attention_forward",
                          rewrite_batch("aten::_cudnn_attention_forward", CUDNN, 4, T, 0.5, params)) == \
        (2, 2048, 16, 128)


def test_micro_batch_finds_the_batch_in_megatron_layout():
    # [s, b, h] = [2048, 2, 6144]: the batch is the second dim
    assert rewrite_batch("aten::gelu", ((2048, 2, 6144), ()), 2, 4096, 2.0, frozenset()) == ((2048, 4, 6144), ())
    assert rewrite_batch("aten::gelu", ((2, 2048, 6144), ()), 2, 4096, 2.0, frozenset()) == ((4, 2048, 6144), ())
