# Transfer on real traces (is the graph right under changed durations?): each step's graph replayed
# with a neighbouring step's durations, against "same as step k", the kernel-time ratio and the
# dPRO-style transfer. One job for the real traces,
# one for the H200 recordings (start-up paid once per batch); one CSV per trace.


def transfer_traces():
    """name -> path of every trace in the transfer table: `transfer.real` names from real_traces, and the
    H200 recordings whose directory name ends with `transfer.h200_suffix`."""
    t = config.get("transfer") or {}
    out = {n: config["real_traces"][n] for n in t.get("real", [])}
    suffix = t.get("h200_suffix")
    if suffix:
        out.update({n: p for n, p in config.get("h200_traces", {}).items() if n.endswith(suffix)})
    return out


def transfer_batches():
    """batch -> trace names: the shipped real traces, the H200 recordings."""
    names = list(transfer_traces())
    batches = {"real": [n for n in names if n not in config.get("h200_traces", {})],
               "h200": [n for n in names if n in config.get("h200_traces", {})]}
    return {b: n for b, n in batches.items() if n}


for _batch, _traces in transfer_batches().items():

    rule:
        name:
            "transfer_real" if _batch == "real" else f"transfer_{_batch}"
        input:
            sorted({f for t in _traces for f in trace_files(t)}),
        output:
            csv=[f"{R}/transfer/{t}.csv" for t in _traces],
        params:
            traces=list(_traces),
            path=[transfer_traces()[t] for t in _traces],
        log:
            f"{R}/logs/transfer/{_batch}.log",
        benchmark:
            f"{R}/benchmarks/transfer/{_batch}.tsv"
        threads: 1
        resources:
            mem_mb=3000,
            runtime=5 * len(_traces),
        script:
            "../scripts/transfer.py"


rule table_transfer_real:
    input:
        [f"{R}/transfer/{t}.csv" for t in transfer_traces()],
    output:
        csv=reported(f"{R}/tables/transfer_real.csv", "tables", "transfer_real"),
        md=f"{R}/tables/transfer_real.md",
    log:
        f"{R}/logs/table/transfer_real.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/table_transfer.py"
