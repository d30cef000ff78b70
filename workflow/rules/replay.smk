# Replay measured iterations unchanged (Lumos and the dPRO-style baseline) and compare with the measurement;
# the Fig. 6 transfer panel replays one step's graph with the next step's durations.


# One job replays every trace of one group (real traces, microbenchmarks, H200 recordings) with one
# simulator, and every seed of one emulated run with one simulator: the process start and numba's cache
# load are paid once per batch (docs/notes/2026-12-02-per-job-cost.md); each trace keeps its JSON and
# resolved config.
REPLAY_GROUPS = {"real": "real_traces", "microbench": "microbenchmarks", "h200": "h200_traces"}


def rule_suffix(name):
    """A run or trace name as part of a rule name."""
    return re.sub(r"\W", "_", name)


for _group, _key in REPLAY_GROUPS.items():
    _traces = list(config.get(_key, {}))
    if not _traces:
        continue

    rule:
        name:
            f"replay_{_group}"
        input:
            trace=sorted({f for t in _traces for f in trace_files(t)}),
            config=lambda w: hydra_inputs("experiment/replay", [f"simulator={w.simulator}"]),
        output:
            json=[f"{R}/replay/real/{t}/{{simulator}}.json" for t in _traces],
            resolved=[f"{R}/replay/real/{t}/{{simulator}}.config.resolved.yaml" for t in _traces],
        params:
            path=[trace_path(t) for t in _traces],
            emulated=False,
            overrides=lambda w: job_overrides("experiment/replay", [f"simulator={w.simulator}"]),
        log:
            f"{R}/logs/replay/{_group}/{{simulator}}.log",
        benchmark:
            f"{R}/benchmarks/replay/{_group}/{{simulator}}.tsv"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=5 * len(_traces),
        script:
            "../scripts/replay.py"


for _run in config["replay"]["emulated"]:

    rule:
        name:
            f"replay_emulated_{rule_suffix(_run)}"
        input:
            manifest=[f"{R}/emulated/{_run}/seed{seed}/manifest.json" for seed in seeds_of(_run)],
            config=lambda w: hydra_inputs("experiment/replay", [f"simulator={w.simulator}"]),
        output:
            json=[f"{R}/replay/emulated/{_run}/seed{seed}/{{simulator}}.json" for seed in seeds_of(_run)],
            resolved=[f"{R}/replay/emulated/{_run}/seed{seed}/{{simulator}}.config.resolved.yaml"
                      for seed in seeds_of(_run)],
        params:
            path=[emulated_dir(_run, seed) for seed in seeds_of(_run)],
            emulated=True,
            overrides=lambda w: job_overrides("experiment/replay", [f"simulator={w.simulator}"]),
        log:
            f"{R}/logs/replay/emulated/{_run}/{{simulator}}.log",
        benchmark:
            f"{R}/benchmarks/replay/emulated/{_run}/{{simulator}}.tsv"
        threads: 1
        resources:
            mem_mb=1000 + 40 * pc.parse_run(_run).pp * 16,
            runtime=10 * len(seeds_of(_run)),
        script:
            "../scripts/replay.py"


def timeline_source(which):
    fig = config.get("figures", {})
    if which == "real":
        name = fig["timeline_real"]
        return trace_path(name), trace_files(name)
    run = fig["timeline_emulated"]
    return emulated_dir(run, 0), [f"{emulated_dir(run, 0)}/manifest.json"]


rule timeline:
    """Stream duty cycle per bin, measured vs Lumos replay (the Fig. 6 analogue's data)."""
    input:
        trace=lambda w: timeline_source(w.which)[1],
        config=lambda w: hydra_inputs("experiment/replay", ["simulator=lumos"]),
    output:
        csv=f"{R}/timeline/{{which}}.csv",
        resolved=f"{R}/timeline/{{which}}.config.resolved.yaml",
    wildcard_constraints:
        which="real|emulated",
    params:
        path=lambda w: timeline_source(w.which)[0],
        label=lambda w: config["figures"]["timeline_real" if w.which == "real" else "timeline_emulated"],
        emulated=lambda w: w.which == "emulated",
        bin_us=config.get("figures", {}).get("bin_us", 1000.0),
        overrides=job_overrides("experiment/replay", ["simulator=lumos"]),
    log:
        f"{R}/logs/timeline/{{which}}.log",
    benchmark:
        f"{R}/benchmarks/timeline/{{which}}.tsv"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=20,
    script:
        "../scripts/timeline.py"


rule timeline_transfer:
    """The real trace's step k graph with step k+1's durations vs step k+1 measured, duty cycle per bin
    (the Fig. 6 analogue's transfer panel). Default gap threshold and lowest rank, as in `transfer_real`."""
    input:
        lambda w: trace_files(config["figures"]["timeline_real"]),
    output:
        csv=f"{R}/timeline/transfer.csv",
    params:
        path=lambda w: trace_path(config["figures"]["timeline_real"]),
        label=lambda w: config["figures"]["timeline_real"],
        bin_us=config.get("figures", {}).get("bin_us", 1000.0),
    log:
        f"{R}/logs/timeline/transfer.log",
    benchmark:
        f"{R}/benchmarks/timeline/transfer.tsv"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=20,
    script:
        "../scripts/timeline_transfer.py"
