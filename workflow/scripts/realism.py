"""Shim of rules `realism_vtrain` (one shard of vTrain's rows), `realism_paper` (Fig. 1 and Fig. 7) and
`realism_multinode` (one Selene data set):
each published configuration emulated on one core, one CSV row each (emulated vs measured)."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import pandas as pd

    from lumos.emulator import realism
    from lumos.trace.atomic import write_text_atomic

    if smk.rule == "realism_vtrain":   # shard k: rows k, k + S, k + 2S, ... of the (sampled) list
        k, n = int(smk.wildcards.shard), int(smk.params.shards)
        points = realism.shard(realism.dataset_points("vtrain_single", smk.params.sample), k, n)
        index = range(k, k + n * len(points), n)
    else:
        points = [p for ds in smk.params.datasets for p in realism.dataset_points(ds)]
        index = [i for ds in smk.params.datasets for i in range(len(realism.dataset_points(ds)))]
    print(f"{len(points)} configurations, extra overrides {list(smk.params.overrides)}", flush=True)
    rows = realism.run_points(points, tuple(smk.params.overrides), workers=1, log=lambda s: print(s, flush=True))
    df = pd.DataFrame(rows)
    df.insert(1, "point", list(index))   # position in its data set's (sampled) list
    write_text_atomic(smk.output.csv, df.to_csv(index=False))   # full precision: measured values as published
    for ds, s in realism.score(rows).items():
        print(f"{ds}: n={s['n']} mean |error| {s['mean_abs_err_pct']:.2f}% (emulated vs measured)")
