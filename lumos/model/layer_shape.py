"""What one transformer layer's forward ops say about the model: widths, heads, KV heads, MLP, norm, TP.

A layer's GEMMs, in launch order, are its query/key/value projections (one fused GEMM, q and a fused
kv, or three), the attention output projection, and its MLP: FC1 and FC2 (GPT), or gate and up and
down (SwiGLU; gate and up fused into one GEMM of twice the width in Megatron-Core's `linear_fc1`).
Which GEMMs come before the attention op tells the QKV group apart from the rest, so no layout is
assumed: the projection's input is the rank's query width (heads / TP x head dim), the QKV group's
widths beyond it are the keys and values (KV heads / TP x head dim each), the MLP's down projection's
input is the rank's FFN width.

TP is read from the head counts: the projection's input is h / TP where the query heads span the
hidden size (GPT, Llama, Mistral, Qwen); never from the QKV GEMM's width alone, which is 3h / TP only
for fused QKV with as many KV heads as query heads. Where the layer's forward also shows TP
all-reduces, their group size must agree, else the shape is refused with both readings.

An MoE layer has no MLP of its own: after the projection come a router and its experts
(`lumos.model.moe.split_experts`); the FFN width is then each expert's, and the evidence says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from .moe import ExpertLayout, split_experts

__all__ = ["LayerReading", "read_layer", "RMS_NORM_OPS", "ShapeDisagreement"]

RMS_NORM_OPS = ("aten::rms_norm", "aten::_fused_rms_norm", "aten::_fused_rms_norm_backward")
GATED_ACTIVATIONS = ("silu", "swiglu", "swish")


class ShapeDisagreement(ValueError):
    """Two readings of the same width disagree: which, and what each says."""


@dataclass(frozen=True)
class LayerReading:
    tp: int
    heads_local: int
    head_dim: int
    kv_heads_local: int
    ffn_local: int
    gated: bool               # SwiGLU (gate x up), not one FC1
    qkv: str                  # fused | q+kv | separate
    gate_up: str              # fused | separate | '' (not gated)
    evidence: dict            # what each number was read from
    moe: ExpertLayout | None = None   # an MoE layer: its router and experts (`lumos.model.moe`)
    moe_at: int = -1          # the router's index among the layer's GEMMs


def read_layer(gemms: list, attn_at: int | None, attn, h: int, tp_groups: set, activations: set,
               scores=None, batch: int = 0, where: str = "", grouped: int = 0) -> LayerReading | None:
    """The layer's reading from its forward GEMMs ((m, k, n) in order), the number of GEMMs before its
    attention op (`attn_at`, None: no attention op), that op's (b, s, heads, head_dim) (`attn`) or an
    unfused attention's first score product (`scores`), the hidden size, the sizes of the TP groups its
    collectives show, and the element-wise ops' names. None where the GEMMs do not make a layer."""
    if attn_at is None or attn_at < 1 or attn_at >= len(gemms):
        qkv_group, rest = gemms[:1], gemms[1:]       # no attention op between them: GPT's fused QKV
    else:
        qkv_group, rest = gemms[:attn_at], gemms[attn_at:]
    if not rest or len(qkv_group) > 3 or any(int(g[1]) != h for g in qkv_group):
        return None
    proj, mlp = rest[0], rest[1:]
    q_local = int(proj[1])
    if q_local <= 0 or int(proj[2]) != h:
        raise ShapeDisagreement(f"cannot read the model shape: the GEMM after attention in {where} maps "
                                f"{proj[1]} -> {proj[2]}, not to the hidden size {h} an attention projection gives")
    ev = {"query width": f"the attention projection's input ({q_local})"}
    if attn is not None:
        heads_local, ev["heads"] = int(attn[2]), f"the attention op's query ({attn[2]} heads of {attn[3]})"
    elif scores is not None and batch and int(scores[0][0]) % batch == 0:
        heads_local, ev["heads"] = int(scores[0][0]) // batch, "the unfused attention's score products"
    else:
        heads_local, ev["heads"] = None, ""
    if heads_local:
        d = q_local // heads_local
    else:                           # no attention op says the heads: GPT-3's head dim of 128
        d = 128 if q_local % 128 == 0 else q_local
        heads_local = q_local // d
        ev["heads"] = "the query width over a head dim of 128 (no attention op says the heads)"
    widths = [int(g[2]) for g in qkv_group]
    if len(widths) == 1:
        kv_width, qkv = (widths[0] - q_local) / 2, "fused"
    elif len(widths) == 2:
        kv_width, qkv = widths[1] / 2, "q+kv"
    else:
        if widths[1] != widths[2]:
            raise ShapeDisagreement(f"cannot read the model shape: the key and value projections in {where} "
                                    f"differ ({widths[1]} and {widths[2]} wide)")
        kv_width, qkv = widths[1], "separate"
    if (len(widths) > 1 and widths[0] != q_local) or kv_width <= 0 or kv_width % d:
        raise ShapeDisagreement(f"cannot read the model shape: the QKV GEMMs of {where} ({' + '.join(map(str, widths))}"
                                f" wide) do not hold the {q_local}-wide queries the projection takes plus keys and "
                                f"values of {d}-wide heads")
    kv_local = int(kv_width // d)
    ev["KV heads"] = f"the QKV GEMMs' widths ({qkv}: {' + '.join(map(str, widths))}) less the queries"
    dense = _dense_mlp(mlp, activations)
    moe = split_experts(mlp, h, int(gemms[0][0]), grouped) if dense is None else None
    if dense is not None:
        ffn_local, gated, gate_up = dense
        ev["FFN"] = f"the down projection's input ({ffn_local})"
        ev["MLP"] = ("SwiGLU (gate and up " + gate_up + ")") if gated else "one FC1 (GELU)"
        if gated and gate_up == "fused" and not activations & set(GATED_ACTIVATIONS):
            ev["MLP"] += (": no SiLU op in the layer (fused into its GEMMs), read from the GEMMs, FC1 twice as wide "
                          "as the down projection's input")
    elif moe is not None:
        ffn_local, gated, gate_up = moe.width, True, "fused" if moe.fused else "separate"
        ev["FFN"] = f"each expert's down projection's input ({ffn_local})"
        n = len(moe.rows)
        ev["MLP"] = (f"none (an MoE layer): a router ({h} -> {moe.router[2]}) and {n} SwiGLU expert{'s' * (n != 1)} "
                     f"(gate and up {gate_up}){' and a shared expert' if moe.shared_width else ''}")
    else:
        return None
    tp = max(h // q_local, 1) if h % q_local == 0 else 1
    ev["TP"] = f"hidden {h} / the rank's query width {q_local}"
    if tp_groups:
        if tp_groups != {tp}:
            raise ShapeDisagreement(
                f"the evidence on TP disagrees in {where}: the head counts say TP {tp} (hidden {h} over the "
                f"rank's {q_local}-wide queries), its TP collectives' groups hold {'/'.join(map(str, sorted(tp_groups)))} "
                "ranks; a prediction from this base would be built on one of them, so none is made")
        ev["TP"] += f", and the TP all-reduces' group of {tp}"
    return LayerReading(tp=tp, heads_local=heads_local, head_dim=d, kv_heads_local=kv_local, ffn_local=ffn_local,
                        gated=gated, qkv=qkv, gate_up=gate_up, evidence=ev, moe=moe,
                        moe_at=len(qkv_group) + 1 if moe is not None else -1)


def _dense_mlp(mlp: list, activations: set):
    """(FFN width, gated, gate/up layout) of a dense MLP's GEMMs (gate, up, down; fused gate-up and down;
    FC1 and FC2), else None."""
    if len(mlp) == 3:
        gate, up, down = mlp
        if int(gate[2]) != int(up[2]) or int(down[1]) != int(up[2]):
            return None
        return int(down[1]), True, "separate"
    if len(mlp) == 2:
        fc1, down = mlp
        ffn_local = int(down[1])
        # an FC1 twice as wide as the down projection's input is a fused gate and up whatever the trace
        # says of the activation (none where it is fused into the GEMMs: the emulator's coarse granularity)
        gated = int(fc1[2]) == 2 * ffn_local
        if not gated and int(fc1[2]) != ffn_local:
            return None
        return ffn_local, gated, "fused" if gated else ""
    return None
