"""Shim of rule `predict`: `lumos predict BASE --tp --pp --dp [--layers] [--hidden --ffn] --actual DIR`."""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import compose_saved, logged, run_cli, write_json  # noqa: E402
import pipeline_config as pc  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from omegaconf import OmegaConf

    compose_saved("experiment/predict", smk.params.overrides, smk.output.resolved)
    base, target = pc.parse_run(smk.params.base), pc.parse_run(smk.wildcards.run)
    models = Path(os.environ["LUMOS_CONFIG_DIR"]) / "model"
    bm, tm = OmegaConf.load(models / f"{base.model}.yaml"), OmegaConf.load(models / f"{target.model}.yaml")
    argv = ["predict", str(Path(smk.input.base).parent), "--tp", str(target.tp), "--pp", str(target.pp),
            "--dp", str(target.dp)]
    if tm.num_layers != bm.num_layers:
        argv += ["--layers", str(tm.num_layers)]
    if tm.hidden != bm.hidden or tm.ffn_hidden != bm.ffn_hidden:
        argv += ["--hidden", str(tm.hidden), "--ffn", str(tm.ffn_hidden)]
    argv += ["--actual", str(Path(smk.input.actual).parent), "--format", "json"]
    doc = json.loads(run_cli(argv))
    doc["emulated_actual"] = True
    doc["base_run"], doc["target_run"], doc["seed"] = base.name, target.name, int(smk.wildcards.seed)
    write_json(smk.output.json, doc)
    print(f"{target.name}: predicted vs actual (emulated) iteration error {doc['error_pct']:+.3f}%")
