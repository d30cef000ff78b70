"""The README's headline table: one row per claim, every number computed from a named column.

A newcomer should read in one screen what the tool claims, against whom, and what each claim
rests on (measured on hardware, measured on this machine, or emulated). Every number in that
table is computed here, by the function of its claim, from the files the last
`snakemake --cores 8` wrote:

- `results/tables/*.csv` (each function's docstring names its file and columns);
- the pipeline's own job timings, `results/default/benchmarks/replay/{group}/{simulator}.tsv`
  (Snakemake's `benchmark:` files, column `s`: wall seconds of the whole job);
- the paper's published errors, which table `endtoend` reads too,
  `resources/measurements/lumos_fig7/paper_prediction_errors.csv`;

and from the one cited constant below (`VTRAIN_OWN_MAE_PCT`) that no file holds. A claim whose
file is missing renders as a row that names the file, so a partial pipeline run still writes a
page. `fig7_comparison` is the per-configuration view of the scale-out claim beside the paper's
errors, for docs/results.md.

Example (the pipeline's tables must exist):

>>> from pathlib import Path
>>> print(headline_table(Sources(Path("results/tables"))))   # doctest: +SKIP
| claim | ours | paper / peers, same experiment | rests on | table |
|---|---|---|---|---|
| Replay of real traces (unchanged iteration) | \\|error\\| at most 0.00% on 33 ranks of 26 traces, ...
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from .tables import STEPS_POOLED

__all__ = ["Sources", "Claim", "MissingTable", "CLAIMS", "claims", "headline_table", "fig7_comparison",
           "VTRAIN_OWN_MAE_PCT", "HOST_BOUND_TARGETS"]

# vTrain's own simulator, mean |error| on its single-node A100 runs (the rows of our data set
# vtrain_single), as vTrain's repository reports it: resources/measurements/vtrain_a100/PROVENANCE.md.
VTRAIN_OWN_MAE_PCT = 8.37
# The paper's overall mean, read from the row of this group in the paper's errors file (column
# abs_error_mean_pct). The file's `what` says the abstract states it as the average REPLAY error
# ("across different models and configurations"); its PROVENANCE.md quotes it for the nine predictions.
PAPER_MEAN_GROUP = "all nine"
# H200 what-if targets bound by the host, not the GPU: the base recording's host time decides them,
# and this machine's host time moved between recordings (docs/results.md, "Measured on hardware:
# one H200"). Their error is shown beside the mean, not in it.
HOST_BOUND_TARGETS = ("mbs_2",)
SCALEOUT_GROUPS = ("DP", "PP", "DP+PP")   # the paper's nine Fig. 7 targets, as groups of table scaleout
NO_TP = "- (the paper's predictor does not change TP)"
NO_SHARDED = "- (none of Lumos, dPRO, vTrain, SimAI predicts sharded DP from a trace)"


@dataclass(frozen=True)
class Sources:
    """Where the numbers come from: the pipeline's tables, its job timings, the paper's errors."""

    tables: Path = Path("results/tables")
    benchmarks: Path = Path("results/default/benchmarks")
    paper_errors: Path = Path("resources/measurements/lumos_fig7/paper_prediction_errors.csv")
    startup: Path = Path("benchmarks/startup_vs_hta.csv")
    scale: Path = Path("benchmarks/scale_405b.csv")
    ranks: Path = Path("benchmarks/replay_ranks.csv")


class MissingTable(FileNotFoundError):
    """A file a claim is computed from does not exist (yet)."""


@dataclass(frozen=True)
class Claim:
    """One row of the headline table: the claim, our number, the paper's or a peer's on the same
    experiment ("-" where none is published), what it rests on, and the csv stems it comes from."""

    claim: str
    ours: str
    theirs: str
    rests_on: str
    tables: tuple[str, ...]

    def cells(self) -> list[str]:
        return [self.claim, self.ours, self.theirs, self.rests_on, ", ".join(f"`{t}`" for t in self.tables)]


def pct(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}%"


def signed(x: float) -> str:
    return f"{x:+.2f}%"


ABS_ERROR = "mean \\|error\\|"   # a Markdown table cell cannot hold a bare |


def _read(path: Path, **kw) -> pd.DataFrame:
    if not path.exists():
        raise MissingTable(str(path))
    return pd.read_csv(path, **kw)


def _seeds(n: pd.Series) -> str:
    lo, hi = int(n.min()), int(n.max())
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


# ---- the claims, in the table's order; each returns (ours, theirs, rests on, tables) ----------

Cells = tuple[str, str, str, tuple[str, ...]]


def replay(src: Sources) -> Cells:
    """replay_real.csv + replay_h200.csv: error_pct (Lumos), violations, trace, dpro_error_pct; the
    paper's average: the paper's errors file, row PAPER_MEAN_GROUP, column abs_error_mean_pct."""
    df = pd.concat([_read(src.tables / "replay_real.csv"), _read(src.tables / "replay_h200.csv")],
                   ignore_index=True)
    err, dpro = df["error_pct"].abs(), df["dpro_error_pct"].abs()
    theirs = f"dPRO-style, same ranks: {ABS_ERROR} {pct(dpro.mean())}, worst {pct(dpro.max())}"
    paper = _paper_mean(src.paper_errors)
    if paper is not None:
        theirs += f"; the paper, on its own traces: {paper:g}% average (its abstract)"
    ours = (f"\\|error\\| at most {pct(err.max())} on {len(df)} ranks of {df['trace'].nunique()} traces, "
            f"{int(df['violations'].sum())} timeline violations")
    return ours, theirs, "measured on hardware (published traces, our H200)", ("replay_real", "replay_h200")


def transfer(src: Sources) -> Cells:
    """transfer_real.csv, the row "summary" / trace "all": predictions and, per method (lumos, dpro,
    same_as_k, kernel_ratio), {method}_mean_abs_pct and {method}_median_abs_pct."""
    df = _read(src.tables / "transfer_real.csv")
    s = df[(df["row"] == "summary") & (df["trace"] == "all")].iloc[0]

    def both(method: str) -> str:
        return f"{pct(s[f'{method}_mean_abs_pct'])} (median {pct(s[f'{method}_median_abs_pct'])})"

    return (f"{ABS_ERROR} {both('lumos')} over {int(s['predictions'])} predictions",
            f"same predictions: dPRO-style {both('dpro')}; \"nothing changes\" {both('same_as_k')}; "
            f"kernel-time scaling {both('kernel_ratio')}",
            "measured on hardware (published traces, our H200)", ("transfer_real",))


PARTS = ("exposed_compute", "overlapped", "exposed_comm", "other")


def worst_part(df: pd.DataFrame, label: str, predicted: str = "predicted_{}_ms_mean",
               actual: str = "actual_{}_ms_mean", iteration: str = "actual_iteration_ms_mean") -> str:
    """The largest miss of one part of the breakdown, in points of the iteration (|predicted part -
    actual part| / actual iteration x 100) over the rows of `df`, with its row (`label`) and part."""
    best = (-1.0, "", "")
    for part in PARTS:
        pts = 100.0 * (df[predicted.format(part)] - df[actual.format(part)]).abs() / df[iteration]
        k = int(pts.to_numpy().argmax())
        if pts.iloc[k] > best[0]:
            best = (float(pts.iloc[k]), str(df[label].iloc[k]), part.replace("_", " "))
    return f"every part within {best[0]:.1f} points of the iteration (worst: {best[1]}, {best[2]})"


def scaleout(src: Sources) -> Cells:
    """scaleout.csv, groups DP, PP and DP+PP: abs_error_pct_mean (per layout, mean over seeds), n
    (seeds), predicted_{part}_ms_mean and actual_{part}_ms_mean against actual_iteration_ms_mean
    (`worst_part`); the paper's errors on the same nine layouts: the paper's errors file."""
    df = _read(src.tables / "scaleout.csv")
    nine = df[df["group"].isin(SCALEOUT_GROUPS)]
    e = nine["abs_error_pct_mean"]
    errors = _paper(src.paper_errors)
    theirs = "the paper: " + ", ".join(f"{e.group} {_paper_range(e)}" for e in errors) if errors else "-"
    return (f"{ABS_ERROR} {pct(e.mean())} over {len(nine)} layouts ({_seeds(nine['n'])} seeds each), "
            f"worst layout {pct(e.max())}; {worst_part(nine, 'label')}", theirs,
            "emulated (the paper's: measured H100 runs)", ("scaleout",))


def tensor_parallel(src: Sources) -> Cells:
    """scaleout.csv, group TP: abs_error_pct_mean per layout, n (seeds), the parts as in `scaleout`."""
    df = _read(src.tables / "scaleout.csv")
    tp = df[df["group"] == "TP"]
    e = tp["abs_error_pct_mean"]
    return (f"{ABS_ERROR} {pct(e.mean())} over {len(tp)} layouts ({_seeds(tp['n'])} seeds each), "
            f"worst layout {pct(e.max())}; {worst_part(tp, 'label')}", NO_TP, "emulated", ("scaleout",))


def sharded(src: Sources) -> Cells:
    """sharded_dp.csv: abs_error_pct_mean and component_l1_pct_mean per target (mean over seeds), group
    (`DP (FSDP)`: what changes, then the emulator's mode; `strategy (FSDP -> SHARD_GRAD_OP)`: a strategy
    change, from the base's mode to the target's), label, n (seeds)."""
    df = _read(src.tables / "sharded_dp.csv")
    parts = []
    for mode, rows in df.groupby(df["group"].str.extract(r"\((.*)\)$", expand=False), sort=False):
        each = ", ".join(f"{r.group.split(' (')[0]} {r.label} {pct(r.abs_error_pct_mean, 1)}" for r in rows.itertuples())
        parts.append(f"{mode}: {ABS_ERROR} {pct(rows['abs_error_pct_mean'].mean())} over {len(rows)} layouts ({each})")
    return (f"{'; '.join(parts)}; component L1 {pct(df['component_l1_pct_mean'].mean(), 1)}; {_seeds(df['n'])} "
            "seeds each", NO_SHARDED, "emulated", ("sharded_dp",))


def from_one_gpu(src: Sources) -> Cells:
    """from_one_gpu.csv: abs_error_pct_mean per target and group (the base: single GPU, single host,
    multi-stage), n (seeds), the parts of the small bases' rows as in `scaleout`."""
    df = _read(src.tables / "from_one_gpu.csv")
    parts = []
    for group, rows in df.groupby("group", sort=False):
        parts.append(f"{group}: {ABS_ERROR} {pct(rows['abs_error_pct_mean'].mean())} over {len(rows)} layouts, worst "
                     f"{pct(rows['abs_error_pct_mean'].max())}")
    small = df[~df["group"].str.startswith("multi-stage")]
    return (f"{'; '.join(parts)} ({_seeds(df['n'])} seeds each); from the small bases "
            f"{worst_part(small, 'label')}", "- (the paper predicts from a base that ran at a distributed layout)",
            "emulated", ("from_one_gpu",))


