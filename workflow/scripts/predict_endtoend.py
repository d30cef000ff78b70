"""Shim of rules `predict_endtoend_*`: `lumos predict BASE --tp --pp --dp [FLAGS]` from a data set's emulated
base to each of its measured layouts at one seed, in this one process (no emulated actual: table endtoend
scores them against the MEASURED times)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import as_list, compose_saved_to, logged, run_cli, write_json  # noqa: E402
import pipeline_config as pc  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    compose_saved_to("experiment/predict", smk.params.overrides, smk.output.resolved)
    base = pc.parse_run(smk.params.base)
    for run, out in zip(smk.params.runs, as_list(smk.output.json)):
        target = pc.parse_run(run)
        argv = pc.predict_argv(Path(smk.input.base).parent, base, target) + list(smk.params.flags)
        doc = json.loads(run_cli(argv + ["--format", "json"]))
        doc["base_run"], doc["target_run"], doc["seed"] = base.name, target.name, int(smk.wildcards.seed)
        write_json(out, doc)
        print(f"{target.name}: predicted {doc['predicted']['iteration_us'] / 1e3:.3f} ms", flush=True)
