"""Paper-style figures of the pipeline (matplotlib, Agg): PNG + PDF, emulated ones labelled.

- `breakdown_figure`: four-part breakdown bars, measured vs Lumos vs dPRO-style (Fig. 1 analogue);
- `timeline_figure`: stream duty cycle per bin, measured vs replayed, and step k's graph with step k+1's
  durations vs step k+1 measured (Fig. 6 analogue);
- `prediction_figure`: stacked actual / predicted bars per configuration (Fig. 7 and Fig. 8 analogues);
- `ablation_figure`: iteration error per ablation variant with 95% CIs;
- `error_ci_figure`: mean |error| with 95% CIs beside the run-to-run spread (2 x CV);
- `realism_figure`: emulated vs measured iteration time of every published configuration (log-log);
- `endtoend_figure`: predicted from an emulated base vs measured on hardware, per target, beside the
  peer's own published error.
Each takes the pipeline's data/tables frames, so a figure can be redrawn from the CSVs alone.
"""

from __future__ import annotations

import io
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lumos.trace.atomic import write_bytes_atomic  # noqa: E402

from .tables import STEPS_POOLED  # noqa: E402

COMPONENT_PARTS = ("exposed_compute", "overlapped", "exposed_comm", "other")
COMPONENT_LABELS = {"exposed_compute": "exposed compute", "overlapped": "overlapped",
                    "exposed_comm": "exposed comm.", "other": "other"}
COLORS = {"exposed_compute": "#4C72B0", "overlapped": "#DD8452", "exposed_comm": "#C44E52", "other": "#9A9A9A"}
EMULATED_NOTE = "EMULATED cluster, not hardware measurements"


def save_figure(fig, png_path: str | os.PathLike, pdf_path: str | os.PathLike) -> None:
    """Write PNG and PDF atomically (a killed job never leaves half a figure)."""
    for path, fmt in ((png_path, "png"), (pdf_path, "pdf")):
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=150, bbox_inches="tight", metadata=_metadata(fmt))
        write_bytes_atomic(path, buf.getvalue())
    plt.close(fig)


def _metadata(fmt: str) -> dict:
    # Fixed metadata keeps PDFs byte-stable across runs.
    return {"CreationDate": None} if fmt == "pdf" else {"Software": "lumos"}


def _emulated_note(ax) -> None:
    """A red footnote in the figure's bottom-right corner (once per figure), clear of titles and legends."""
    fig = ax.figure
    if getattr(fig, "_lumos_emulated_note", False):
        return
    fig.text(0.995, 0.0, EMULATED_NOTE, ha="right", va="top", fontsize=7, color="#B22222")
    fig._lumos_emulated_note = True


# ---- Fig. 1 analogue ---------------------------------------------------------------------------

def breakdown_bars(data: pd.DataFrame, run: str) -> pd.DataFrame:
    """Mean breakdown (ms) over seeds of one emulated run: rows measured, Lumos, dPRO-style."""
    d = data[data["run"] == run]
    if d.empty:
        raise ValueError(f"no replay of emulated run {run!r} in the data")
    rows = {"measured (emulated)": {p: d[f"measured_{p}_ms"].mean() for p in COMPONENT_PARTS}}
    for sim, label in (("lumos", "Lumos replay"), ("dpro", "dPRO-style replay")):
        s = d[d["simulator"] == sim]
        if len(s):
            rows[label] = {p: s[f"replayed_{p}_ms"].mean() for p in COMPONENT_PARTS}
    return pd.DataFrame.from_dict(rows, orient="index")


def breakdown_figure(data: pd.DataFrame, run: str):
    bars = breakdown_bars(data, run)
    n_seeds = data[(data["run"] == run)]["seed"].nunique() if "seed" in data else 1
    fig, ax = plt.subplots(figsize=(8, 0.7 * len(bars) + 1.6))
    y = np.arange(len(bars))[::-1]
    left = np.zeros(len(bars))
    for part in COMPONENT_PARTS:
        vals = bars[part].to_numpy()
        ax.barh(y, vals, left=left, color=COLORS[part], label=COMPONENT_LABELS[part], height=0.6)
        for yi, l, v in zip(y, left, vals):
            if v > 0.06 * bars.sum(axis=1).max():
                ax.text(l + v / 2, yi, f"{v:.0f}", ha="center", va="center", fontsize=8, color="white")
        left += vals
    for yi, total in zip(y, left):
        ax.text(total, yi, f"  {total:.0f} ms", va="center", fontsize=8)
    ax.set_yticks(y, bars.index)
    ax.set_xlabel("iteration time (ms)")
    ax.set_xlim(0, left.max() * 1.18)
    ax.set_title(f"Iteration breakdown, {run} (emulated; mean of {n_seeds} seed(s)) - Fig. 1 analogue", fontsize=10)
    ax.legend(ncol=4, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.28), frameon=False)
    _emulated_note(ax)
    return fig