def llama(src: Sources) -> Cells:
    """llama.csv: abs_error_pct_mean per target (mean over seeds), group, n (seeds), parts as in `scaleout`."""
    df = _read(src.tables / "llama.csv")
    each = ", ".join(f"{r.group} {pct(r.abs_error_pct_mean, 1)}" for r in df.itertuples())
    return (f"{ABS_ERROR} {pct(df['abs_error_pct_mean'].mean())} over {len(df)} targets ({each}; "
            f"{_seeds(df['n'])} seeds each); {worst_part(df, 'group')}",
            "- (none of Lumos, dPRO, vTrain predicts a KV-head or SwiGLU width change from a trace)", "emulated",
            ("llama",))


def schedules(src: Sources) -> Cells:
    """schedules.csv: abs_error_pct_mean per target (mean over seeds), group (what changes, then `(from BASE)`),
    label (the target run), n (seeds), parts as in `scaleout`."""
    df = _read(src.tables / "schedules.csv")
    each = ", ".join(f"{r.group.split(' (from')[0]} {r.label.split('-', 1)[-1]} {pct(r.abs_error_pct_mean, 1)}"
                     for r in df.itertuples())
    return (f"{ABS_ERROR} {pct(df['abs_error_pct_mean'].mean())} over {len(df)} targets ({each}; "
            f"{_seeds(df['n'])} seeds each); {worst_part(df, 'label')}",
            "- (the paper's predictor knows 1F1B without CP; none of dPRO, vTrain predicts a schedule or CP change from a trace)",
            "emulated", ("schedules",))


