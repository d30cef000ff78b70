"""Shim of rule `coverage_interval`: the interval of one coverage experiment, from the base run of the
fit seed (`lumos replay --samples` for the base itself, `lumos predict --samples` for a target)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged, run_cli, write_json  # noqa: E402
import pipeline_config as pc  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    base_dir = Path(smk.input.base).parent
    base, target = pc.parse_run(smk.params.base), pc.parse_run(smk.params.run)
    if smk.params.group == "replay":
        argv = ["replay", str(base_dir), "--iteration", "gpu"]   # the actuals are GPU spans
    else:
        argv = ["predict", str(base_dir), *pc.predict_flags(base, target)]
    argv += ["--samples", str(smk.params.samples), "--seed", "0", "--format", "json"]
    doc = json.loads(run_cli(argv))
    point = doc["predicted"]["iteration_us"] if "predicted" in doc else doc["replayed"]["iteration_us"]
    out = {"label": smk.wildcards.label, "group": smk.params.group, "run": target.name, "base_run": base.name,
           "fit_seed": int(smk.params.fit_seed), "point_us": point, "interval": doc["interval"],
           "command": "lumos " + " ".join(argv)}
    write_json(smk.output.json, out)
    iv = doc["interval"]["iteration_us"]
    print(f"{smk.wildcards.label}: point {point / 1e3:.3f} ms, median {iv['median'] / 1e3:.3f}, "
          f"90% [{iv['90'][0] / 1e3:.3f}, {iv['90'][1] / 1e3:.3f}] ms (emulated base)")
