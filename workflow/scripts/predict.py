"""Shim of every `lumos predict` rule (`predict_batch_*`, `predict_endtoend_*`, `predict_speed`,
`predict_sharded_*`): `lumos predict BASE FLAGS [--actual DIR]` for each target of the batch, in this
one process, so the base is loaded and fitted once. The rules differ only by their arguments: the
flags of each target (params.flags), an emulated actual to score against (input.actual, absent where
the table scores against MEASURED times) and the base run's name (params.base, recorded in each doc)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import as_list, compose_saved_to, logged, run_cli, write_json  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    outs = as_list(smk.output.json)
    if "resolved" in smk.output.keys():
        compose_saved_to("experiment/predict", smk.params.overrides, smk.output.resolved)   # one for the batch
    actuals = as_list(smk.input.actual) if "actual" in smk.input.keys() else [None] * len(outs)
    base = smk.params.get("base")
    for target, flags, actual, out in zip(smk.params.targets, smk.params.flags, actuals, outs):
        argv = ["predict", str(Path(smk.input.base).parent), *flags]
        if actual is not None:
            argv += ["--actual", str(Path(actual).parent)]
        doc = json.loads(run_cli(argv + ["--format", "json"]))
        if actual is not None:
            doc["emulated_actual"] = True
        if base is not None:
            doc["base_run"], doc["target_run"], doc["seed"] = base, target, int(smk.wildcards.seed)
        write_json(out, doc)
        said = (f"predicted vs actual (emulated) iteration error {doc['error_pct']:+.3f}%" if actual is not None
                else f"predicted {doc['predicted']['iteration_us'] / 1e3:.3f} ms")
        print(f"{target}: {said}", flush=True)