def moe(src: Sources) -> Cells:
    """moe.csv: abs_error_pct (per target, mean over the bases), bases, parts_max_pts; the row `all` (every
    prediction); the interval row (`covered_pct`, `runs`, predicted_ms as its [lo, hi])."""
    df = _read(src.tables / "moe.csv")
    rows = df[~df["target"].isin(["all"]) & ~df["target"].str.startswith("90% interval")]
    every = df[df["target"] == "all"].iloc[0]
    iv = df[df["target"].str.startswith("90% interval")]
    each = ", ".join(f"{r.target} {pct(r.abs_error_pct, 1)}" for r in rows.itertuples())
    cover = (f"; the 90% interval over routing draws covers {iv['covered_pct'].iloc[0]:.0f}% of "
             f"{int(iv['runs'].iloc[0])} independent runs" if len(iv) else "")
    return (f"{ABS_ERROR} {pct(every['abs_error_pct'])} against the mean of the emulated runs over {len(rows)} targets "
            f"from {int(every['bases'])} bases ({each}); every part within {every['parts_max_pts']:.1f} points of "
            f"the iteration{cover}",
            "- (SimAI, Charon and Phantora claim MoE; none predicts an EP, expert or top-k change from a trace of the "
            "user's own job)",
            "emulated", ("moe",))


