"""Shim of rule `predict_speed`: `lumos predict BASE --compute-speed X --network-speed Y --actual DIR`."""
import json
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged, run_cli, write_json  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    argv = ["predict", str(Path(smk.input.base).parent), *smk.params.flags,
            "--actual", str(Path(smk.input.actual).parent), "--format", "json"]
    doc = json.loads(run_cli(argv))
    doc["emulated_actual"] = True
    write_json(smk.output.json, doc)
    print(f"{smk.wildcards.variant}: predicted vs actual (emulated) iteration error {doc['error_pct']:+.3f}%")
