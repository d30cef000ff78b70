"""Shim of rules `predict_speed` and `predict_sharded`: `lumos predict BASE FLAGS --actual DIR` for every
variant of one seed, in this one process."""
import json
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import as_list, logged, run_cli, write_json  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    for variant, flags, actual, out in zip(smk.params.variants, smk.params.flags, as_list(smk.input.actual),
                                           as_list(smk.output.json)):
        argv = ["predict", str(Path(smk.input.base).parent), *flags,
                "--actual", str(Path(actual).parent), "--format", "json"]
        doc = json.loads(run_cli(argv))
        doc["emulated_actual"] = True
        write_json(out, doc)
        print(f"{variant}: predicted vs actual (emulated) iteration error {doc['error_pct']:+.3f}%", flush=True)
