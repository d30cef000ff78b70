# Does `lumos search` rank layouts the way the cluster would? (table search; emulated) The base run
# (seed 0) searched for `gpus` GPUs at `global_batch`; its `top` fitting layouts emulated over `seeds`
# seeds with the same micro-batch size and count, and the two rankings compared (Spearman).

SEARCH = config.get("search") or {}


rule search_check:
    input:
        base=lambda w: f"{R}/emulated/{SEARCH['base']}/seed0/manifest.json",
        config=lambda w: hydra_inputs("emulate", pc.parse_run(SEARCH["base"]).emulate_overrides()),
    output:
        csv=f"{R}/search/check.csv",
    params:
        base=lambda w: SEARCH["base"],
        overrides=lambda w: job_overrides("emulate", [f"model={pc.parse_run(SEARCH['base']).model}"]),
        gpus=lambda w: int(SEARCH["gpus"]),
        global_batch=lambda w: SEARCH.get("global_batch"),
        micro_batch=lambda w: [int(m) for m in SEARCH.get("micro_batch", [1])],
        top=lambda w: int(SEARCH.get("top", 5)),
        seeds=lambda w: list(range(int(SEARCH.get("seeds", 1)))),
    log:
        f"{R}/logs/search/check.log",
    benchmark:
        f"{R}/benchmarks/search/check.tsv"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    script:
        "../scripts/search_check.py"


rule table_search:
    input:
        csv=f"{R}/search/check.csv",
    output:
        csv=reported(f"{R}/tables/search.csv", "tables", "search"),
        md=f"{R}/tables/search.md",
    log:
        f"{R}/logs/table/search.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/table_search.py"