# ---- Fig. 6 analogue ---------------------------------------------------------------------------

def timeline_frame(path, step=None, drop=(), gap_threshold_us: float = 100.0, bin_us: float = 1000.0) -> pd.DataFrame:
    """Duty cycle per bin of the critical rank: measured vs Lumos replay vs the dPRO-style replay
    (bins from each one's own start)."""
    from lumos.analysis import duty_cycle
    from lumos.analysis.replay import replay_tables
    from lumos.baselines.dpro import build_dpro, replay_dpro
    from lumos.graph import ALL_EDGE_CLASSES, EdgeClass
    from lumos.graph.model import TaskKind
    from lumos.trace import load_run

    classes = frozenset(ALL_EDGE_CLASSES - {EdgeClass.parse(c) for c in drop})
    tables = load_run(path)
    run = replay_tables(tables, step=step, edge_classes=classes, gap_threshold_us=gap_threshold_us)
    r = run.critical
    g = r.graph
    gpu = g.kind == TaskKind.GPU
    measured = duty_cycle(g.ts, g.end, gpu, g.in_step, bin_us)
    replayed = duty_cycle(r.schedule.start, r.schedule.end, gpu, g.in_step, bin_us)
    d = build_dpro(next(t for t in tables if t.rank == r.rank), step=step)
    ds = replay_dpro(d)
    dpro = duty_cycle(ds.start, ds.end, np.ones(len(d), bool), d.in_step, bin_us)
    n = max(len(measured), len(replayed), len(dpro))
    pad = lambda a: np.concatenate([a, np.full(n - len(a), np.nan)])  # noqa: E731
    return pd.DataFrame({"rank": r.rank, "bin": np.arange(n), "t_ms": np.arange(n) * bin_us / 1e3,
                         "measured": pad(measured), "replayed": pad(replayed), "dpro": pad(dpro)})


def timeline_figure(frames: dict[str, pd.DataFrame]):
    """One panel per source (real / emulated), and the transfer panel of the real trace
    (`lumos.report.transfer_timeline`) under the key "transfer"."""
    fig, axes = plt.subplots(len(frames), 1, figsize=(9, 2.6 * len(frames)), squeeze=False)
    for ax, (kind, df) in zip(axes[:, 0], frames.items()):
        label = str(df["label"].iloc[0]) if "label" in df and len(df) else kind
        if kind == "transfer":
            _transfer_panel(ax, df, label if len(df) else _label_of(frames.get("real"), "the real trace"))
            continue
        emulated = kind == "emulated"
        ax.step(df["t_ms"], df["measured"], where="post", color="#333333", lw=1.2,
                label="measured (emulated)" if emulated else "measured")
        ax.step(df["t_ms"], df["replayed"], where="post", color="#2A9D8F", lw=1.0, ls="--", label="Lumos replay")
        if "dpro" in df:
            ax.step(df["t_ms"], df["dpro"], where="post", color="#E76F51", lw=1.0, ls=":",
                    label="dPRO-style replay")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("stream-active share")
        bins = df["bin"].max() + 1 if len(df) else 0
        m, p = np.nanmean(df["measured"]), np.nanmean(df["replayed"])
        dp = f", dPRO-style {np.nanmean(df['dpro']):.3f}" if "dpro" in df else ""
        ax.set_title(f"{label}{' (emulated)' if emulated else ' (real trace)'}, rank {int(df['rank'].iloc[0])}: "
                     f"mean duty cycle measured {m:.3f}, Lumos {p:.3f}{dp} over {bins} bins", fontsize=9)
        ax.legend(fontsize=8, loc="lower right")
        if emulated:
            _emulated_note(ax)
    axes[-1, 0].set_xlabel("time since iteration start (ms)")
    fig.suptitle("Replayed vs measured GPU activity per 1 ms bin - Fig. 6 analogue", fontsize=10)
    fig.tight_layout()
    return fig


