"""What-if on real CPU captures without our ranges: predicted vs measured deeper models and micro-batch counts.

    python studies/cpu_captures/whatif_check.py              # needs torch (+ transformers for gpt2); ~6 min
    python studies/cpu_captures/whatif_check.py --repeats 2 --models gpt   # a quick look

Measured on this machine. Three models, none annotated: the bundled GPT (`lumos capture gpt
--no-annotate`, so only `ProfilerStep#N` ranges), Hugging Face `transformers` GPT-2 (a small
config, random weights, nothing downloaded) and the bundled Llama-style model (`lumos capture llama
--no-annotate`: grouped-query attention, SwiGLU, RMSNorm, RoPE). Per repeat, four runs are captured in turn, each in
its own process: the base (2 layers, 1 micro-batch per iteration), 4 and 6 layers, and 2
micro-batches (gradients accumulated). From each base capture `lumos predict` forecasts the other
three, its layers found by repetition (`lumos.model.recover`); the prediction is compared with
the captures of those runs.

An iteration is the span of one profiled step's CPU tasks (a CPU trace has no GPU span). A
capture's figure is the median over its profiled steps, the prediction's the median over the
base's steps used as the base. The table gives the median over repeats of both, the error of the
median prediction, and the run-to-run spread (max - min over repeats, % of the median) of the
measured runs and of the predictions beside it: an error inside the spread is not told apart from
noise. Repeats interleave the four configurations, so drift on the machine hits all of them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HIDDEN, HEADS, SEQ, MBS, VOCAB = 256, 4, 128, 4, 1024
BASE = (2, 1)                                  # layers, micro-batches per iteration
TARGETS = {"layers 4": (4, 1), "layers 6": (6, 1), "micro-batches 2": (2, 2)}


def capture_gpt(layers: int, microbatches: int, out: Path, steps: int) -> None:
    from lumos.capture.gpt import GPTConfig, run_gpt

    cfg = GPTConfig(layers=layers, hidden=HIDDEN, ffn=4 * HIDDEN, heads=HEADS, seq=SEQ, micro_batch=MBS,
                    vocab=VOCAB)
    run_gpt(cfg, out_dir=out, steps=steps, device="cpu", microbatches=microbatches, log=None, annotate=False)


def capture_gpt2(layers: int, microbatches: int, out: Path, steps: int) -> None:
    import torch
    import transformers

    from lumos.capture.profile import profile_steps

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=HIDDEN, n_layer=layers, n_head=HEADS,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    model.train()
    gen = torch.Generator().manual_seed(0)
    data = [torch.randint(VOCAB, (MBS, SEQ), generator=gen) for _ in range(microbatches)]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        for x in data:
            (model(input_ids=x, labels=x).loss / microbatches).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    profile_steps(step, steps=steps, warmup=1, out_dir=out, annotate=False)


def capture_llama(layers: int, microbatches: int, out: Path, steps: int) -> None:
    """The bundled Llama-style model (`lumos capture llama`): 2 KV heads for the 4 query heads, SwiGLU of
    8/3 x hidden, RMSNorm, RoPE, separate projections; no range of ours."""
    from lumos.capture.llama import LlamaConfig, run_llama

    cfg = LlamaConfig(layers=layers, hidden=HIDDEN, ffn=8 * HIDDEN // 3, heads=HEADS, kv_heads=2, seq=SEQ,
                      micro_batch=MBS, vocab=VOCAB)
    run_llama(cfg, out_dir=out, steps=steps, microbatches=microbatches, annotate=False)


CAPTURE = {"gpt": capture_gpt, "gpt2": capture_gpt2, "llama": capture_llama}


def iteration_ms(tables, step) -> float:
    from lumos.predict.prediction import measure_run

    return measure_run(tables, step=step)["iteration_us"] / 1e3


def measured(path: Path) -> float:
    """Median CPU span of the capture's profiled steps, ms."""
    from lumos.trace import find_steps, load_run

    tables = load_run(path)
    return statistics.median(iteration_ms(tables, s.number) for s in find_steps(tables[0]))


