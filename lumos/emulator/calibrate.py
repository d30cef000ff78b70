"""Print the emulator's calibration table (all figures emulated, none measured).

    python -m lumos.emulator.calibrate [overrides...]      (or: lumos emulate --calibrate)

1. GPT-3 175B at TP8 PP4 DP8 against the paper's Fig. 1 breakdown (fitted with Fig. 7 by fit.py).
2. GPT-3 15B at 2x2x4: iteration time and its spread across seeds.
3. Scaling sanity: the nine scale-out configurations (with emulation wall time) and wider models.
"""

from __future__ import annotations

import sys
import tempfile
import time

import numpy as np

from .breakdown import breakdown_recorder
from .emulate import emulate, write_result
from .measured import FIG1 as PAPER
from .measured import PARTS
from .program import is_gemm_kernel

SCALE_OUT = ((2, 2, 4), (2, 2, 8), (2, 2, 16), (2, 2, 32), (2, 4, 4), (2, 8, 4), (2, 16, 4),
             (2, 4, 8), (2, 8, 8), (2, 4, 16))


def _comm_ms(rec, stream: int) -> float:
    return sum(e - s for s, e, _c, _n, sid, *_ in rec.gpu if sid == stream) / 1e3


def _gemm_ms(rec) -> float:
    return sum(e - s for s, e, _c, n, *_ in rec.gpu if is_gemm_kernel(n)) / 1e3


def calibrate_175b(extra, out=print) -> bool:
    r = emulate(["model=gpt3_175b", "parallel.tp=8", "parallel.pp=4", "parallel.dp=8", "seed=0"] + extra,
                progress=False)
    s = r.settings
    out(f"## GPT-3 175B, TP8 PP4 DP8 (256 GPUs), micro-batch {s.model.micro_batch_size}, "
        f"{s.model.num_microbatches} micro-batches, global batch {s.model.global_batch_size} "
        f"[emulated, granularity={s.knobs.granularity}, emulation {r.wall_s:.1f} s]")
    b0 = breakdown_recorder(r.recorders[r.ranks[0]])
    all_b = [breakdown_recorder(r.recorders[k]) for k in r.ranks]
    mean = {k: float(np.mean([b[k] for b in all_b])) for k in PARTS + ("total",)}
    out(f"{'part':<16}{'paper ms':>10}{'paper %':>9}{'rank0 ms':>10}{'rank0 %':>9}{'stages ms':>11}{'stages %':>10}")
    ok = abs(b0["total"] / 1e3 - PAPER["total"]) / PAPER["total"] <= 0.10
    for k in PARTS + ("total",):
        pp_ = 100 * PAPER[k] / PAPER["total"]
        r0 = 100 * b0[k] / b0["total"]
        mm = 100 * mean[k] / mean["total"]
        if k != "total":
            ok &= abs(r0 - pp_) <= 5.0
        out(f"{k:<16}{PAPER[k]:>10.0f}{pp_:>8.1f}%{b0[k] / 1e3:>10.0f}{r0:>8.1f}%{mean[k] / 1e3:>11.0f}{mm:>9.1f}%")
    out(f"rank 0 total within 10% and every share within 5 points of the paper: {'yes' if ok else 'NO'}")
    return ok


def calibrate_fig7(extra, out=print) -> bool:
    """The paper's four shipped Fig. 7 configurations (15B, H100): totals within 10%, shares within 5 points."""
    from .measured import fig7_points
    from .realism import emulate_point

    out("## GPT-3 15B, the four shipped Fig. 7 configurations (micro-batches = TP x PP) [emulated vs measured]")
    out(f"{'config':<8}{'measured ms':>12}{'emulated ms':>12}{'err %':>8}  shares measured/emulated (points)")
    ok = True
    for p in fig7_points():
        r = emulate_point(p, tuple(extra))
        err = 100 * (r["emulated_ms"] / r["measured_ms"] - 1)
        ok &= abs(err) <= 10.0
        cells = []
        for k in PARTS:
            m = 100 * r[f"measured_{k}_ms"] / r["measured_ms"]
            e = 100 * r[f"emulated_{k}_ms"] / r["emulated_breakdown_total_ms"]
            ok &= abs(m - e) <= 5.0
            cells.append(f"{k} {m:.1f}/{e:.1f}")
        out(f"{p.label:<8}{r['measured_ms']:>12.0f}{r['emulated_ms']:>12.1f}{err:>+8.1f}  " + ", ".join(cells))
    out(f"every total within 10% and every share within 5 points of the paper: {'yes' if ok else 'NO'}")
    return ok