TRANSFER_STYLE = {"measured": ("#333333", "-", 1.2), "lumos": ("#2A9D8F", "--", 1.0), "dpro": ("#E76F51", ":", 1.0)}


def _label_of(df: pd.DataFrame | None, default: str) -> str:
    return str(df["label"].iloc[0]) if df is not None and "label" in df and len(df) else default


def _transfer_panel(ax, df: pd.DataFrame, label: str) -> None:
    """Step k's graph with step k+1's durations (Lumos, dPRO-style) vs step k+1 measured; the legend
    gives each curve's iteration and error, so the panel reads without the transfer table."""
    if df.empty:   # a trace with one usable step has nothing to transfer
        ax.text(0.5, 0.5, f"{label}: fewer than two replayable steps, no transfer to draw",
                ha="center", va="center", fontsize=9, transform=ax.transAxes)
        ax.set_axis_off()
        return
    k, k1 = int(df["step"].iloc[0]), int(df["durations_from_step"].iloc[0])
    for curve, c in df.groupby("curve", sort=False):
        color, ls, lw = TRANSFER_STYLE.get(curve, ("#264653", "-.", 1.0))
        ms, err = float(c["iteration_ms"].iloc[0]), float(c["error_pct"].iloc[0])
        name = {"measured": f"step {k1} measured", "lumos": "Lumos transfer",
                "dpro": "dPRO-style transfer"}.get(curve, curve)
        ax.step(c["t_ms"], c["duty"], where="post", color=color, ls=ls, lw=lw,
                label=f"{name}: {ms:.2f} ms" + ("" if np.isnan(err) else f" ({err:+.2f}%)"))
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("stream-active share")
    ax.set_title(f"{label} (real trace, measured on hardware), rank {int(df['rank'].iloc[0])}: "
                 f"step {k}'s graph with step {k1}'s durations vs step {k1} measured", fontsize=9)
    ax.legend(fontsize=8, loc="best")   # three curves with deep dips: let matplotlib find the clear corner


# ---- What-ifs measured on hardware (H200) ------------------------------------------------------

def _h200_who(table: pd.DataFrame) -> pd.Series:
    """Each prediction's legend name: its base, and where the table says so whose profiled steps it used."""
    if "steps_from" not in table:
        return table["base"]
    return table["base"] + np.where(table["steps_from"] == STEPS_POOLED, ", steps of all bases", "")


