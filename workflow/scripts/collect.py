"""Shim of rule `collect`: per-job JSON/CSV results -> one long data table (results/{tag}/data/KIND.csv)."""
import json
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import pandas as pd

    from lumos.report.tables import prediction_row, replay_rows, run_replay_row, write_csv

    kind = smk.wildcards.kind
    rows, frames = [], []
    for path, labels in zip(smk.input, smk.params.labels):
        if kind == "ablation":
            frames.append(pd.read_csv(path))
            continue
        with open(path) as fh:
            doc = json.load(fh)
        if kind in ("replay_real", "replay_microbench", "replay_h200"):
            rows.extend(replay_rows(doc, labels))
        elif kind == "replay_emulated":
            rows.append(run_replay_row(doc, labels))
        else:
            rows.append(prediction_row(doc, labels))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(rows)
    if kind not in ("replay_real", "replay_microbench", "replay_h200", "ablation"):
        df.insert(0, "source", "emulated")
    write_csv(df, smk.output.csv)
    print(f"{kind}: {len(df)} rows from {len(smk.input)} files")
