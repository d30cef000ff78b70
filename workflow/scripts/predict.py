"""Shim of rules `predict_batch_*`: `lumos predict BASE --tp --pp --dp [--layers] [--hidden --ffn] --actual DIR`
for every target of one batch at one seed, in this one process."""
import json
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import as_list, compose_saved_to, logged, run_cli, write_json  # noqa: E402
import pipeline_config as pc  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    compose_saved_to("experiment/predict", smk.params.overrides, smk.output.resolved)   # one for the batch
    base = pc.parse_run(smk.params.base)
    for run, actual, out in zip(smk.params.runs, as_list(smk.input.actual), as_list(smk.output.json)):
        target = pc.parse_run(run)
        argv = pc.predict_argv(Path(smk.input.base).parent, base, target)
        argv += ["--actual", str(Path(actual).parent), "--format", "json"]
        doc = json.loads(run_cli(argv))
        doc["emulated_actual"] = True
        doc["base_run"], doc["target_run"], doc["seed"] = base.name, target.name, int(smk.wildcards.seed)
        write_json(out, doc)
        print(f"{target.name}: predicted vs actual (emulated) iteration error {doc['error_pct']:+.3f}%", flush=True)
