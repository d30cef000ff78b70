# Replay measured iterations unchanged (Lumos and the dPRO-style baseline) and compare with the measurement;
# the Fig. 6 transfer panel replays one step's graph with the next step's durations.


rule replay_real:
    input:
        trace=lambda w: trace_files(w.trace),
        config=lambda w: hydra_inputs("experiment/replay", [f"simulator={w.simulator}"]),
    output:
        json=f"{R}/replay/real/{{trace}}/{{simulator}}.json",
        resolved=f"{R}/replay/real/{{trace}}/{{simulator}}.config.resolved.yaml",
    params:
        path=lambda w: trace_path(w.trace),
        emulated=False,
        overrides=lambda w: job_overrides("experiment/replay", [f"simulator={w.simulator}"]),
    log:
        f"{R}/logs/replay/real/{{trace}}/{{simulator}}.log",
    benchmark:
        f"{R}/benchmarks/replay/real/{{trace}}/{{simulator}}.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    script:
        "../scripts/replay.py"


rule replay_emulated:
    input:
        manifest=f"{R}/emulated/{{run}}/seed{{seed}}/manifest.json",
        config=lambda w: hydra_inputs("experiment/replay", [f"simulator={w.simulator}"]),
    output:
        json=f"{R}/replay/emulated/{{run}}/seed{{seed}}/{{simulator}}.json",
        resolved=f"{R}/replay/emulated/{{run}}/seed{{seed}}/{{simulator}}.config.resolved.yaml",
    params:
        path=lambda w: emulated_dir(w.run, w.seed),
        emulated=True,
        overrides=lambda w: job_overrides("experiment/replay", [f"simulator={w.simulator}"]),
    log:
        f"{R}/logs/replay/emulated/{{run}}/seed{{seed}}/{{simulator}}.log",
    benchmark:
        f"{R}/benchmarks/replay/emulated/{{run}}/seed{{seed}}/{{simulator}}.tsv"
    threads: 1
    resources:
        mem_mb=lambda w: 1000 + 40 * pc.parse_run(w.run).pp * 16,
        runtime=30,
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