def predicted(base: Path) -> dict:
    """Median over the base's steps of each target's predicted iteration, ms; and how layers were found."""
    from lumos.predict.options import PredictOptions
    from lumos.predict.prediction import predict
    from lumos.trace import find_steps, load_run

    tables = load_run(base)
    out, source = {}, None
    steps = [s.number for s in find_steps(tables[0])]
    for name, (layers, m) in TARGETS.items():
        vals = []
        for s in steps:
            kw = {"global_batch": m * MBS, "micro_batch": MBS} if m != BASE[1] else {}
            doc = predict(tables, {"layers": layers}, PredictOptions(step=s, **kw))
            vals.append(doc["predicted"]["iteration_us"] / 1e3)
            source = doc["structure"]["source"]
        out[name] = statistics.median(vals)
    out["base (no change)"] = statistics.median(
        predict(tables, {}, PredictOptions(step=s))["predicted"]["iteration_us"] / 1e3 for s in steps)
    return {"predicted": out, "source": source}


def spread_pct(vals) -> float:
    return 100.0 * (max(vals) - min(vals)) / statistics.median(vals)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="profiled steps per capture")
    ap.add_argument("--models", default="gpt,gpt2", help="comma list of gpt, gpt2, llama")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here (atomically)")
    ap.add_argument("--one", nargs=4, metavar=("MODEL", "LAYERS", "MICROBATCHES", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        CAPTURE[a.one[0]](int(a.one[1]), int(a.one[2]), Path(a.one[3]), a.steps)
        return 0
    import torch

    models = a.models.split(",")
    configs = {"base": BASE, **TARGETS}
    meas = {m: {c: [] for c in configs} for m in models}
    pred = {m: {c: [] for c in (*TARGETS, "base (no change)")} for m in models}
    sources = set()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            for m in models:
                for c, (layers, mbs) in configs.items():
                    out = Path(tmp) / f"{m}-r{r}-{c.replace(' ', '')}"
                    subprocess.run([sys.executable, __file__, "--steps", str(a.steps), "--one", m, str(layers),
                                    str(mbs), str(out)], check=True, capture_output=True)
                    meas[m][c].append(measured(out))
                p = predicted(Path(tmp) / f"{m}-r{r}-base")
                sources.add(p["source"])
                for c, v in p["predicted"].items():
                    pred[m][c].append(v)
            print(f"repeat {r + 1}/{a.repeats} done ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    rows = []
    for m in models:
        for c in ("base (no change)", *TARGETS):
            mv = meas[m]["base" if c.startswith("base") else c]
            pv = pred[m][c]
            err = 100.0 * (statistics.median(pv) - statistics.median(mv)) / statistics.median(mv)
            rows.append({"model": m, "target": c, "measured_ms": round(statistics.median(mv), 2),
                         "measured_spread_pct": round(spread_pct(mv), 1),
                         "predicted_ms": round(statistics.median(pv), 2),
                         "predicted_spread_pct": round(spread_pct(pv), 1), "error_pct": round(err, 1),
                         "measured_runs_ms": [round(v, 2) for v in mv],
                         "predicted_runs_ms": [round(v, 2) for v in pv]})
    print(f"measured on this machine (CPU captures, torch {torch.__version__}, {torch.get_num_threads()} threads), "
          f"{a.repeats} repeats x {a.steps} steps; hidden {HIDDEN}, seq {SEQ}, micro-batch {MBS}; "
          f"base 2 layers, 1 micro-batch; layers found by: {', '.join(sorted(sources))}")
    print(f"{'model':6} {'target':17} {'measured ms':>11} {'spread %':>9} {'predicted ms':>12} {'spread %':>9} "
          f"{'error %':>8}")
    for x in rows:
        print(f"{x['model']:6} {x['target']:17} {x['measured_ms']:11.2f} {x['measured_spread_pct']:9.1f} "
              f"{x['predicted_ms']:12.2f} {x['predicted_spread_pct']:9.1f} {x['error_pct']:+8.1f}")
    if a.json:
        tmpf = a.json.with_name(a.json.name + ".tmp")
        tmpf.write_text(json.dumps({"repeats": a.repeats, "steps": a.steps, "sources": sorted(sources),
                                    "rows": rows}, indent=1))
        os.replace(tmpf, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
