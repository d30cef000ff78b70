"""Shim of rules `predict_h200` and `predict_fsdp_cpu`: `lumos predict BASE FLAGS` from each base
recording (and, with `host_pooled`, again with `--host-from` the other base recordings), and every
measured step of the target's recordings; `source` says what the recordings were measured on."""
import json
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged, run_cli, write_json  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.analysis.predict import measured_steps

    samples = ["--samples", str(smk.params.samples), "--seed", "0"] if smk.params.samples else []
    docs = [json.loads(run_cli(["predict", str(b), *smk.params.flags, *samples, "--format", "json"]))
            for b in smk.params.bases]
    doc = docs[0]

    def by_base(docs, key):
        return {Path(b).name: key(d) for b, d in zip(smk.params.bases, docs)}

    doc["predicted_by_base"] = by_base(docs, lambda d: d["predicted"])
    if samples:
        doc["interval_by_base"] = by_base(docs, lambda d: d["interval"])
    doc["clock_by_base"] = by_base(docs, lambda d: d.get("clock", {}).get("factor", 1.0))
    if smk.params.host_pooled and len(smk.params.bases) > 1:
        pooled = [json.loads(run_cli(["predict", str(b), *smk.params.flags, *samples, "--format", "json",
                                      "--host-from", *[str(o) for o in smk.params.bases if o != b]]))
                  for b in smk.params.bases]
        doc["pooled_host"] = {"predicted_by_base": by_base(pooled, lambda d: d["predicted"]),
                              "clock_by_base": by_base(pooled, lambda d: d.get("clock", {}).get("factor", 1.0)),
                              "host_steps_by_base": by_base(pooled, lambda d: d["host"]["steps"])}
        if samples:
            doc["pooled_host"]["interval_by_base"] = by_base(pooled, lambda d: d["interval"])
    doc["label"] = smk.wildcards.label
    doc["flags"] = list(smk.params.flags)
    doc["measured_runs"] = [row for d in smk.params.actual for row in measured_steps(d)]
    doc["source"] = smk.params.source
    write_json(smk.output.json, doc)
    its = [r["iteration_us"] for r in doc["measured_runs"]]
    preds = ", ".join(f"{k} {v['iteration_us'] / 1e3:.3f}" for k, v in doc["predicted_by_base"].items())
    print(f"{smk.wildcards.label}: predicted ms from {preds}; measured {min(its) / 1e3:.3f}-"
          f"{max(its) / 1e3:.3f} ms over {len(its)} iterations")
