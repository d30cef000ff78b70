"""Shim of rules `replay_{real,microbench,h200}` and `replay_emulated_*`: `lumos replay PATH --format json`
under the job's config, for every trace (or seed) of the batch, in this one process."""
import json
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import as_list, compose_saved_to, logged, run_cli, write_json  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    cfg = compose_saved_to("experiment/replay", smk.params.overrides, smk.output.resolved)   # one for the batch
    sim, abl = cfg.simulator, cfg.ablation
    flags = ["--format", "json", "--engine", str(sim.engine)]
    if sim.name != "lumos":
        flags += ["--simulator", str(sim.name)]
    else:
        flags += ["--gap-threshold-us", str(sim.gap_threshold_us)]
        if abl.drop:
            flags += ["--drop", ",".join(abl.drop)]
        if abl.drop_random:
            flags += ["--drop-random", str(abl.drop_random), "--seed", str(abl.drop_seed)]
    if cfg.step is not None:
        flags += ["--step", str(cfg.step)]
    for path, out in zip(as_list(smk.params.path), as_list(smk.output.json)):
        doc = json.loads(run_cli(["replay", str(path)] + flags))
        doc["simulator"] = str(sim.name)
        doc["ablation"] = str(abl.name)
        doc["emulated"] = bool(smk.params.emulated)
        write_json(out, doc)
        print(f"{path}: {sim.name}: iteration error {doc['error_pct']:+.3f}%" + (" (emulated)" if doc["emulated"] else ""),
              flush=True)
