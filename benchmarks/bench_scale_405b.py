"""Scale: Llama 3 405B on 16,384 GPUs (TP 8, PP 16, DP 128), emulated and predicted, whole processes.

Three timings, each a fresh process as a user would run it (perf_counter around the subprocess):
- `lumos emulate model=llama3_405b` at TP 8 x PP 16 x DP 128 with stand-in peers (one emulated rank per
  stage, `ranks: stage`), Llama 3's pipeline layout: interleaved 1F1B with 8 chunks per stage, the embedding
  and the output and loss counted as a layer each in the split (126 + 2 = 16 x 8: the first chunk of stage 0
  holds only the embedding, the last of stage 15 only the output and loss; parallel.embedding_in_split /
  loss_in_split). Each TP rank sends 1/8 of a stage's activations (`emulator.schedule.p2p_scatter_gather`),
  as with the sequence parallelism a TP 8 run of this size uses. The target is under 5 minutes on 2 cores.
- `lumos predict` from a 405B base emulated at TP 8 x PP 16 x DP 8 (1,024 GPUs, same layout) to DP 128,
  scored against the 16,384-GPU emulation. The target is under 10 s.
- `lumos search` from that base over every layout of 16,384 GPUs at the same global batch. The target is
  under 5 minutes. Memory is judged with the distributed optimizer, sequence parallelism and full
  recomputation (`--recompute full`): without recomputation stage 0 holds all 16 micro-batches' activations
  (86.6 GiB on the last stage, over an H100's 80) and nothing fits, so nothing would be replayed and timed.

Global batch 2,048 sequences of 8,192 tokens (16M tokens: Llama Team, "The Llama 3 Herd of Models", 2024,
Sec. 3.4.1, the batch of the later pre-training), micro-batch 1: 16 micro-batches per pipeline at DP 128.
Everything printed is EMULATED, and timed on this machine. The throughput line is model FLOPs per GPU per
second, 6 N + 12 L h s FLOPs per token (PaLM's model-FLOPs utilisation, Chowdhery et al. 2022, App. B),
N = 405e9.

    python benchmarks/bench_scale_405b.py [--out DIR] [--skip-search] [--csv benchmarks/scale_405b.csv]

`--csv` writes the rows the README's scale claim reads (`lumos/report/headline.py`, `scale`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAYOUT = ["model=llama3_405b", "parallel.tp=8", "parallel.pp=16", "parallel.vp=8", "parallel.embedding_in_split=true",
          "parallel.loss_in_split=true", "model.microbatch_rule=fixed", "emulator.schedule.p2p_scatter_gather=true",
          "seed=0"]
PARAMS, LAYERS, HIDDEN, SEQ, GLOBAL_BATCH = 405e9, 126, 16384, 8192, 2048


def timed(argv: list[str], capture: bool = False) -> tuple[float, str]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "lumos.cli", *argv], check=True, text=True,
                         stdout=subprocess.PIPE if capture else subprocess.DEVNULL)
    return time.perf_counter() - t0, res.stdout or ""


def emulate(out: Path, dp: int) -> tuple[float, dict]:
    wall, _ = timed(["emulate", *LAYOUT, f"parallel.dp={dp}", f"model.global_batch_size={16 * dp}", f"out={out}",
                     "--quiet"])
    return wall, json.loads((out / "manifest.json").read_text())


def tflops_per_gpu(iteration_s: float, gpus: int, batch: int) -> float:
    per_token = 6 * PARAMS + 12 * LAYERS * HIDDEN * SEQ
    return per_token * batch * SEQ / iteration_s / gpus / 1e12


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="where the emulated runs go (default: a temporary directory)")
    ap.add_argument("--skip-search", action="store_true")
    ap.add_argument("--csv", default=None, help="also write the rows here (what, wall_s, target_s, result, cpus)")
    a = ap.parse_args(argv)
    root = Path(a.out or tempfile.mkdtemp(prefix="lumos-405b-"))
    big, base = root / "405b_8x16x128v8", root / "405b_8x16x8v8"
    rows = []
    wall, m = emulate(big, 128)
    it = m["iteration_us"] / 1e6
    rows.append(("lumos emulate, 16,384 GPUs (16 stage ranks, stand-in peers)", wall, 300.0,
                 f"iteration {it:.2f} s, {m['num_microbatches']} micro-batches, "
                 f"{tflops_per_gpu(it, 16384, GLOBAL_BATCH):.0f} TFLOP/s per GPU"))
    wall, mb = emulate(base, 8)
    rows.append(("lumos emulate, base 1,024 GPUs", wall, None, f"iteration {mb['iteration_us'] / 1e6:.2f} s"))
    wall, text = timed(["predict", str(base), "--dp", "128", "--actual", str(big), "--format", "json"], capture=True)
    doc = json.loads(text)
    rows.append(("lumos predict 1,024 -> 16,384 GPUs (DP 8 -> 128)", wall, 10.0,
                 f"predicted {doc['predicted']['iteration_us'] / 1e6:.2f} s against emulated "
                 f"{doc['measured']['iteration_us'] / 1e6:.2f} s, error {doc['error_pct']:+.2f}%"))
    if not a.skip_search:
        wall, text = timed(["search", str(base), "--gpus", "16384", "--global-batch", str(GLOBAL_BATCH), "--vp", "1,8",
                            "--distributed-optimizer", "--sequence-parallel", "--recompute", "full", "--format", "json"],
                           capture=True)
        found = json.loads(text)
        fit = [r for r in found if r["fits"]]
        best = (f"; fastest {fit[0]['tp']}x{fit[0]['pp']}x{fit[0]['dp']} V{fit[0]['vp']} "
                f"{fit[0]['iteration_us'] / 1e6:.2f} s") if fit else ""
        rows.append(("lumos search, 16,384-GPU layouts", wall, 300.0,
                     f"{len(found)} layouts, {len(fit)} fit in memory{best}"))
    print("# Llama 3 405B at scale (EMULATED; timed on this machine, whole processes)")
    print("| what | wall s | target s | result |")
    print("|---|---|---|---|")
    for what, wall, target, result in rows:
        print(f"| {what} | {wall:.1f} | {'-' if target is None else f'{target:g}'} | {result} |")
    print(f"# runs in {root}")
    if a.csv:
        import csv
        import io
        import os

        from lumos.trace.atomic import write_text_atomic

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["what", "wall_s", "target_s", "result", "cpus"])
        for what, wall, target, result in rows:
            w.writerow([what, f"{wall:.2f}", "" if target is None else target, result, os.cpu_count()])
        write_text_atomic(a.csv, buf.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
