"""Shim of rule `moe_check` (table moe; emulated): the MoE bases and targets emulated, each target predicted from
each base (`lumos.predict.prediction.predict`, the flags of the config), and the base configuration's routing
interval (`--samples`) checked on independent emulated runs. One long CSV (lumos/report/moe_table.py)."""
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import numpy as np
    import pandas as pd

    from lumos.config import compose
    from lumos.emulator import emulate_config, write_result
    from lumos.predict.options import PredictOptions
    from lumos.predict.prediction import measure_run, predict
    from lumos.report.tables import write_csv
    from lumos.trace import load_run

    P = smk.params
    KEYS = ("iteration_us", "exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us")
    FLAG = {"--ep": ("ep", int), "--experts": ("experts", int), "--top-k": ("top_k", int),
            "--expert-ffn": ("expert_ffn", int), "--dp": ("dp", int), "--capacity-factor": ("capacity_factor", float)}
    tmp = Path(tempfile.mkdtemp(prefix="lumos-moe-"))

    def measured(overrides, seed, keep=None):
        """The emulated run's measured breakdown (the prediction's own measure), its traces in `keep` or a temp dir."""
        cfg = compose("emulate", list(overrides) + ["progress=false"])
        cfg.seed = int(seed)
        out = Path(keep) if keep else Path(tempfile.mkdtemp(dir=tmp))
        write_result(emulate_config(cfg, progress=False), out)
        got = measure_run(load_run(out))
        if not keep:
            shutil.rmtree(out)
        return got

    def target(flags):
        """The predict target of `lumos predict` flags (each with its value, --pad-to-capacity alone)."""
        flags, out = list(flags), {}
        if "--pad-to-capacity" in flags:
            flags.remove("--pad-to-capacity")
            out["pad_to_capacity"] = True
        for f, v in zip(flags[0::2], flags[1::2]):
            key, kind = FLAG[f]
            out[key] = kind(v)
        return out

    rows = []
    actual = {}
    for name, t in P.targets.items():
        runs = [measured(list(P.base) + list(t["overrides"]), s) for s in range(P.seeds)]
        actual[name] = {k: float(np.mean([r[k] for r in runs])) for k in KEYS}
        actual[name]["sd"] = float(np.std([r["iteration_us"] for r in runs]))
        print(f"{name}: emulated mean {actual[name]['iteration_us'] / 1e3:.2f} ms over {P.seeds} seeds", flush=True)
    for b in range(P.base_seeds):
        base_dir = tmp / f"base{b}"
        measured(P.base, b, keep=base_dir)
        tables = load_run(base_dir)
        for name, t in P.targets.items():
            doc = predict(tables, target(t["flags"]), PredictOptions(), base_name=f"seed{b}")
            row = {"kind": "prediction", "target": name, "flags": " ".join(t["flags"]), "base_seed": b,
                   "actual_sd_us": actual[name]["sd"]}
            row.update({f"predicted_{k}": doc["predicted"][k] for k in KEYS})
            row.update({f"actual_{k}": actual[name][k] for k in KEYS})
            rows.append(row)
            err = 100 * (doc["predicted"]["iteration_us"] - actual[name]["iteration_us"]) / actual[name]["iteration_us"]
            print(f"base seed {b}, {name}: predicted {doc['predicted']['iteration_us'] / 1e3:.2f} ms ({err:+.2f}%)",
                  flush=True)
    iv = P.interval
    doc = predict(load_run(tmp / "base0"), target(iv["flags"]), PredictOptions(samples=int(iv["samples"])),
                  base_name="seed0")
    lo, hi = doc["routing"]["iteration_us"]["90"]
    runs = np.array([measured(list(P.base) + list(iv["overrides"]), s)["iteration_us"]
                     for s in range(1000, 1000 + int(iv["runs"]))])
    covered = float(np.mean((runs >= lo) & (runs <= hi)))
    rows.append({"kind": "interval", "target": iv["name"], "flags": " ".join(iv["flags"]) + f" --samples {iv['samples']}",
                 "base_seed": 0, "lo_us": lo, "hi_us": hi, "actual_iteration_us": float(runs.mean()),
                 "actual_sd_us": float(runs.std()), "covered": covered, "runs": len(runs)})
    print(f"interval [{lo / 1e3:.1f}, {hi / 1e3:.1f}] ms covers {100 * covered:.0f}% of {len(runs)} runs", flush=True)
    write_csv(pd.DataFrame(rows), smk.output.csv)
    shutil.rmtree(tmp)
