# Transfer on real traces (issue 12): each step's graph replayed with a neighbouring step's durations,
# against "same as step k", the kernel-time ratio and the dPRO-style transfer. One job per trace.


def transfer_traces():
    """name -> path of every trace in the transfer table: `transfer.real` names from real_traces, and the
    H200 recordings whose directory name ends with `transfer.h200_suffix`."""
    t = config.get("transfer") or {}
    out = {n: config["real_traces"][n] for n in t.get("real", [])}
    suffix = t.get("h200_suffix")
    if suffix:
        out.update({n: p for n, p in config.get("h200_traces", {}).items() if n.endswith(suffix)})
    return out


rule transfer_real:
    input:
        lambda w: trace_files(w.trace),
    output:
        csv=f"{R}/transfer/{{trace}}.csv",
    params:
        path=lambda w: transfer_traces()[w.trace],
    log:
        f"{R}/logs/transfer/{{trace}}.log",
    benchmark:
        f"{R}/benchmarks/transfer/{{trace}}.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=10,
    script:
        "../scripts/transfer.py"


rule table_transfer_real:
    input:
        [f"{R}/transfer/{t}.csv" for t in transfer_traces()],
    output:
        csv=f"{R}/tables/transfer_real.csv",
        md=f"{R}/tables/transfer_real.md",
    log:
        f"{R}/logs/table/transfer_real.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/table_transfer.py"
