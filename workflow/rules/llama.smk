# Llama-style what-ifs (table llama; emulated): every target predicted from an emulated Llama 3 8B base
# (grouped-query attention, SwiGLU, RMSNorm, RoPE: config/model/llama3_8b.yaml) against the emulated actual of
# its seed; PP, DP, TP, width, KV-head and layer-count changes (their model configs: config/model/llama3_8b_*).


def llama_jobs():
    """(group, target run, seed) of every prediction of the table."""
    cfg = config.get("llama") or {}
    return [(group, run, seed) for group, runs in (cfg.get("targets") or {}).items() for run in runs
            for seed in range(int(cfg.get("seeds", 1)))]


def llama_inputs():
    """(files, labels) of the table's long data."""
    base = config["llama"]["base"]
    files = [f"{R}/llama/{run}/seed{seed}.json" for _, run, seed in llama_jobs()]
    labels = [{"group": group, "label": run, "run": run, "seed": seed, "base_run": base}
              for group, run, seed in llama_jobs()]
    return files, labels


if llama_jobs():
    _llama_base = config["llama"]["base"]
    _llama_targets = list(dict.fromkeys(run for _, run, _ in llama_jobs()))

    rule predict_llama:
        input:
            base=f"{R}/emulated/{_llama_base}/seed{{seed}}/manifest.json",
            actual=[f"{R}/emulated/{run}/seed{{seed}}/manifest.json" for run in _llama_targets],
        output:
            json=[f"{R}/llama/{run}/seed{{seed}}.json" for run in _llama_targets],
        params:
            base=_llama_base,
            targets=_llama_targets,
            flags=[pc.predict_flags(pc.parse_run(_llama_base), pc.parse_run(run)) for run in _llama_targets],
        log:
            f"{R}/logs/llama/seed{{seed}}.log",
        benchmark:
            f"{R}/benchmarks/llama/seed{{seed}}.tsv"
        threads: 1
        resources:
            mem_mb=2000 + 100 * max(pc.parse_run(run).pp for run in _llama_targets),
            runtime=10 * len(_llama_targets),
        script:
            "../scripts/predict.py"