def h200_whatif_figure(table: pd.DataFrame):
    """Per target: the measured iterations (mean, min-max) and the prediction from each base recording."""
    targets = list(dict.fromkeys(table["target"]))
    table = table.assign(who=_h200_who(table))
    bases = list(dict.fromkeys(table["who"]))
    x = np.arange(len(targets))
    first = table.drop_duplicates("target").set_index("target").loc[targets]
    mean = first["measured_iteration_ms"].to_numpy(float)
    lo = mean - first["measured_min_ms"].to_numpy(float)
    hi = first["measured_max_ms"].to_numpy(float) - mean
    fig, ax = plt.subplots(figsize=(max(7.0, 0.95 * len(targets) + 2), 4.2))
    ax.bar(x, mean, 0.55, color="#BBBBBB", label="measured (mean of 2 recordings x 3 steps)")
    ax.errorbar(x, mean, yerr=[lo, hi], fmt="none", ecolor="#333333", capsize=4, lw=1.0,
                label="measured min-max")
    markers = ("o", "s", "^", "D")
    for k, b in enumerate(bases):
        rows = table[table["who"] == b].set_index("target").loc[targets]
        off = (k - (len(bases) - 1) / 2) * 0.14
        ax.scatter(x + off, rows["predicted_iteration_ms"], marker=markers[k % 4], zorder=3, s=28,
                   color=("#2A9D8F", "#E76F51", "#264653", "#E9C46A")[k % 4], label=f"Lumos from {b}")
        for xi, top, (_, r) in zip(x + off, first["measured_max_ms"], rows.iterrows()):
            ax.text(xi, max(top, r["predicted_iteration_ms"]) * 1.03 + 3, f"{r['error_pct']:+.0f}%",
                    ha="center", va="bottom", fontsize=6, rotation=90)
    roles = first["role"] if "role" in first else [""] * len(targets)
    ax.set_xticks(x, [t + ("\n(clock calibration)" if r == "clock calibration" else "")
                      + ("" if f == "(none)" else "\n" + f.replace(" --", "\n--"))
                      for t, f, r in zip(targets, first["flags"], roles)], fontsize=7)
    ax.set_ylabel("iteration time (ms)")
    ax.set_ylim(0, float(np.nanmax(first["measured_max_ms"])) * 1.3)
    ax.set_title("What-if predictions from one H200 base trace vs measured on hardware (one H200, bundled "
                 "GPT, bf16); % = error vs the measured mean", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


# ---- Fig. 7 / Fig. 8 analogues -----------------------------------------------------------------

def prediction_figure(table: pd.DataFrame, title: str):
    """Per configuration, actual (A) and predicted (P) stacked bars; iteration error with 95% CI above."""
    n = len(table)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.15 * n + 2), 4.4))
    x = np.arange(n)
    w = 0.38
    for offset, who in ((-w / 2 - 0.01, "actual"), (w / 2 + 0.01, "predicted")):
        bottom = np.zeros(n)
        for part in COMPONENT_PARTS:
            vals = table[f"{who}_{part}_ms_mean"].to_numpy(dtype=float)
            ax.bar(x + offset, vals, w, bottom=bottom, color=COLORS[part],
                   label=COMPONENT_LABELS[part] if who == "actual" else None,
                   hatch="//" if who == "predicted" else None, edgecolor="white", linewidth=0.5)
            bottom += vals
        for xi, b in zip(x + offset, bottom):
            ax.text(xi, b, "A" if who == "actual" else "P", ha="center", va="bottom", fontsize=7)
    top = np.maximum(table["actual_iteration_ms_mean"], table["predicted_iteration_ms_mean"]).to_numpy(dtype=float)
    for xi, t, (_, r) in zip(x, top, table.iterrows()):
        ci = ""
        if np.isfinite(r.get("error_pct_lo", np.nan)):
            ci = f"\n[{r['error_pct_lo']:+.1f}, {r['error_pct_hi']:+.1f}]"
        ax.text(xi, t * 1.04, f"{r['error_pct_mean']:+.1f}%{ci}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, [f"{r['label']}\n{r['group']}" if r["group"] != "variant" else str(r["label"])
                      for _, r in table.iterrows()], fontsize=8)
    ax.set_ylabel("iteration time (ms)")
    ax.set_ylim(0, float(np.nanmax(top)) * 1.25)
    ax.set_title(f"{title} (emulated actuals; A = actual, P = predicted; error % with 95% CI)", fontsize=9)
    ax.legend(fontsize=8, ncol=4, loc="upper left")
    _emulated_note(ax)
    fig.tight_layout()
    return fig


# ---- ablation and error figures ----------------------------------------------------------------

def ablation_figure(table: pd.DataFrame):
    """Mean |iteration error| per ablation variant, one panel per domain (real / emulated), 95% CI bars."""
    domains = list(dict.fromkeys(table["source"]))
    fig, axes = plt.subplots(1, len(domains), figsize=(6.5 * len(domains), 4.2), squeeze=False)
    for ax, dom in zip(axes[0], domains):
        t = table[table["source"] == dom]
        y = np.arange(len(t))[::-1]
        mean = t["abs_iteration_error_pct_mean"].to_numpy(dtype=float)
        lo = np.nan_to_num(mean - t["abs_iteration_error_pct_lo"].to_numpy(dtype=float), nan=0.0)
        hi = np.nan_to_num(t["abs_iteration_error_pct_hi"].to_numpy(dtype=float) - mean, nan=0.0)
        colors = ["#2A9D8F" if str(v).startswith(("lumos", "full")) else
                  "#C44E52" if "dpro" in str(v) else "#4C72B0" for v in t["variant"]]
        ax.barh(y, mean, xerr=[np.clip(lo, 0, None), np.clip(hi, 0, None)], color=colors, capsize=2, height=0.7)
        for yi, m, nfail in zip(y, mean, t["failed"] if "failed" in t else np.zeros(len(t))):
            if not np.isfinite(m):
                ax.text(0, yi, " replay could not finish", va="center", fontsize=7, color="#B22222")
            elif nfail:
                ax.text(m, yi, f"  {int(nfail)} failed", va="center", fontsize=6, color="#B22222")
        ax.set_yticks(y, t["variant"], fontsize=7)
        ax.set_xlabel("mean |iteration error| (%)")
        finite = mean[np.isfinite(mean)]
        if finite.size and finite.max() > 50:  # a few broken variants must not flatten the rest
            ax.set_xscale("symlog", linthresh=1.0)
        src = "emulated runs (emulated)" if dom == "emulated" else "real traces"
        ax.set_title(f"Ablation on {src}, 95% CI", fontsize=9)
        if dom == "emulated":
            _emulated_note(ax)
    fig.tight_layout()
    return fig