def fsdp_cpu(src: Sources) -> Cells:
    """fsdp_cpu_whatif.csv, per target (in the table's order; the direction from its flags' --dp, the base's
    ranks from its name, whether N -> 1 was calibrated from calibration_pairs): error_pct
    per base and steps_from (own rows by base; STEPS_POOLED rows, one value where they agree) and
    spread_pct of the measured target (the same on every row of a target)."""
    df = _read(src.tables / "fsdp_cpu_whatif.csv")
    parts = []
    for target, rows in df.groupby("target", sort=False):
        own = rows[rows["steps_from"] != STEPS_POOLED]
        pooled = rows[rows["steps_from"] == STEPS_POOLED]
        dp = str(rows["flags"].iloc[0]).split()[-1]
        ranks = re.search(r"(\d+)rank", str(rows["base"].iloc[0]))
        calibrated = "calibration_pairs" in rows and rows["calibration_pairs"].iloc[0] > 0
        way = (f"{ranks.group(1) if ranks else 2} ranks -> 1"
               + (", the shared host's slowdown calibrated on other model sizes" if calibrated else "")
               if dp == "1" else f"1 -> {dp} ranks, calibrated on other model sizes")
        text = f"{target} ({way}) from {' / '.join(own['base'])}: {' / '.join(signed(e) for e in own['error_pct'])}"
        if len(pooled):
            text += f", all recordings' host work {' / '.join(dict.fromkeys(signed(e) for e in pooled['error_pct']))}"
        parts.append(text + f" (measured steps span {pct(rows['spread_pct'].iloc[0], 1)} of their mean)")
    return "; ".join(parts), NO_SHARDED, "measured on this machine (CPU captures)", ("fsdp_cpu_whatif",)


