# Shared names of the pipeline: output roots, the sweep (runs, seeds, targets), Hydra inputs.
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow" / "scripts"))
import pipeline_config as pc  # noqa: E402
import endtoend_plan  # noqa: E402

# Every job (and the shims it starts) composes from the same Hydra groups.
os.environ["LUMOS_CONFIG_DIR"] = str(Path(config.get("config_dir", "config")).resolve())

TAG = config["tag"]
R = f"results/{TAG}"
F = f"figures/{TAG}"
OVERRIDES = list(config.get("overrides", []))
SIMULATORS = list(config["replay"]["simulators"])
PUBLISH = bool(config.get("publish", True)) and TAG == "default"

wildcard_constraints:
    run=pc.RUN_WILDCARD,
    seed=r"\d+",
    simulator="lumos|dpro",
    trace=r"[A-Za-z0-9_.+-]+",
    name=r"[A-Za-z0-9_]+",
    ext="csv|md|png|pdf",


def seeds_of(run):
    return list(range(int(config.get("seeds_per_run", {}).get(run, config["seeds"]))))


# Prediction vs hardware (table endtoend): one plan per published data set (workflow/rules/endtoend.smk).
ENDTOEND = endtoend_plan.plans(config, seeds_of)


def h200_traces():
    """name -> directory of every recorded H200 run (`h200_CONFIG_rREP`); empty without an h200 section."""
    h = config.get("h200")
    if not h:
        return {}
    root = Path(h["dir"])
    only = h.get("traces")   # a subset of the recordings (the tiny profile); default all
    return {f"h200_{p.name}": str(p) for p in sorted(root.iterdir())
            if p.is_dir() and any(p.glob("rank*.json*")) and (only is None or p.name in only)}


config["h200_traces"] = h200_traces()


def trace_path(name):
    for group in ("real_traces", "microbenchmarks", "h200_traces"):
        if name in config.get(group, {}):
            return config[group][name]
    raise ValueError(f"config: no real trace or microbenchmark named {name!r}")


