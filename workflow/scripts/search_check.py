"""Shim of rule `search_check`: `lumos search` on the base, its top layouts emulated (one CSV)."""
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import pandas as pd

    from lumos.predict.search import search
    from lumos.emulator.actuals import emulate_actuals
    from lumos.report.tables import write_csv
    from lumos.trace import load_run

    base_dir = Path(smk.input.base).parent
    gb = smk.params.global_batch
    rows = search(load_run(base_dir), smk.params.gpus, micro_batches=list(smk.params.micro_batch),
                  global_batch=int(gb) if gb is not None else None, progress=False, workers=smk.threads)
    top = [r for r in rows if r["fits"]][:smk.params.top]
    out = []
    for rank, r in enumerate(top, 1):
        layout = [f"parallel.tp={r['tp']}", f"parallel.pp={r['pp']}", f"parallel.dp={r['dp']}",
                  f"model.micro_batch_size={r['micro_batch']}",
                  f"model.global_batch_size={r['microbatches'] * r['dp'] * r['micro_batch']}"]
        actual = emulate_actuals(list(smk.params.overrides) + layout, smk.params.seeds,
                                 log=lambda m: print(m, flush=True))
        for a in actual:
            out.append({"base": smk.params.base, "gpus": smk.params.gpus, "predicted_rank": rank,
                        **{k: r[k] for k in ("tp", "pp", "dp", "micro_batch", "microbatches")},
                        "memory_gib_per_gpu": r["memory_gib_per_gpu"],
                        "predicted_us": r["iteration_us"], "seed": a["seed"], "emulated_us": a["iteration_us"]})
        print(f"#{rank} {r['tp']}x{r['pp']}x{r['dp']} mbs {r['micro_batch']} x {r['microbatches']}: predicted "
              f"{r['iteration_us'] / 1e3:.1f} ms, emulated {[round(a['iteration_us'] / 1e3, 1) for a in actual]} ms",
              flush=True)
    write_csv(pd.DataFrame(out), smk.output.csv)
