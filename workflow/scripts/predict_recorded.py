"""Shim of rules `predict_h200` and `predict_fsdp_cpu`: `lumos predict BASE FLAGS EXTRA` from each base
recording (and, with `steps_pooled`, again with `--other-recordings` the other base recordings), and every
measured step of the target's recordings; `source` says what the recordings were measured on; `extra`
(calibration recordings) is not part of the target's flags in the table."""
import json
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged, run_cli, write_json  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.predict.prediction import measured_steps

    samples = ["--samples", str(smk.params.samples), "--seed", "0"] if smk.params.samples else []
    extra = list(smk.params.get("extra", None) or [])

    def predictions(pooled: bool) -> tuple[dict, dict]:
        """The first base's `lumos predict` document, and predicted_by_base, clock_by_base,
        steps_by_base (and interval_by_base, pairs_by_base) from each base, with the other bases' profiled steps
        (host work and kernels) where `pooled`."""
        first, out = None, {}
        for b in smk.params.bases:
            lend = ["--other-recordings", *[str(o) for o in smk.params.bases if o != b]] if pooled else []
            d = json.loads(run_cli(["predict", str(b), *smk.params.flags, *extra, *samples, "--format", "json", *lend]))
            first = first or d
            name = Path(b).name
            out.setdefault("predicted_by_base", {})[name] = d["predicted"]
            out.setdefault("clock_by_base", {})[name] = d.get("clock", {}).get("factor", 1.0)
            out.setdefault("steps_by_base", {})[name] = d["host"]["steps"]
            if samples:
                out.setdefault("interval_by_base", {})[name] = d["interval"]
            if "calibration_pairs" in d:
                out.setdefault("pairs_by_base", {})[name] = d["calibration_pairs"]
        return first, out

    first, own = predictions(pooled=False)
    doc = {**first, **own}
    if smk.params.steps_pooled and len(smk.params.bases) > 1:
        doc["pooled"] = predictions(pooled=True)[1]
    doc["label"] = smk.wildcards.label
    doc["flags"] = list(smk.params.flags)
    doc["measured_runs"] = [row for d in smk.params.actual for row in measured_steps(d)]
    doc["source"] = smk.params.source
    write_json(smk.output.json, doc)
    its = [r["iteration_us"] for r in doc["measured_runs"]]
    preds = ", ".join(f"{k} {v['iteration_us'] / 1e3:.3f}" for k, v in doc["predicted_by_base"].items())
    print(f"{smk.wildcards.label}: predicted ms from {preds}; measured {min(its) / 1e3:.3f}-"
          f"{max(its) / 1e3:.3f} ms over {len(its)} iterations")