def h200(src: Sources) -> Cells:
    """h200_whatif.csv, rows of role "what-if": error_pct per base and target, predicted_{part}_ms and
    measured_{part}_ms against measured_iteration_ms (`worst_part`); HOST_BOUND_TARGETS
    apart (their signed error per base and, where the table has predicted_lo90_ms / predicted_hi90_ms,
    their 90% interval relative to measured_iteration_ms); rows whose steps_from is STEPS_POOLED in
    a clause of their own: mean and worst over every what-if per base, the host-bound targets' error,
    mean_in_90, the interval's width and spread_pct."""
    df = _read(src.tables / "h200_whatif.csv")
    every = df[df["role"] == "what-if"].assign(abs_error=lambda d: d["error_pct"].abs())
    pooled = every[every["steps_from"] == STEPS_POOLED] if "steps_from" in every else every.iloc[:0]
    w = every.drop(pooled.index)
    host = w["target"].isin(HOST_BOUND_TARGETS)
    bases = sorted(w["base"].unique())
    gpu = w[~host].groupby("base")["abs_error"]
    parts = worst_part(w[~host].assign(where=w["target"] + " from " + w["base"]), "where",
                       predicted="predicted_{}_ms", actual="measured_{}_ms", iteration="measured_iteration_ms")
    ours = (f"from {' / '.join(bases)}: {ABS_ERROR} {' / '.join(pct(gpu.mean()[b]) for b in bases)} over "
            f"{w[~host]['target'].nunique()} what-ifs, worst {' / '.join(pct(gpu.max()[b]) for b in bases)}; "
            f"{parts}")
    for target in sorted(w[host]["target"].unique()):
        rows = w[w["target"] == target].set_index("base")
        ours += f"; host-bound {target}: {' / '.join(signed(rows['error_pct'][b]) for b in bases)}"
        if {"predicted_lo90_ms", "predicted_hi90_ms"} <= set(rows.columns):
            m = rows["measured_iteration_ms"]
            lo, hi = (100.0 * (rows[c] - m) / m for c in ("predicted_lo90_ms", "predicted_hi90_ms"))
            ours += (" (90% interval " + " / ".join(f"{signed(lo[b])} to {signed(hi[b])}" for b in bases)
                     + " of the measured mean)")
    if len(pooled):
        every_base = "both" if pooled["base"].nunique() == 2 else f"all {pooled['base'].nunique()}"
        by = pooled.groupby("base")["abs_error"]
        ours += (f"; with the profiled steps of {every_base} base recordings (`--other-recordings`: host work and "
                 f"kernels): {ABS_ERROR} {' / '.join(pct(by.mean()[b]) for b in bases)} over all "
                 f"{pooled['target'].nunique()} what-ifs, worst {' / '.join(pct(by.max()[b]) for b in bases)}")
        for target in sorted(pooled[pooled["target"].isin(HOST_BOUND_TARGETS)]["target"].unique()):
            rows = pooled[pooled["target"] == target].set_index("base")
            m = rows["measured_iteration_ms"]
            ours += f"; {target} " + " / ".join(signed(rows["error_pct"][b]) for b in rows.index)
            if {"predicted_lo90_ms", "predicted_hi90_ms"} <= set(rows.columns):
                ours += (", measured mean inside the 90% interval from "
                         + f"{int(rows['mean_in_90'].sum())} of {len(rows)} (width "
                         + " / ".join(pct(100.0 * (rows['predicted_hi90_ms'][b] - rows['predicted_lo90_ms'][b])
                                          / m[b]) for b in rows.index)
                         + f" of it; the measured spread {pct(rows['spread_pct'].iloc[0])})")
    return (ours, "- (no published predictor on these runs)", "measured on hardware (one H200, our recordings)",
            ("h200_whatif",))


def realism(src: Sources) -> Cells:
    """emulator_realism.csv, rows "summary": dataset, n, mean_abs_error_pct."""
    df = _read(src.tables / "emulator_realism.csv")
    s = df[df["row"] == "summary"]
    per = ", ".join(f"{r['dataset']} {pct(r['mean_abs_error_pct'], 1)} ({int(r['n'])})" for _, r in s.iterrows())
    return (f"{ABS_ERROR} of the iteration, data set (n): {per}",
            f"vTrain's own simulator on vTrain's single-node runs: {VTRAIN_OWN_MAE_PCT:g}%",
            "emulated vs measured (published)", ("emulator_realism",))


def endtoend(src: Sources) -> Cells:
    """endtoend.csv: rows "summary" (dataset, n, abs_error_pct_mean, throughput_spearman and
    throughput_layouts where ranked; the "all" row's worst_abs_error_pct); rows "target": peer and peer_error (the peer's published errors as the
    table carries them); rests_on, without its parenthesis."""
    df = _read(src.tables / "endtoend.csv")
    s = df[df["row"] == "summary"]
    ours = f"{ABS_ERROR} " + ", ".join(f"{r['dataset']} {pct(r['abs_error_pct_mean'])} ({int(r['n'])} layouts)"
                                       for _, r in s.iterrows() if r["dataset"] != "all")
    every = s[s["dataset"] == "all"]
    if len(every):
        ours += f"; worst {pct(every['worst_abs_error_pct'].iloc[0])}"
    if "throughput_spearman" in s:
        ranked = s[s["throughput_spearman"].notna()]
        if len(ranked):
            ours += ("; layouts in the measured order of per-GPU throughput, Spearman: "
                     + ", ".join(f"{r['dataset']} {r['throughput_spearman']:.2f} ({int(r['throughput_layouts'])} layouts)"
                                 for _, r in ranked.iterrows()))
    t = df[(df["row"] == "target") & (df["peer"] != "-")]
    theirs = "; ".join(f"{peer}: " + ", ".join(dict.fromkeys(g["peer_error"]))
                       for peer, g in t.groupby("peer", sort=False)) or "-"
    rests = ", ".join(dict.fromkeys(df["rests_on"].str.replace(r"\s*\(.*\)$", "", regex=True)))
    return ours, theirs, rests, ("endtoend",)


