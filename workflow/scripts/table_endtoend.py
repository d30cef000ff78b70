"""Shim of rule `table_endtoend`: each data set's predictions (one JSON per target and seed) against its
MEASURED points and beside the peer's published errors; the long per-seed rows, the table (CSV + Markdown)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import pandas as pd

    import endtoend_plan
    from lumos.report import endtoend as E
    from lumos.report.tables import write_csv

    datasets, long = [], []
    for spec in smk.params.datasets:
        points = endtoend_plan.measured_points(spec["name"], spec)
        docs = {(t["target"], seed): json.loads(Path(path).read_text())
                for t in spec["targets"] for seed, path in t["files"].items()}
        rows = [E.prediction_row(doc, target, int(seed)) for (target, seed), doc in docs.items()]
        batch = {target: E.sequences_of(doc) for (target, _seed), doc in docs.items()}
        measured = tuple(E.Measurement(t["target"], points[t["target"]].total_ms, dict(points[t["target"]].parts_ms),
                                       batch[t["target"]]) for t in spec["targets"])
        base_measured, base_ms = None, ()
        if spec["base_layout"]:
            manifests = [json.loads(Path(f).read_text()) for f in spec["base_manifests"]]
            base_ms = tuple(m["iteration_us"] / 1e3 for m in manifests)
            p = points[spec["base_layout"]]
            base_measured = E.Measurement(spec["base_layout"], p.total_ms, dict(p.parts_ms),
                                          float(manifests[0]["global_batch_size"]))
        peer = spec.get("peer") or {}
        datasets.append(E.DataSet(spec["name"], spec["base"], measured, pd.DataFrame(rows), peer=peer.get("name", ""),
                                  peer_errors=E.read_peer_errors(peer["file"]) if peer.get("file") else (),
                                  measured_by=spec["measured_by"], base_measured=base_measured, base_ms=base_ms))
        long += [dict(r, dataset=spec["name"], base=spec["base"],
                      measured_iteration_ms=points[r["target"]].total_ms) for r in rows]
    write_csv(pd.DataFrame(long), smk.output.data)
    table = E.endtoend_table(datasets)
    tag = "" if smk.params.tag == "default" else f" [tag {smk.params.tag}]"
    extra = f"; overrides {list(smk.params.overrides)}" if smk.params.overrides else ""
    labels = "; ".join(f"{s['name']}: {s['label']}" for s in smk.params.datasets)
    title = (f"Prediction vs hardware ({labels}): `lumos predict` from an EMULATED base (the measured base's trace "
             "is not published) vs MEASURED on hardware; error = 100 x (predicted - measured) / measured, mean over "
             "the base's seeds with 95% CI; parts in points of the measured iteration; beside it the peer's own "
             f"published |error|{tag}{extra}")
    E.write_endtoend_table(table, smk.output.csv, smk.output.md, title)
    print(Path(smk.output.md).read_text())
