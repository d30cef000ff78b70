# Mixture-of-experts what-ifs (table moe; emulated): EP, expert-count, top-k, expert-width and DP changes predicted
# from emulated Mixtral-style bases (seeds 0 ..) against the mean of each target's emulated runs, and the base
# configuration's routing interval (`lumos predict --samples`) against independent emulated runs
# (workflow/scripts/moe_check.py, lumos/report/moe_table.py).

MOE = config.get("moe") or {}

if MOE.get("targets"):

    rule moe_check:
        output:
            csv=f"{R}/moe/check.csv",
        params:
            base=MOE.get("base", []),
            targets=MOE.get("targets", {}),
            seeds=int(MOE.get("seeds", 1)),
            base_seeds=int(MOE.get("base_seeds", 1)),
            interval=MOE.get("interval", {}),
        log:
            f"{R}/logs/moe/check.log",
        benchmark:
            f"{R}/benchmarks/moe/check.tsv"
        threads: 1
        resources:
            mem_mb=3000,
            runtime=60,
        script:
            "../scripts/moe_check.py"

    rule table_moe:
        input:
            csv=f"{R}/moe/check.csv",
        output:
            csv=reported(f"{R}/tables/moe.csv", "tables", "moe"),
            md=f"{R}/tables/moe.md",
        log:
            f"{R}/logs/table/moe.log",
        threads: 1
        resources:
            mem_mb=1000,
            runtime=10,
        script:
            "../scripts/table_moe.py"