def coverage(src: Sources) -> Cells:
    """coverage.csv: coverage90_pct of the rows "all: replay" and "all: all predictions", seeds, and
    the number of predictions (rows not pooled, group other than replay); intervals_real.csv:
    other_steps x inside90_pct / 100, summed; h200_whatif.csv: measured_in_90_pct of the
    what-ifs, only when that column exists."""
    df = _read(src.tables / "coverage.csv")
    pooled = df["experiment"].str.startswith("all: ")
    base = df[df["experiment"] == "all: replay"].iloc[0]
    preds = df[df["experiment"] == "all: all predictions"].iloc[0]
    n_preds = int(((df["group"] != "replay") & ~pooled).sum())
    ours = (f"90% interval holds {pct(base['coverage90_pct'], 1)} of {int(df['seeds'].iloc[0])} other seeds "
            f"(base replay), {pct(preds['coverage90_pct'], 1)} over {n_preds} predictions")
    used, rests = ["coverage"], "emulated"
    if (src.tables / "intervals_real.csv").exists():
        r = pd.read_csv(src.tables / "intervals_real.csv")
        r = r[r["other_steps"] > 0]
        inside = (r["other_steps"] * r["inside90_pct"] / 100.0).sum()
        ours += f"; real traces: {inside:.0f} of {int(r['other_steps'].sum())} other profiled steps inside"
        used.append("intervals_real")
        rests += "; real traces: measured on hardware"
    if (src.tables / "h200_whatif.csv").exists():
        h = pd.read_csv(src.tables / "h200_whatif.csv")
        h = h[h["steps_from"] != STEPS_POOLED] if "steps_from" in h else h
        inside = (h[h["role"] == "what-if"]["measured_in_90_pct"].dropna()
                  if "measured_in_90_pct" in h.columns else pd.Series(dtype=float))
        if len(inside):
            ours += f"; H200 what-ifs: {pct(inside.mean(), 1)} of measured iterations inside"
            used.append("h200_whatif")
            rests += " (and the H200)"
    return ours, "- (the paper gives point predictions)", rests, tuple(used)


def speed(src: Sources) -> Cells:
    """replay_real.csv, replay_h200.csv: trace, tasks (per rank); the replay jobs' wall seconds:
    benchmarks/replay/{real,h200}/{lumos,dpro}.tsv, column s (one job replays the whole group, in one
    process: start-up, imports, Hydra config, reading, building, replaying, writing)."""
    ours, theirs = [], []
    for group, table, label in (("real", "replay_real", "real"), ("h200", "replay_h200", "H200")):
        df = _read(src.tables / f"{table}.csv")
        wall = {sim: float(_read(src.benchmarks / "replay" / group / f"{sim}.tsv", sep="\t")["s"].iloc[-1])
                for sim in ("lumos", "dpro")}
        ours.append(f"{df['trace'].nunique()} {label} traces ({int(df['tasks'].sum()):,} tasks) in {wall['lumos']:.2f} s")
        theirs.append(f"{wall['dpro']:.2f} s")
    return ("; ".join(ours), "dPRO-style, same traces: " + " / ".join(theirs),
            "measured on this machine (2 CPU cores, beside other pipeline jobs)",
            ("replay_real", "replay_h200", str(src.benchmarks / "replay")))


def scale(src: Sources) -> Cells:
    """benchmarks/scale_405b.csv (`python benchmarks/bench_scale_405b.py --csv FILE`, committed: the pipeline
    does not run it): what, wall_s, target_s, result, one row per whole process; cpus."""
    df = _read(src.scale)
    ours = "; ".join(f"{r.what} {r.wall_s:.1f} s" + (f" (target {r.target_s:g} s)" if r.target_s == r.target_s else "")
                     + f": {r.result}" for r in df.itertuples())
    return (ours, "- (no peer emulates or predicts 16,384 GPUs from a trace)",
            f"emulated, timed on this machine ({int(df['cpus'].iloc[0])} CPU cores, whole processes)", (str(src.scale),))


