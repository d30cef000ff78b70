"""Shim of rules `replay_real` / `replay_emulated`: `lumos replay PATH --format json` under the job's config."""
import json
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import compose_saved, logged, run_cli, write_json  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    cfg = compose_saved("experiment/replay", smk.params.overrides, smk.output.resolved)
    sim, abl = cfg.simulator, cfg.ablation
    argv = ["replay", str(smk.params.path), "--format", "json", "--engine", str(sim.engine)]
    if sim.name != "lumos":
        argv += ["--simulator", str(sim.name)]
    else:
        argv += ["--gap-threshold-us", str(sim.gap_threshold_us)]
        if abl.drop:
            argv += ["--drop", ",".join(abl.drop)]
        if abl.drop_random:
            argv += ["--drop-random", str(abl.drop_random), "--seed", str(abl.drop_seed)]
    if cfg.step is not None:
        argv += ["--step", str(cfg.step)]
    doc = json.loads(run_cli(argv))
    doc["simulator"] = str(sim.name)
    doc["ablation"] = str(abl.name)
    doc["emulated"] = bool(smk.params.emulated)
    write_json(smk.output.json, doc)
    print(f"{sim.name}: iteration error {doc['error_pct']:+.3f}%" + (" (emulated)" if doc["emulated"] else ""))
