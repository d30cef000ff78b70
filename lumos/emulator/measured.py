"""Published measurements the emulator is calibrated and checked against (resources/measurements/).

Each data set becomes a list of `Point`s: the overrides that emulate one measured
configuration and what was measured. Only the shipped data sets are read; held-back
measurements never enter this module.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "resources" / "measurements"
VTRAIN_CSV = ROOT / "vtrain_a100" / "ground_truth_single.csv"
FIG7_CSV = ROOT / "lumos_fig7" / "fig7_measured_calibration.csv"
SC21_T1_CSV = ROOT / "megatron_sc21" / "table1_weak_scaling.csv"
SC21_T2_CSV = ROOT / "megatron_sc21" / "table2_ptdp_vs_zero3.csv"
SC21_T1_SCRIPTS_CSV = ROOT / "megatron_sc21" / "table1_scripts.csv"    # each row's micro-batch and schedule
KORTHIKANTI_CSV = ROOT / "korthikanti_2022" / "table5_iteration_time.csv"
SEQ, VOCAB = 2048, 51200   # both Selene papers: sequence 2048, vocabulary 51,200
PARTS = ("exposed_compute", "overlapped", "exposed_comm", "other")

# The paper's Fig. 1: GPT-3 175B at TP8 PP4 DP8 on H100s, measured breakdown in ms.
FIG1 = {"exposed_compute": 4287.0, "overlapped": 885.0, "exposed_comm": 2261.0, "other": 178.0, "total": 7611.0}


class MeasurementError(ValueError):
    """A measurement file the loader cannot read (names the file and the row)."""


@dataclass(frozen=True)
class Point:
    dataset: str
    label: str
    overrides: tuple
    total_ms: float
    parts_ms: dict = field(default_factory=dict)   # the breakdown, where it was measured
    strata: tuple = ()                             # what a stratified sample balances
    model: str = ""                                # the model it trains: layouts are ranked per model
    vp: int = 1                                    # model chunks per pipeline stage (interleaved 1F1B when > 1)

    @property
    def schedule(self) -> str:
        return "1F1B" if self.vp == 1 else f"interleaved 1F1B, V={self.vp}"


VTRAIN_COLS = ("# GPUs", "global batch", "micro batch", "hidden size", "attention heads", "# layers",
               "sequence length", "tensor parallelism", "data parallelism", "pipeline parallelism",
               "iteration time (ms)")


def vtrain_overrides(gbs: int, mbs: int, hidden: int, heads: int, layers: int, seq: int,
                     tp: int, dp: int, pp: int) -> tuple:
    """One vTrain configuration as `lumos emulate` overrides (A100 profile, vTrain's training setup)."""
    return ("cluster=a100_vtrain", "training=vtrain", "model=gpt3_15b", "model.name=vtrain",
            f"model.num_layers={layers}", f"model.hidden={hidden}", f"model.ffn_hidden={4 * hidden}",
            f"model.num_heads={heads}", f"model.head_dim={hidden // heads}", f"model.seq_length={seq}",
            f"model.micro_batch_size={mbs}", f"model.global_batch_size={gbs}",
            f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}")


def vtrain_points(path: Path = VTRAIN_CSV) -> list[Point]:
    with open(path, newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.reader(fh))
    head = tuple(h.strip() for h in rows[0])
    if head != VTRAIN_COLS:
        raise MeasurementError(f"{path}: header {head} is not vTrain's {VTRAIN_COLS}")
    out = []
    for i, r in enumerate(rows[1:], start=2):
        try:
            g, gbs, mbs, h, a, L, s, tp, dp, pp = (int(x) for x in r[:10])
            ms = float(r[10])
        except (ValueError, IndexError):
            raise MeasurementError(f"{path}: line {i} is not 10 integers and a time: {r}") from None
        if g != tp * dp * pp or ms <= 0:
            raise MeasurementError(f"{path}: line {i}: {g} GPUs != tp*dp*pp={tp * dp * pp} or time {ms} <= 0")
        out.append(Point("vtrain_single", f"h{h}_L{L}_mbs{mbs}_gbs{gbs}_{tp}x{pp}x{dp}",
                         vtrain_overrides(gbs, mbs, h, a, L, s, tp, dp, pp), ms,
                         strata=(tp, pp, dp, h)))
    return out


def _commented_rows(path: Path, need: tuple) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    missing = [c for c in need if rows and c not in rows[0]]
    if not rows or missing:
        raise MeasurementError(f"{path}: no rows, or columns {missing} missing")
    return rows


def fig7_points(path: Path = FIG7_CSV) -> list[Point]:
    rows = _commented_rows(path, ("config", "tp", "pp", "dp", "total") + PARTS)
    out = []
    for r in rows:
        tp, pp, dp = int(r["tp"]), int(r["pp"]), int(r["dp"])
        out.append(Point("fig7", r["config"], ("model=gpt3_15b", f"parallel.tp={tp}", f"parallel.pp={pp}",
                                                f"parallel.dp={dp}"),
                         float(r["total"]), {k: float(r[k]) for k in PARTS}))
    return out


def fig1_point() -> Point:
    return Point("fig1", "175B 8x4x8", ("model=gpt3_175b", "parallel=paper_175b"), FIG1["total"],
                 {k: FIG1[k] for k in PARTS})


def megatron_flops(batch: int, layers: int, hidden: int, seq: int = SEQ, vocab: int = VOCAB) -> float:
    """FLOPs of one iteration with activation recomputation, Narayanan et al. (SC'21) eq. (3): the count
    their achieved teraFLOP/s are stated in, so iteration time = this / (GPUs x achieved FLOP/s)."""
    return 96.0 * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def selene_overrides(layers: int, hidden: int, heads: int, tp: int, pp: int, dp: int, gbs: int, mbs: int,
                     vp: int = 1) -> tuple:
    """A Selene GPT configuration (Megatron-LM of 2021-22: full recomputation, FFN 4 x hidden); `vp` model
    chunks per pipeline stage (the interleaved schedule) where more than one."""
    return ("cluster=a100_selene", "training=megatron_sc21", "model=gpt3_175b", "model.name=selene_gpt",
            f"model.num_layers={layers}", f"model.hidden={hidden}", f"model.ffn_hidden={4 * hidden}",
            f"model.num_heads={heads}", f"model.head_dim={hidden // heads}", f"model.seq_length={SEQ}",
            f"model.vocab_size={VOCAB}", f"model.micro_batch_size={mbs}", f"model.global_batch_size={gbs}",
            f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}") + ((f"parallel.vp={vp}",) if vp > 1 else ())


def _selene_point(dataset: str, path: Path, line: int, r: dict, mbs: int, total_ms: float, vp: int = 1) -> Point:
    L, h, a = int(r["layers"]), int(r["hidden"]), int(r["heads"])
    tp, pp, gpus, gbs = int(r["tp"]), int(r["pp"]), int(r["gpus"]), int(r["global_batch"])
    dp, rest = divmod(gpus, tp * pp)
    if rest or gbs % (mbs * dp) or total_ms <= 0:
        raise MeasurementError(f"{path}: line {line}: {gpus} GPUs is not a multiple of tp*pp={tp * pp}, or batch "
                               f"{gbs} is not a multiple of micro-batch x DP, or time {total_ms} <= 0")
    label = f"{r['params_b']}B_{tp}x{pp}x{dp}" + (f"_vp{vp}" if vp > 1 else "")
    return Point(dataset, label, selene_overrides(L, h, a, tp, pp, dp, gbs, mbs, vp),
                 total_ms, strata=(r["params_b"],), model=f"{r['params_b']}B", vp=vp)


def sc21_scripts(path: Path = SC21_T1_SCRIPTS_CSV) -> dict:
    """params_b -> (micro-batch, layers per virtual stage or None) of each Table 1 row, from the paper's launch
    script (`table1_scripts.csv` says where)."""
    rows = _commented_rows(path, ("params_b", "micro_batch", "layers_per_virtual_stage"))
    return {r["params_b"]: (int(r["micro_batch"]), int(r["layers_per_virtual_stage"]) if r["layers_per_virtual_stage"]
                            else None) for r in rows}


def sc21_points(table: int = 1) -> list[Point]:
    """Narayanan et al. SC'21 Table 1 (weak scaling) or Table 2 (PTD-P strong scaling): iteration times
    from the printed per-GPU throughput. Table 1's rows run as the paper's launch script ran them (its
    micro-batch size and, where it interleaved, its model chunks per stage: `sc21_scripts`); Table 2's
    at its printed micro-batch 1, non-interleaved."""
    path = SC21_T1_CSV if table == 1 else SC21_T2_CSV
    rows = _commented_rows(path, ("params_b", "layers", "hidden", "heads", "tp", "pp", "gpus", "global_batch",
                                  "tflops_per_gpu"))
    scripts = sc21_scripts() if table == 1 else {}
    out = []
    for i, r in enumerate(rows, start=2):
        flops = megatron_flops(int(r["global_batch"]), int(r["layers"]), int(r["hidden"]))
        ms = 1e3 * flops / (int(r["gpus"]) * float(r["tflops_per_gpu"]) * 1e12)
        mbs, per_virtual = scripts.get(r["params_b"], (int(r.get("micro_batch") or 1), None))
        vp = int(r["layers"]) // (int(r["pp"]) * per_virtual) if per_virtual else 1
        out.append(_selene_point(f"sc21_table{table}", path, i, r, mbs, ms, vp))
    return out


def korthikanti_points(path: Path = KORTHIKANTI_CSV) -> list[Point]:
    """Korthikanti et al. 2022 Table 5, the full-recomputation baseline (no sequence parallelism)."""
    rows = _commented_rows(path, ("params_b", "layers", "hidden", "heads", "tp", "pp", "gpus", "global_batch",
                                  "micro_batch", "full_recompute_s"))
    return [_selene_point("korthikanti_2022", path, i, r, int(r["micro_batch"]), 1e3 * float(r["full_recompute_s"]))
            for i, r in enumerate(rows, start=2)]


def stratified(points: list[Point], n: int, seed: int = 0) -> list[Point]:
    """Up to n points, the same share from every stratum (deterministic for a seed)."""
    import numpy as np

    if n >= len(points):
        return list(points)
    strata: dict = {}
    for p in points:
        strata.setdefault(p.strata, []).append(p)
    rng = np.random.default_rng(seed)
    out = []
    for key in sorted(strata):
        group = strata[key]
        k = max(1, round(n * len(group) / len(points)))
        idx = rng.choice(len(group), size=min(k, len(group)), replace=False)
        out.extend(group[i] for i in sorted(idx))
    return out