def ranks(src: Sources) -> Cells:
    """benchmarks/replay_ranks.csv (`python benchmarks/bench_ranks.py --csv FILE`, committed): ranks, trace_mb_gz,
    replay_s, peak_mb (MiB: the maximum resident set), replay_s_per_rank, one row per run (every rank written), cpus."""
    df = _read(src.ranks)
    ours = ", ".join(f"{int(r.ranks):,} ranks ({r.trace_mb_gz:.0f} MB gzipped) {r.replay_s:.1f} s, {r.peak_mb:,.0f} MiB peak"
                     for r in df.itertuples())
    per = df["replay_s_per_rank"]
    return (f"`lumos replay` of every rank's trace: {ours}; {per.min():.3f}-{per.max():.3f} s per rank (time grows "
            "linearly; memory stays about one rank's: the ranks are streamed, each read, replayed and dropped "
            "before the next)",
            "- (HTA users report 950 GB of RAM for 200 GB of traces; none measured at 1,024 ranks)",
            f"emulated, timed on this machine ({int(df['cpus'].iloc[0])} CPU cores, whole processes)", (str(src.ranks),))


def _trace_name(path: str) -> str:
    """`hta/trace_diff__control__control.json.gz` -> trace_diff; `gpt3_175b_8x4x8/rank0.json.gz` ->
    gpt3_175b_8x4x8 rank0."""
    parts = path.split("/")
    stem = parts[-1].split("__")[0].split(".")[0]
    return f"{parts[-2]} {stem}" if stem.startswith("rank") and len(parts) > 1 else stem


def startup(src: Sources) -> Cells:
    """benchmarks/startup_vs_hta.csv (`python benchmarks/bench_startup.py --csv FILE`, committed: HTA is
    not a dependency, so the pipeline cannot time it): command, trace, mb_json, emulated, lumos_s,
    reference, reference_s (HTA 0.5.0's load + critical path, or the floor process), medians of whole
    processes interleaved in one run, every process started by the benchmark environment's python;
    cpus, load_average."""
    df = _read(src.startup)
    rep = df[df["command"] == "replay"]
    hta = ["fails" if math.isnan(r) else f"{r:.2f} s ({x:.1f}x)"
           for r, x in zip(rep["reference_s"], rep["reference_over_lumos"])]
    ours = ", ".join(f"{_trace_name(t)} ({mb:.0f} MB{', EMULATED' if e else ''}) {s:.2f} s"
                     for t, mb, e, s in zip(rep["trace"], rep["mb_json"], rep["emulated"], rep["lumos_s"]))
    pred = df[df["command"] != "replay"]
    if len(pred):
        p = pred.iloc[-1]
        ours += (f"; `lumos predict` {p['command'].removeprefix('predict ')} {p['lumos_s']:.2f} s, "
                 f"{p['lumos_s'] / p['reference_s']:.2f}x its floor (start Python, import numpy and numba, read the base)")
    return (f"`lumos replay` {ours}", "HTA 0.5.0, load + critical path, same run: " + " / ".join(hta),
            f"measured on this machine ({int(df['cpus'].iloc[0])} CPU cores, medians of whole processes, "
            "lumos and HTA installed in one environment)",
            (str(src.startup),))