def error_ci_figure(table: pd.DataFrame):
    """Mean |error| with 95% CI per configuration, beside 2 x the run-to-run CV of the actual time."""
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(table) + 1.6))
    y = np.arange(len(table))[::-1]
    mean = table["abs_error_pct_mean"].to_numpy(dtype=float)
    lo = np.nan_to_num(mean - table["abs_error_pct_lo"].to_numpy(dtype=float), nan=0.0)
    hi = np.nan_to_num(table["abs_error_pct_hi"].to_numpy(dtype=float) - mean, nan=0.0)
    ax.errorbar(mean, y, xerr=[np.clip(lo, 0, None), np.clip(hi, 0, None)], fmt="o", color="#264653",
                capsize=3, ms=4, label="mean |error| (95% CI)")
    ax.scatter(2 * table["actual_iteration_cv_pct"].to_numpy(dtype=float), y, marker="|", s=120,
               color="#E76F51", label="2 x CV of actual iteration (run-to-run noise)")
    ax.set_yticks(y, [f"{e}: {c}" for e, c in zip(table["experiment"], table["config"])], fontsize=7)
    ax.set_xlabel("%")
    ax.set_title("Error vs run-to-run noise over seeds (emulated)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    _emulated_note(ax)
    fig.tight_layout()
    return fig


# ---- emulator realism --------------------------------------------------------------------------

REALISM_STYLE = {"fig1": ("#C44E52", "D", "Fig. 1 (175B, H100)"), "fig7": ("#DD8452", "s", "Fig. 7 (15B, H100)"),
                 "vtrain_single": ("#4C72B0", "o", "vTrain single node (A100)"),
                 "sc21_table1": ("#55A868", "^", "Megatron SC'21 Tab. 1 (A100, 32-3072)"),
                 "sc21_table2": ("#8172B3", "v", "Megatron SC'21 Tab. 2 (A100, 384-2240)"),
                 "korthikanti_2022": ("#937860", "P", "Korthikanti'22 (A100, 8-512)")}
REALISM_BAND = 0.10   # the shaded band: emulated within +-10% of measured


def realism_figure(rows: pd.DataFrame, summary: pd.DataFrame):
    """Emulated (y) vs measured (x) iteration time, one point per configuration, one marker per data set.

    `rows`: `lumos.emulator.realism.emulate_point` rows; `summary`: the summary rows of the
    `emulator_realism` table (dataset, n, mean_abs_error_pct, spearman), quoted in the legend.
    """
    fig, ax = plt.subplots(figsize=(6.2, 6.6))
    lo = float(min(rows["measured_ms"].min(), rows["emulated_ms"].min())) / 1.3
    hi = float(max(rows["measured_ms"].max(), rows["emulated_ms"].max())) * 1.3
    x = np.geomspace(lo, hi, 50)
    ax.fill_between(x, x * (1 - REALISM_BAND), x * (1 + REALISM_BAND), color="#DDDDDD", lw=0,
                    label=f"within +-{100 * REALISM_BAND:.0f}%")
    ax.plot(x, x, color="#333333", lw=0.8, label="emulated = measured")
    stats = summary.set_index("dataset")
    for ds in dict.fromkeys(rows["dataset"]):
        d = rows[rows["dataset"] == ds]
        color, marker, name = REALISM_STYLE.get(ds, ("#2A9D8F", "^", ds))
        s = stats.loc[ds] if ds in stats.index else None
        label = name if s is None else (f"{name}: n={int(s['n'])}, MAE {s['mean_abs_error_pct']:.1f}%, "
                                        f"Spearman {format(s['spearman'], '.2f') if np.isfinite(s['spearman']) else '-'}")
        big = len(d) < 20
        ax.scatter(d["measured_ms"], d["emulated_ms"], s=36 if big else 9, marker=marker, color=color,
                   alpha=1.0 if big else 0.55, edgecolors="black" if big else "none", linewidths=0.5,
                   label=label, zorder=3 if big else 2)
    inter = rows[rows["schedule"].fillna("1F1B") != "1F1B"] if "schedule" in rows else rows.iloc[:0]
    if len(inter):   # which rows ran the interleaved schedule (the SC'21 script's, measured.sc21_scripts)
        ax.scatter(inter["measured_ms"], inter["emulated_ms"], s=130, marker="o", facecolors="none",
                   edgecolors="black", linewidths=0.8, zorder=4, label="emulated with interleaved 1F1B")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel("measured iteration time (ms, published)")
    ax.set_ylabel("emulated iteration time (ms)")
    ax.set_title("Emulator realism: emulated vs measured (published measurements)\n"
                 "MAE = mean |emulated - measured| / measured", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), frameon=False)   # clear of the points
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    fig.tight_layout()
    fig.text(0.995, 0.0, "y: EMULATED cluster; x: published hardware measurements (resources/measurements/)",
             ha="right", va="top", fontsize=7, color="#B22222")
    return fig


