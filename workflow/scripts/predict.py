"""Shim of rule `predict`: `lumos predict BASE --tp --pp --dp [--layers] [--hidden --ffn] --actual DIR`."""
import json
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import compose_saved, logged, run_cli, write_json  # noqa: E402
import pipeline_config as pc  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    compose_saved("experiment/predict", smk.params.overrides, smk.output.resolved)
    base, target = pc.parse_run(smk.params.base), pc.parse_run(smk.wildcards.run)
    argv = pc.predict_argv(Path(smk.input.base).parent, base, target)
    argv += ["--actual", str(Path(smk.input.actual).parent), "--format", "json"]
    doc = json.loads(run_cli(argv))
    doc["emulated_actual"] = True
    doc["base_run"], doc["target_run"], doc["seed"] = base.name, target.name, int(smk.wildcards.seed)
    write_json(smk.output.json, doc)
    print(f"{target.name}: predicted vs actual (emulated) iteration error {doc['error_pct']:+.3f}%")