def seed_spread(extra, out=print, seeds=range(8)) -> None:
    ts = []
    for sd in seeds:
        ts.append(emulate(["model=gpt3_15b", "parallel.tp=2", "parallel.pp=2", "parallel.dp=4", f"seed={sd}"]
                          + extra, progress=False).iteration_us / 1e3)
    ts = np.array(ts)
    out(f"## GPT-3 15B, 2x2x4 (16 GPUs) [emulated], seeds {list(seeds)}")
    out("iteration ms: " + ", ".join(f"{t:.1f}" for t in ts))
    out(f"mean {ts.mean():.1f} ms, std/mean {100 * ts.std() / ts.mean():.2f}%, "
        f"(max-min)/mean {100 * (ts.max() - ts.min()) / ts.mean():.2f}%")


def scaling(extra, out=print) -> None:
    out("## Nine scale-out configurations of GPT-3 15B from the 2x2x4 base [emulated]")
    out(f"{'TPxPPxDP':<10}{'GPUs':>5}{'iter ms':>9}{'DP AR ms':>10}{'PP p2p ms':>10}{'p2p %':>7}{'TP AR ms':>9}"
        f"{'GEMM ms':>9}{'emulate s':>10}{'+write s':>9}")
    for tp, pp, dp in SCALE_OUT:
        t0 = time.perf_counter()
        r = emulate(["model=gpt3_15b", f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}", "seed=0"]
                    + extra, progress=False)
        t1 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            write_result(r, d)
        t2 = time.perf_counter()
        rec = r.recorders[r.ranks[0]]
        p2p = _comm_ms(rec, 28) + _comm_ms(rec, 32)
        out(f"{f'{tp}x{pp}x{dp}':<10}{tp * pp * dp:>5}{r.iteration_us / 1e3:>9.1f}{_comm_ms(rec, 24):>10.1f}"
            f"{p2p:>10.1f}{100 * p2p / (r.iteration_us / 1e3):>6.1f}%{_comm_ms(rec, 20):>9.1f}{_gemm_ms(rec):>9.1f}"
            f"{t1 - t0:>10.2f}{t2 - t0:>9.2f}")
    out("(DP AR / PP p2p / TP AR / GEMM: summed kernel time on rank 0, stage 0; p2p includes waiting for the peer,")
    out(" so its share of the iteration is the pipeline bubble; micro-batches per pipeline = TP x PP, as in the paper)")
    out("## Wider and deeper models at 2x2x4 [emulated]")
    out(f"{'model':<14}{'iter ms':>9}{'GEMM ms':>9}{'mean GEMM us':>13}")
    for model in ("gpt3_15b", "gpt3_15b_v1", "gpt3_15b_v2", "gpt3_15b_v3", "gpt3_15b_v4"):
        r = emulate([f"model={model}", "seed=0"] + extra, progress=False)
        rec = r.recorders[r.ranks[0]]
        g = [e - s for s, e, _c, n, *_ in rec.gpu if is_gemm_kernel(n)]
        out(f"{model:<14}{r.iteration_us / 1e3:>9.1f}{sum(g) / 1e3:>9.1f}{np.mean(g):>13.1f}")


def main(argv=None) -> int:
    extra = list(sys.argv[1:] if argv is None else argv)
    print("# lumos emulator calibration (all figures EMULATED, not measured on hardware)")
    ok = calibrate_175b(extra)
    ok &= calibrate_fig7(extra)
    seed_spread(extra)
    scaling(extra)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