# ---- interval coverage (prediction intervals) ----------------------------------------------------

COVERAGE_STYLE = {"replay": ("#264653", "o"), "DP": ("#2A9D8F", "s"), "PP": ("#E9C46A", "^"),
                  "DP+PP": ("#F4A261", "v"), "variant": ("#E76F51", "D")}
POOLED_STYLE = {"scale-out (DP, PP, DP+PP)": ("#7A7A7A", "x"), "all predictions": ("#111111", "+")}


def coverage_figure(table: pd.DataFrame):
    """Reliability: nominal vs observed coverage of the iteration-time interval, one line per group
    (the pooled `all: GROUP` rows of the coverage table)."""
    levels = (50, 90, 95)
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    ax.plot([40, 100], [40, 100], ls="--", color="#777777", lw=1, label="perfect calibration")
    pooled = table[table["experiment"].astype(str).str.startswith("all: ")]
    for _, row in pooled.iterrows():
        color, marker = COVERAGE_STYLE.get(row["group"], POOLED_STYLE.get(row["group"], ("#555555", "x")))
        ls = "-" if row["group"] in COVERAGE_STYLE else ":"
        ax.plot(levels, [row[f"coverage{lv}_pct"] for lv in levels], marker=marker, color=color, ls=ls,
                label=f"{row['group']} ({int(row['seeds'])} actuals)")
    ax.set_xlim(40, 100)
    ax.set_ylim(-2, 102)
    ax.set_xlabel("nominal coverage of the interval (%)")
    ax.set_ylabel("observed: actual iterations inside (%)")
    ax.set_title("Are the intervals honest? (emulated actuals, other seeds)", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    _emulated_note(ax)
    fig.tight_layout()
    return fig


# ---- prediction vs hardware (the multi-node ground truth) ----------------------------------------

ENDTOEND_NOTE = ("P: lumos predict from an EMULATED base (mean over its seeds, 95% CI); "
                 "M: MEASURED on hardware (published)")


def endtoend_figure(table: pd.DataFrame):
    """Per data set, per target: measured (M) and predicted (P) bars, stacked by part where the breakdown
    was measured; above each pair our error (95% CI) and the peer's own published |error|.

    `table`: the `endtoend` table (`lumos.report.endtoend.endtoend_table`); its summary rows give each
    panel's mean |error|.
    """
    targets = table[table["row"] == "target"]
    datasets = list(dict.fromkeys(targets["dataset"]))
    widths = [max(4.5, 1.6 * (targets["dataset"] == d).sum() + 1.5) for d in datasets]
    fig, axes = plt.subplots(1, len(datasets), figsize=(sum(widths), 4.8), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    for ax, ds in zip(axes[0], datasets):
        t = targets[targets["dataset"] == ds].reset_index(drop=True)
        x = np.arange(len(t))
        w = 0.36
        has_parts = bool(np.isfinite(t[[f"measured_{p}_ms" for p in COMPONENT_PARTS]].to_numpy(float)).all())
        for offset, who in ((-w / 2 - 0.01, "measured"), (w / 2 + 0.01, "predicted")):
            cols = {p: f"{who}_{p}_ms" + ("_mean" if who == "predicted" else "") for p in COMPONENT_PARTS}
            if has_parts:
                bottom = np.zeros(len(t))
                for part in COMPONENT_PARTS:
                    vals = t[cols[part]].to_numpy(dtype=float)
                    ax.bar(x + offset, vals, w, bottom=bottom, color=COLORS[part],
                           label=COMPONENT_LABELS[part] if who == "measured" else None,
                           hatch="//" if who == "predicted" else None, edgecolor="white", linewidth=0.5)
                    bottom += vals
            else:
                total = f"{who}_iteration_ms" + ("_mean" if who == "predicted" else "")
                ax.bar(x + offset, t[total].to_numpy(dtype=float), w, color="#9A9A9A",
                       hatch="//" if who == "predicted" else None, edgecolor="white", linewidth=0.5,
                       label="iteration (no breakdown measured)" if who == "measured" else None)
        mean = t["predicted_iteration_ms_mean"].to_numpy(dtype=float)
        lo = np.nan_to_num(mean - t["predicted_iteration_ms_lo"].to_numpy(dtype=float), nan=0.0)
        hi = np.nan_to_num(t["predicted_iteration_ms_hi"].to_numpy(dtype=float) - mean, nan=0.0)
        ax.errorbar(x + w / 2 + 0.01, mean, yerr=[np.clip(lo, 0, None), np.clip(hi, 0, None)], fmt="none",
                    ecolor="#111111", capsize=3, lw=1.0)
        top = np.maximum(t["measured_iteration_ms"].to_numpy(dtype=float), mean + hi)
        for xi, tp, (_, r) in zip(x, top, t.iterrows()):
            for xo, label in ((xi - w / 2 - 0.01, "M"), (xi + w / 2 + 0.01, "P")):
                ax.text(xo, tp * 1.005, label, ha="center", va="bottom", fontsize=7)
            ci = ""
            if np.isfinite(r["error_pct_lo"]) and np.isfinite(r["error_pct_hi"]):
                ci = f" [{r['error_pct_lo']:+.1f}, {r['error_pct_hi']:+.1f}]"
            peer = "" if r["peer_error"] == "-" else f"\n{r['peer']} {r['peer_error'].rsplit(' (', 1)[0]}"
            ax.text(xi, tp * 1.05, f"ours {r['error_pct_mean']:+.1f}%{ci}{peer}", ha="center", va="bottom",
                    fontsize=7)
        ax.set_xticks(x, [f"{r['target']}\n(n={int(r['n'])})" for _, r in t.iterrows()], fontsize=8)
        ax.set_ylabel("iteration time (ms)")
        ax.set_ylim(0, float(np.nanmax(top)) * 1.32)
        summary = table[(table["row"] == "summary") & (table["dataset"] == ds)]
        line = ""
        if len(summary):
            s = summary.iloc[0]
            peer = "" if s["peer_error"] == "-" else f"; {s['peer']} {s['peer_error']}"
            line = f"\nmean |error| ours {s['abs_error_pct_mean']:.2f}% over {int(s['n'])} layouts{peer}"
        rests = t["rests_on"].iloc[0].replace(" vs MEASURED", "\nvs MEASURED")   # two lines: panels sit side by side
        ax.set_title(f"{ds}, base {t['base'].iloc[0]}: {rests}{line}", fontsize=8)
        ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.suptitle("Prediction vs hardware: lumos predict from an emulated base vs measured (published)", fontsize=10)
    fig.tight_layout()
    fig.text(0.995, 0.0, ENDTOEND_NOTE, ha="right", va="top", fontsize=7, color="#B22222")
    return fig