def trace_files(name):
    """A trace's files as Snakemake inputs (a directory of ranks lists its trace files)."""
    path = Path(trace_path(name))
    if path.is_dir():
        return sorted(str(p) for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
    return [str(path)]


BASE = pc.parse_run(config["predict"]["base"])


def prediction_targets():
    """(label, group, run name) of every prediction: the scale-out shapes, then the variants."""
    out = []
    for group, shapes in config["predict"].get("scaleout", {}).items():
        for shape in shapes:
            out.append((shape, group, pc.with_parallel(BASE, shape).name))
    for label, model in config["predict"].get("variants", {}).items():
        out.append((label, "variant", pc.Run(model, BASE.tp, BASE.pp, BASE.dp).name))
    return out


def sweep_batches():
    """batch name -> runs: the prediction sweep (the base, then every target) in batches of runs that
    share their seeds. One job emulates a batch's runs at one seed, one job predicts them, so a process
    start, the imports and numba's cache load are paid once per batch, not once per run
    (docs/notes/2026-12-02-per-job-cost.md)."""
    by_seeds = {}
    for run in dict.fromkeys([BASE.name] + [run for _, _, run in prediction_targets()]):
        by_seeds.setdefault(len(seeds_of(run)), []).append(run)
    return {f"{n}seeds": runs for n, runs in by_seeds.items()}


def seed_constraint(seeds):
    """A `seed` wildcard constraint that matches exactly these seeds."""
    return "|".join(str(s) for s in seeds) or "(?!)"


def fsdp_cpu_target(label):
    """One fsdp_cpu target, with the block's `dir` and `bases` where it names none of its own."""
    f = config["fsdp_cpu"]
    t = f["targets"][label]
    return {**t, "dir": t.get("dir", f["dir"]), "bases": t.get("bases", f["bases"]), "calibration": t.get("calibration", [])}


def fsdp_cpu_dirs(name, root):
    """The recordings (`NAME_rK` directories) of one configuration under `root`."""
    return sorted(str(p) for p in Path(root).iterdir() if p.is_dir() and re.fullmatch(rf"{re.escape(name)}_r\d+", p.name))


def fsdp_cpu_calibration(label):
    """The target's calibration pairs (`lumos predict --dp-calibration`): for each [AT_DP, AT_ONE]
    configuration pair, every recording AT_DP_rK with AT_ONE_rK, as directories."""
    t = fsdp_cpu_target(label)
    pairs = []
    for at_dp, at_one in t["calibration"]:
        for d in fsdp_cpu_dirs(at_dp, t["dir"]):
            one = Path(t["dir"]) / f"{at_one}_{d.rsplit('_', 1)[1]}"
            if not one.is_dir():
                raise ValueError(f"config: fsdp_cpu.targets.{label}.calibration: {d} has no partner {one}")
            pairs.append((d, str(one)))
    return pairs


def moe_cpu_dirs(label, what):
    """A moe_cpu target's `bases` or `actual` recordings as directories under the block's `dir`."""
    m = config["moe_cpu"]
    return [str(Path(m["dir"]) / d) for d in m["targets"][label][what]]


def moe_cpu_calibration_flags(label):
    """The target's calibration pairs as `--ep-calibration AT_BASE_EP AT_TARGET_EP`."""
    m = config["moe_cpu"]
    return [x for a, b in m["targets"][label]["calibration"] for x in ("--ep-calibration", str(Path(m["dir"]) / a),
                                                                        str(Path(m["dir"]) / b))]


def check_config():
    """Cross-references the schema cannot check; a clear message beats a missing-input error."""
    names = set(config.get("real_traces", {})) | set(config.get("microbenchmarks", {}))
    for name in config.get("ablation", {}).get("real", []):
        if name not in config.get("real_traces", {}):
            raise ValueError(f"config: ablation.real names {name!r}, which is not in real_traces")
    for name in (config.get("transfer") or {}).get("real", []):
        if name not in config.get("real_traces", {}):
            raise ValueError(f"config: transfer.real names {name!r}, which is not in real_traces")
    fig = config.get("figures", {})
    if fig.get("timeline_real") and fig["timeline_real"] not in names:
        raise ValueError(f"config: figures.timeline_real names {fig['timeline_real']!r}, not a real trace")
    if fig.get("breakdown_run") and fig["breakdown_run"] not in config["replay"]["emulated"]:
        raise ValueError(f"config: figures.breakdown_run {fig['breakdown_run']!r} must be in replay.emulated")
    for name, path in list(config.get("real_traces", {}).items()) + list(config.get("microbenchmarks", {}).items()):
        if not Path(path).exists():
            raise ValueError(f"config: trace {name!r}: no such file or directory {path}")
    h = config.get("h200")
    if h:
        have = {n[len("h200_"):].rsplit("_r", 1)[0] for n in config["h200_traces"]}
        for b in h["bases"]:
            if f"h200_{b}" not in config["h200_traces"]:
                raise ValueError(f"config: h200.bases: {b!r} is not a run directory under {h['dir']}")
        for label, t in h["targets"].items():
            if t["config"] not in have:
                raise ValueError(f"config: h200.targets.{label}: no recording of {t['config']!r} under {h['dir']}")
    f = config.get("fsdp_cpu")
    if f:
        for label in f["targets"]:
            t = fsdp_cpu_target(label)
            for b in t["bases"]:
                if not (Path(t["dir"]) / b).is_dir():
                    raise ValueError(f"config: fsdp_cpu.targets.{label}: base {b!r} is not a run directory "
                                     f"under {t['dir']}")
            if not fsdp_cpu_dirs(t["config"], t["dir"]):
                raise ValueError(f"config: fsdp_cpu.targets.{label}: no recording {t['config']}_rK under {t['dir']}")
            if t["calibration"] and not fsdp_cpu_calibration(label):
                raise ValueError(f"config: fsdp_cpu.targets.{label}.calibration: no recording of "
                                 f"{t['calibration']} under {t['dir']}")

    m = config.get("moe_cpu")
    if m:
        for label, t in m["targets"].items():
            used = {what: set(t[what]) for what in ("bases", "actual")}
            cal = {d for pair in t["calibration"] for d in pair}
            for d in sorted(used["bases"] | used["actual"] | cal):
                if not (Path(m["dir"]) / d).is_dir():
                    raise ValueError(f"config: moe_cpu.targets.{label}: {d!r} is not a run directory under {m['dir']}")
            both = sorted(cal & (used["bases"] | used["actual"]))
            if both:
                raise ValueError(f"config: moe_cpu.targets.{label}: {', '.join(both)} both calibrate and are predicted "
                                 "or scored: keep calibration and scoring recordings apart")


check_config()


def hydra_inputs(primary, extra=()):
    return pc.hydra_inputs(primary, pc.overrides_for(primary, OVERRIDES) + list(extra))


def job_overrides(primary, extra=()):
    """What a job's composition gets: its own overrides, then the pipeline-wide ones that apply."""
    return list(extra) + pc.overrides_for(primary, OVERRIDES)


def emulated_dir(run, seed):
    return f"{R}/emulated/{run}/seed{seed}"


# ---- the outputs, by table -------------------------------------------------------------------

def replay_real_jsons(group):
    return [f"{R}/replay/real/{t}/{s}.json" for t in config.get(group, {}) for s in SIMULATORS]


def replay_emulated_jsons():
    return [f"{R}/replay/emulated/{run}/seed{seed}/{s}.json"
            for run in config["replay"]["emulated"] for seed in seeds_of(run) for s in SIMULATORS]


def prediction_jsons(which):
    return [f"{R}/predict/{run}/seed{seed}.json"
            for label, group, run in prediction_targets() if (group == "variant") == (which == "variants")
            for seed in seeds_of(run)]


def ablation_csvs():
    abl = config.get("ablation", {})
    return ([f"{R}/ablation/real/{t}.csv" for t in abl.get("real", [])]
            + [f"{R}/ablation/emulated/{run}/seed{seed}.csv" for run in abl.get("emulated", [])
               for seed in range(int(abl.get("seeds", 1)))])


def table_names():
    names = []
    if config.get("real_traces"):
        names.append("replay_real")
    if config.get("microbenchmarks"):
        names.append("replay_microbench")
    if config["replay"]["emulated"]:
        names.append("replay_emulated")
    if config.get("h200_traces"):
        names.append("replay_h200")
    if config.get("h200", {}).get("targets"):
        names.append("h200_whatif")
    if (config.get("transfer") or {}).get("real") or (config.get("transfer") or {}).get("h200_suffix"):
        names.append("transfer_real")
    if (config.get("realism") or {}).get("datasets"):
        names.append("emulator_realism")
    if prediction_jsons("scaleout"):
        names.append("scaleout")
    if prediction_jsons("variants"):
        names.append("variants")
    if config.get("speed", {}).get("variants"):
        names.append("speed")
    if (config.get("sharded") or {}).get("modes"):
        names.append("sharded_dp")
    if (config.get("from_one_gpu") or {}).get("bases"):
        names.append("from_one_gpu")
    if (config.get("llama") or {}).get("targets"):
        names.append("llama")
    if (config.get("schedules") or {}).get("predictions"):
        names.append("schedules")
    if (config.get("moe") or {}).get("targets"):
        names.append("moe")
    if (config.get("fsdp_cpu") or {}).get("targets"):
        names.append("fsdp_cpu_whatif")
    if (config.get("moe_cpu") or {}).get("targets"):
        names.append("moe_cpu_whatif")
    if ablation_csvs():
        names += ["ablation", "ablation_by_trace"]
    if config["replay"]["emulated"] or prediction_targets():
        names.append("statistics")
    if config.get("search"):
        names.append("search")
    if ENDTOEND:
        names.append("endtoend")
    if config.get("coverage"):
        names.append("coverage")
        if config.get("real_traces"):
            names.append("intervals_real")
    return names


def figure_names():
    fig = config.get("figures", {})
    names = []
    if fig.get("breakdown_run"):
        names.append("fig1_breakdown")
    if fig.get("timeline_real") or fig.get("timeline_emulated"):
        names.append("fig6_timeline")
    if prediction_jsons("scaleout"):
        names.append("fig7_scaleout")
    if prediction_jsons("variants"):
        names.append("fig8_variants")
    if ablation_csvs():
        names.append("fig_ablation")
    if prediction_targets() or config["replay"]["emulated"]:
        names.append("fig_error_ci")
    if config.get("h200", {}).get("targets"):
        names.append("fig_h200_whatif")
    if (config.get("realism") or {}).get("datasets"):
        names.append("fig_emulator_realism")
    if config.get("coverage"):
        names.append("fig_coverage")
    if ENDTOEND:
        names.append("fig_endtoend")
    return names


def final_outputs():
    out = [f"{R}/tables/{n}.{e}" for n in table_names() for e in ("csv", "md")]
    out += [f"{F}/{n}.{e}" for n in figure_names() for e in ("png", "pdf")]
    if PUBLISH:
        out += [f"results/tables/{n}.{e}" for n in table_names() for e in ("csv", "md")]
        out += [f"figures/{n}.{e}" for n in figure_names() for e in ("png", "pdf")]
    return out


def warm_numba():
    """Compile the emulator's trace writer, and replay the smallest configured trace once (Lumos and
    dPRO-style); failures are left to the jobs."""
    import subprocess

    writer = subprocess.Popen([sys.executable, "-m", "lumos.trace.column_writer"])   # beside the replays
    paths = [p for p in list(config.get("microbenchmarks", {}).values()) + list(config.get("real_traces", {}).values())
             if Path(p).is_file()]
    if paths:
        smallest = min(paths, key=lambda p: Path(p).stat().st_size)
        for sim in SIMULATORS:
            subprocess.run([sys.executable, "-m", "lumos.cli", "replay", smallest, "--format", "json", "--simulator",
                            sim], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    writer.wait()