CLAIMS: tuple[tuple[str, Callable[[Sources], Cells], str], ...] = (
    # (claim, its function, the table named when its file is missing)
    ("Replay of real traces (unchanged iteration)", replay, "replay_real"),
    ("Transfer on real traces (step k's graph, step k+1's durations)", transfer, "transfer_real"),
    ("The nine scale-out targets (Fig. 7) from 15B 2x2x4", scaleout, "scaleout"),
    ("TP changes from 15B 2x2x4", tensor_parallel, "scaleout"),
    ("Sharded DP (FSDP2 FULL_SHARD and SHARD_GRAD_OP, distributed optimizer) from 15B 2x2x4", sharded, "sharded_dp"),
    ("From one GPU or one host to the nine scale-out and three TP targets (15B)", from_one_gpu, "from_one_gpu"),
    ("Llama-style what-ifs (GQA, SwiGLU) from Llama 3 8B 2x2x4", llama, "llama"),
    ("Pipeline schedules (interleaved 1F1B) and context parallelism from Llama 3 8B (2x8x4v2, 2x8x4, 2x2x2c2, 2x2x2, "
     "torchtitan 2x1x4)", schedules, "schedules"),
    ("Mixture-of-experts what-ifs (EP, experts, top-k, expert width, capacity, DP) from Mixtral-style bases",
     moe, "moe"),
    ("FSDP2 and DDP over gloo, real CPU captures (1, 2 and 4 ranks)", fsdp_cpu, "fsdp_cpu_whatif"),
    ("H200 what-ifs (layers, width, micro-batch size and count)", h200, "h200_whatif"),
    ("Emulator realism, per published data set", realism, "emulator_realism"),
    ("Prediction vs hardware (published runs)", endtoend, "endtoend"),
    ("Prediction intervals: do they hold?", coverage, "coverage"),
    ("Speed: the pipeline's replay job, whole process", speed, "replay_real"),
    ("Start-up against HTA: one trace, whole process", startup, "benchmarks/startup_vs_hta.csv"),
    ("Scale: Llama 3 405B on 16,384 GPUs (TP 8, PP 16 interleaved, DP 128), whole processes", scale,
     "benchmarks/scale_405b.csv"),
    ("Ranks: GPT-3 15B at 64, 256 and 1,024 ranks, every rank's trace replayed, whole processes", ranks,
     "benchmarks/replay_ranks.csv"),
)


def claims(src: Sources) -> list[Claim]:
    """Every claim in order; one whose file is missing says which."""
    out = []
    for name, fn, table in CLAIMS:
        try:
            out.append(Claim(name, *fn(src)))
        except MissingTable as e:
            out.append(Claim(name, f"(not computed: {e} is missing)", "-", "-", (table,)))
    return out


HEADER = ("claim", "ours", "paper / peers, same experiment", "rests on", "table")


def headline_table(src: Sources) -> str:
    """The headline table as Markdown, one row per claim."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(c.cells()) + " |" for c in claims(src)]
    return "\n".join(lines) + "\n"


# ---- the paper's own errors -----------------------------------------------------------------

def _paper(path: Path) -> tuple:
    from .endtoend import read_peer_errors

    return read_peer_errors(path) if path.exists() else ()


def _paper_mean(path: Path) -> float | None:
    e = next((e for e in _paper(path) if e.group == PAPER_MEAN_GROUP), None)
    return None if e is None or not math.isfinite(e.abs_error_mean_pct) else e.abs_error_mean_pct


def _paper_range(e) -> str:
    """`0.62-2.98%`, `up to 7.76%`, `3.3% mean`: what the paper published for a group (PeerError.text
    without the group and the layout count)."""
    return e.text().split(": ", 1)[1].rsplit(" (", 1)[0]


def fig7_comparison(src: Sources) -> str:
    """Per group of scaleout.csv (and variants.csv): our mean |error| per configuration (column
    abs_error_pct_mean; n seeds), beside the paper's published error for that group."""
    df = _read(src.tables / "scaleout.csv")
    paper = {e.group: _paper_range(e) for e in _paper(src.paper_errors)}
    rows = []
    for group in dict.fromkeys(df["group"]):
        g = df[df["group"] == group]
        rows.append((f"{group} ({_seeds(g['n'])} seeds each)",
                     ", ".join(f"{r['label']} {pct(r['abs_error_pct_mean'])}" for _, r in g.iterrows()),
                     paper.get(group, NO_TP if group == "TP" else "-")))
        if group == SCALEOUT_GROUPS[-1]:
            nine = df[df["group"].isin(SCALEOUT_GROUPS)]["abs_error_pct_mean"]
            rows.append((PAPER_MEAN_GROUP, f"{pct(nine.mean())} mean, worst configuration {pct(nine.max())}",
                         paper.get(PAPER_MEAN_GROUP, "-")))
    if (src.tables / "variants.csv").exists():
        v = pd.read_csv(src.tables / "variants.csv")
        rows.append((f"V1-V4 (table `variants`, {_seeds(v['n'])} seeds each)",
                     ", ".join(f"{r['label']} {pct(r['abs_error_pct_mean'])}" for _, r in v.iterrows()), "-"))
    head = ("group", f"ours: {ABS_ERROR} per configuration (emulated)", "paper (measured H100 runs)")
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"
