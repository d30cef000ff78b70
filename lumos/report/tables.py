"""The pipeline's tables: long data rows from result JSON, presentation tables, CSV + Markdown.

Two layers, so every number in a table can be traced to one job's output:
- rows: one replay / prediction JSON (as `lumos replay` / `lumos predict`
  print it) becomes flat rows with labels (trace, run, seed, simulator);
  collected into `results/{tag}/data/*.csv`;
- tables: those long frames aggregated over seeds (mean with 95% bootstrap
  CI, run-to-run spread) into `results/{tag}/tables/*.csv|md`.
Times are in ms, errors in percent, error = 100 * (predicted - actual) / actual,
per component as well as for the iteration. Emulated tables carry a
`source` column "emulated" and say "emulated" in their title line.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from lumos.analysis.statistics import bootstrap_mean_ci, run_spread, summarize
from lumos.trace.atomic import atomic_open, write_text_atomic

PARTS = ("iteration", "exposed_compute", "overlapped", "exposed_comm", "other")
COMPONENT_PARTS = PARTS[1:]
METRICS = ("iteration_error_pct", "component_l1_us", "component_l1_pct", "cp_precision", "cp_recall")


# ---- rows from one result JSON -----------------------------------------------------------

def rank_docs(doc: Mapping) -> list[Mapping]:
    """Per-rank replay documents: the `ranks` list of a multi-rank run, else the document itself."""
    return list(doc["ranks"]) if doc.get("ranks") else [doc]


def _error(pred: float, actual: float) -> float:
    return 100.0 * (pred - actual) / actual if actual else float("nan")


def compare_parts(predicted: Mapping, actual: Mapping, pred_name: str, actual_name: str) -> dict:
    """Columns `{actual_name}_{part}_ms`, `{pred_name}_{part}_ms`, `{part}_error_pct`, `error_pct`, L1."""
    row = {}
    for part in PARTS:
        a, p = float(actual[f"{part}_us"]), float(predicted[f"{part}_us"])
        row[f"{actual_name}_{part}_ms"] = a / 1e3
        row[f"{pred_name}_{part}_ms"] = p / 1e3
        row[f"{part}_error_pct"] = _error(p, a)
    row["error_pct"] = row.pop("iteration_error_pct")
    row["abs_error_pct"] = abs(row["error_pct"])
    l1 = sum(abs(float(predicted[f"{c}_us"]) - float(actual[f"{c}_us"])) for c in COMPONENT_PARTS)
    actual_iter = float(actual["iteration_us"])
    row["component_l1_pct"] = 100.0 * l1 / actual_iter if actual_iter else float("nan")
    return row


def _metrics(doc: Mapping) -> dict:
    m = doc.get("metrics") or {}
    return {k: m[k] for k in ("cp_precision", "cp_recall") if k in m}


def replay_rows(doc: Mapping, labels: Mapping) -> list[dict]:
    """One row per rank of a replay JSON: graph size, measured vs replayed breakdown, errors."""
    rows = []
    for rdoc in rank_docs(doc):
        g = rdoc.get("graph", {})
        edges = g.get("edges", {})
        row = dict(labels)
        row.update({"rank": int(rdoc.get("rank", g.get("rank", 0))), "step": g.get("step"),
                    "tasks": g.get("tasks"), "edges": int(sum(edges.values())) if isinstance(edges, Mapping) else edges,
                    "inferred_edges": g.get("inferred_edges"), "violations": g.get("violations")})
        row.update(compare_parts(rdoc["replayed"], rdoc["measured"], "replayed", "measured"))
        row.update(_metrics(rdoc))
        rows.append(row)
    return rows


def run_replay_row(doc: Mapping, labels: Mapping) -> dict:
    """One row for a whole run: the critical (slowest) rank's figures, as `lumos replay` reports them."""
    row = dict(labels)
    row["ranks"] = len(rank_docs(doc))
    row["critical_rank"] = doc.get("critical_rank", doc.get("rank", 0))
    row.update(compare_parts(doc["replayed"], doc["measured"], "replayed", "measured"))
    row.update(_metrics(doc))
    return row


def prediction_row(doc: Mapping, labels: Mapping) -> dict:
    """One prediction against its (emulated) actual run."""
    row = dict(labels)
    row["base"], row["target"] = str(doc.get("base", "")), str(doc.get("target", ""))
    row.update(compare_parts(doc["predicted"], doc["measured"], "predicted", "actual"))
    return row


# ---- presentation tables ---------------------------------------------------------------------

def replay_real_table(data: pd.DataFrame, source: str = "real") -> pd.DataFrame:
    """Per trace and rank: graph size, measured vs Lumos replay (and dPRO-style error when present)."""
    lumos = data[data["simulator"] == "lumos"]
    cols = (["trace", "rank", "step", "tasks", "edges", "inferred_edges", "violations"]
            + [f"measured_{p}_ms" for p in PARTS] + [f"replayed_{p}_ms" for p in PARTS] + ["error_pct"])
    out = lumos[cols].copy()
    dpro = data[data["simulator"] == "dpro"]
    if len(dpro):
        d = dpro[["trace", "rank", "replayed_iteration_ms", "error_pct", "component_l1_pct"]].rename(
            columns={"replayed_iteration_ms": "dpro_replayed_iteration_ms", "error_pct": "dpro_error_pct",
                     "component_l1_pct": "dpro_component_l1_pct"})
        out = out.merge(d, on=["trace", "rank"], how="left")
    out.insert(0, "source", source)
    return out.reset_index(drop=True)


# The `steps_from` column of the recorded what-if tables (h200_whatif, fsdp_cpu_whatif): the base's host
# work and kernels the median over its own profiled steps, or over every base recording's (`lumos predict
# --other-recordings`).
STEPS_OWN, STEPS_POOLED = "own steps", "all base recordings"


def recorded_whatif_table(docs: list[dict], calibration: list[str] | tuple = ()) -> pd.DataFrame:
    """One row per what-if target and base recording: predicted vs the mean of every measured iteration.

    `docs` are `lumos predict` JSON documents with `predicted_by_base` (the prediction from each
    recording of the base) and `measured_runs` (one entry per recorded run and profiled step)
    added by the pipeline. `spread_pct` is (max - min) / mean over the measured iterations,
    `run_to_run_pct` the difference between the two recordings' means. `role`: what-if, unchanged (no
    flag), or clock calibration for the targets in `calibration` (the sustained-clock constants were
    fitted on their recordings: not an independent check). `clock_factor`: the sustained-clock model's
    factor on compute kernels (1 where it was off or changed nothing). Where the documents carry
    `interval_by_base` (`lumos predict --samples`): the 90% interval, its width in % of the measured
    mean, the share of measured iterations inside it and whether the measured mean is; where they carry
    `pairs_by_base` (`--ep-calibration` with two pairs or more): the predictions calibrated on each pair
    alone, lowest and highest, and whether the measured mean lies between them. `steps_from`:
    STEPS_OWN, or STEPS_POOLED for the rows of the document's `pooled` (the same predictions with the
    profiled steps of every base recording, `lumos predict --other-recordings`).
    """
    rows = []
    for doc in docs:
        runs = pd.DataFrame(doc["measured_runs"])
        it = runs["iteration_us"] / 1e3
        mean = float(it.mean())
        per_run = runs.groupby("run")["iteration_us"].mean() / 1e3
        for steps_from, base, pred, interval, clock, pairs in _recorded_predictions(doc):
            row = {"source": doc.get("source", "measured on hardware"), "target": doc["label"],
                   "flags": " ".join(doc["flags"]) or "(none)", "base": base, "steps_from": steps_from,
                   "microbatches": doc["microbatches"], "micro_batch": doc["target"].get("micro_batch"),
                   "layers": doc["target"]["layers"], "hidden": doc["target"]["hidden"],
                   "ffn": doc["target"]["ffn"], "n_measured": len(runs),
                   "role": ("clock calibration" if doc["label"] in calibration else
                            "what-if" if doc["flags"] else "unchanged"),
                   "clock_factor": clock,
                   # recordings of other sizes or rounds the CPU routes were calibrated on (--dp/--ep-calibration)
                   "calibration_pairs": len((doc.get("calibration") or {}).get("recordings", []))}
            for p in PARTS:
                row[f"predicted_{p}_ms"] = pred[f"{p}_us"] / 1e3
                row[f"measured_{p}_ms"] = float(runs[f"{p}_us"].mean()) / 1e3
            row["error_pct"] = 100.0 * (row["predicted_iteration_ms"] - mean) / mean
            row["measured_min_ms"], row["measured_max_ms"] = float(it.min()), float(it.max())
            row["spread_pct"] = 100.0 * (row["measured_max_ms"] - row["measured_min_ms"]) / mean
            row["run_to_run_pct"] = 100.0 * float(per_run.max() - per_run.min()) / mean
            row["within_spread"] = bool(row["measured_min_ms"] <= row["predicted_iteration_ms"]
                                        <= row["measured_max_ms"])
            if interval is not None:
                lo, hi = (x / 1e3 for x in interval["iteration_us"]["90"])
                row["predicted_lo90_ms"], row["predicted_hi90_ms"] = lo, hi
                row["width90_pct"] = 100.0 * (hi - lo) / mean
                row["measured_in_90_pct"] = 100.0 * float(((it >= lo) & (it <= hi)).mean())
                row["mean_in_90"] = bool(lo <= mean <= hi)
            if pairs is not None:    # calibrated on each pair alone (CPU EP what-ifs): the rounds' disagreement
                lo, hi = pairs["lo_us"] / 1e3, pairs["hi_us"] / 1e3
                row["pairs_lo_ms"], row["pairs_hi_ms"] = lo, hi
                row["mean_in_pairs"] = bool(lo <= mean <= hi)
            for p in COMPONENT_PARTS:
                m = row[f"measured_{p}_ms"]
                row[f"{p}_error_pct"] = 100.0 * (row[f"predicted_{p}_ms"] - m) / m if m else float("nan")
            rows.append(row)
    return pd.DataFrame(rows)


def _recorded_predictions(doc: dict):
    """(steps from, base, predicted, interval or None, clock factor) of each prediction in a document of
    `workflow/scripts/predict_recorded.py`: from each base with its own profiled steps, then
    (`pooled`) with every base's."""
    for steps_from, d in ((STEPS_OWN, doc), (STEPS_POOLED, doc.get("pooled"))):
        if not d:
            continue
        for base, pred in d.get("predicted_by_base", {"base": doc["predicted"]}).items():
            yield (steps_from, base, pred, d.get("interval_by_base", {}).get(base),
                   d.get("clock_by_base", {}).get(base, 1.0), d.get("pairs_by_base", {}).get(base))


def replay_emulated_table(data: pd.DataFrame) -> pd.DataFrame:
    """Per emulated run and simulator, over seeds: mean measured/replayed, iteration and component errors."""
    value_cols = ["measured_iteration_ms", "replayed_iteration_ms", "error_pct", "abs_error_pct"]
    value_cols += [f"{p}_error_pct" for p in COMPONENT_PARTS] + ["component_l1_pct"]
    value_cols += [c for c in ("cp_precision", "cp_recall") if c in data.columns]
    out = summarize(data, ["run", "simulator"], value_cols)
    keep = ["run", "simulator", "n"]
    for c in value_cols:
        keep.append(f"{c}_mean")
        if c in ("error_pct", "abs_error_pct", "component_l1_pct"):
            keep += [f"{c}_lo", f"{c}_hi"]
    out = out[keep]
    out.insert(0, "source", "emulated")
    return out


def prediction_table(data: pd.DataFrame) -> pd.DataFrame:
    """Per target (the Fig. 7 / Fig. 8 analogue), over seeds: actual and predicted parts, errors with CIs."""
    value_cols = ([f"actual_{p}_ms" for p in PARTS] + [f"predicted_{p}_ms" for p in PARTS]
                  + ["error_pct", "abs_error_pct"] + [f"{p}_error_pct" for p in COMPONENT_PARTS]
                  + ["component_l1_pct"])
    out = summarize(data, ["group", "label", "run"], value_cols)
    keep = ["group", "label", "run", "n"]
    for c in value_cols:
        keep.append(f"{c}_mean")
        if c.endswith("_pct"):
            keep += [f"{c}_lo", f"{c}_hi"]
    out = out[keep]
    spread = [run_spread(g["actual_iteration_ms"]).cv_pct for _, g in data.groupby(["group", "label", "run"], sort=False)]
    out["actual_iteration_cv_pct"] = spread
    out.insert(0, "source", "emulated")
    return out


def ablation_summary(data: pd.DataFrame) -> pd.DataFrame:
    """Per domain (real / emulated) and ablation variant: errors over sources (and random-drop seeds), with CIs."""
    df = data.copy()
    df["domain"] = np.where(df["emulated"].astype(bool), "emulated", "real")
    df["abs_iteration_error_pct"] = df["iteration_error_pct"].abs()
    cols = [c for c in ("abs_iteration_error_pct", "component_l1_pct", "cp_precision", "cp_recall") if c in df]
    out = summarize(df, ["domain", "variant"], cols)
    groups = [g for _, g in df.groupby(["domain", "variant"], sort=False)]
    out.insert(2, "sources", [g["source"].nunique() for g in groups])
    # replays that could not finish (a dropped class can leave a wait never satisfied): counted, not hidden
    out.insert(4, "failed", [int(g["iteration_error_pct"].isna().sum()) for g in groups])
    out.insert(0, "source", out.pop("domain"))
    return out


def ablation_by_source(data: pd.DataFrame) -> pd.DataFrame:
    """One row per trace (or emulated run) and ablation variant: signed and absolute iteration
    error, component L1 and critical-path precision/recall; random drops as mean with CI over
    seeds, every other variant a single replay (n = 1, interval collapses to the value)."""
    df = data.copy()
    df["domain"] = np.where(df["emulated"].astype(bool), "emulated", "real")
    df["abs_iteration_error_pct"] = df["iteration_error_pct"].abs()
    cols = [c for c in ("iteration_error_pct", "abs_iteration_error_pct", "component_l1_pct",
                        "cp_precision", "cp_recall") if c in df]
    out = summarize(df, ["domain", "source", "variant"], cols)
    groups = [g for _, g in df.groupby(["domain", "source", "variant"], sort=False)]
    out.insert(4, "failed", [int(g["iteration_error_pct"].isna().sum()) for g in groups])
    out.insert(0, "kind", out.pop("domain"))
    return out


def statistics_table(replay_emulated: pd.DataFrame | None = None,
                     predictions: Sequence[pd.DataFrame] = ()) -> pd.DataFrame:
    """Run-to-run spread of the actual iteration time beside each experiment's mean error and its CI.

    `beyond_noise` is true when the mean |error| exceeds twice the run-to-run
    coefficient of variation: the error is then larger than the seeds' own spread.
    """
    rows = []
    if replay_emulated is not None and len(replay_emulated):
        for (run, sim), g in replay_emulated.groupby(["run", "simulator"], sort=False):
            rows.append(_stat_row(f"replay ({sim})", run, g["measured_iteration_ms"], g["error_pct"]))
    for df in predictions:
        for (group, label, run), g in df.groupby(["group", "label", "run"], sort=False):
            rows.append(_stat_row(f"predict ({group})", f"{label} {run}", g["actual_iteration_ms"], g["error_pct"]))
    out = pd.DataFrame(rows)
    if len(out):
        out.insert(0, "source", "emulated")
    return out


def _stat_row(experiment: str, config: str, actual_ms: Iterable[float], error_pct: Iterable[float]) -> dict:
    spread = run_spread(actual_ms)
    err = bootstrap_mean_ci(error_pct)
    abs_err = bootstrap_mean_ci(np.abs(np.asarray(list(error_pct), dtype=float)))
    beyond = bool(abs_err.mean > 2 * spread.cv_pct) if spread.n > 1 else None
    return {"experiment": experiment, "config": config, "n": spread.n,
            "actual_iteration_ms_mean": spread.mean, "actual_iteration_ms_std": spread.std,
            "actual_iteration_ms_min": spread.min, "actual_iteration_ms_max": spread.max,
            "actual_iteration_cv_pct": spread.cv_pct,
            "error_pct_mean": err.mean, "error_pct_lo": err.lo, "error_pct_hi": err.hi,
            "abs_error_pct_mean": abs_err.mean, "abs_error_pct_lo": abs_err.lo, "abs_error_pct_hi": abs_err.hi,
            "beyond_noise": beyond}


# ---- writing -----------------------------------------------------------------------------------

def write_csv(df: pd.DataFrame, path) -> None:
    with atomic_open(path, "w") as fh:
        df.to_csv(fh, index=False, float_format="%.6g")


def write_table(df: pd.DataFrame, csv_path, md_path, title: str) -> None:
    """CSV (full precision, one header row) and Markdown (title line, CIs folded into `mean [lo, hi]`)."""
    write_csv(df, csv_path)
    write_text_atomic(md_path, to_markdown(df, title))


def to_markdown(df: pd.DataFrame, title: str) -> str:
    cols, cells = _fold_ci(df)
    lines = [f"**{title}**", "", "| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in cells:
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _fold_ci(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    cols: list[str] = []
    getters = []
    for c in df.columns:
        if c.endswith(("_lo", "_hi")) and f"{c[:-3]}_mean" in df.columns:
            continue
        if c.endswith("_mean") and f"{c[:-5]}_lo" in df.columns and f"{c[:-5]}_hi" in df.columns:
            base = c[:-5]
            cols.append(f"{_short(base)} [95% CI]")
            getters.append(lambda r, b=base: _ci_cell(r[f"{b}_mean"], r[f"{b}_lo"], r[f"{b}_hi"], b))
        else:
            cols.append(_short(c))
            getters.append(lambda r, c=c: format_cell(r[c], c))
    cells = [[g(r) for g in getters] for _, r in df.iterrows()]
    return cols, cells


def _short(col: str) -> str:
    return col[:-5] if col.endswith("_mean") else col


def _ci_cell(mean, lo, hi, col: str) -> str:
    m = format_cell(mean, col)
    if _is_nan(lo) or _is_nan(hi):
        return m
    return f"{m} [{format_cell(lo, col)}, {format_cell(hi, col)}]"


def _is_nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def format_cell(v, col: str = "") -> str:
    """Times in ms with 3 decimals (1 from 100 ms), percentages with 2 (signed for errors), counts as ints."""
    col = col[:-5] if col.endswith("_mean") else col
    measure = any(t in col for t in ("_ms", "_pct", "precision", "recall"))
    if _is_nan(v):
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)) and not measure:
        return str(int(v))
    if isinstance(v, (int, np.integer, float, np.floating)):
        v = float(v)
        if v.is_integer() and not measure:
            return str(int(v))
        if col.endswith("_ms"):
            return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"
        if col.endswith("_pct"):
            return f"{v:+.2f}" if "error" in col and "abs" not in col else f"{v:.2f}"
        return f"{v:.3f}"
    return str(v)


# ---- transfer on real traces (the graph under changed durations) --------------------------

TRANSFER_METHODS = {"lumos": "lumos_err_pct", "dpro": "dpro_err_pct", "same_as_k": "same_as_k_err_pct",
                    "kernel_ratio": "kernel_ratio_err_pct"}


def transfer_real_table(frames: Mapping[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-prediction rows and the summary block of `transfer_real`.

    `frames`: trace name -> `lumos.analysis.transfer.transfer_steps` rows (an empty frame for a
    trace with fewer than two usable steps; it is named in the summary with 0 predictions).
    Summary: per trace, then over all predictions ("all") and with each trace weighted equally
    ("mean of traces"), the mean and median |error| of each method.
    """
    rows = pd.concat([f.assign(trace=name) for name, f in frames.items() if len(f)], ignore_index=True) \
        if any(len(f) for f in frames.values()) else pd.DataFrame(columns=["trace"])
    cols = ["trace", "step_from", "step_to", "actual_ms", "lumos_ms", "lumos_err_pct", "dpro_err_pct",
            "same_as_k_err_pct", "kernel_ratio_err_pct", "matched_share"]
    rows = rows.reindex(columns=cols)

    def stats(df: pd.DataFrame, label: str) -> dict:
        out = {"trace": label, "predictions": len(df)}
        for m, c in TRANSFER_METHODS.items():
            err = df[c].abs()
            out[f"{m}_mean_abs_pct"] = float(err.mean()) if len(df) else float("nan")
            out[f"{m}_median_abs_pct"] = float(err.median()) if len(df) else float("nan")
        return out

    summary = [stats(rows[rows.trace == name], name) for name in frames]
    summary.append(stats(rows, "all"))
    per_trace = pd.DataFrame([s for s in summary[:-1] if s["predictions"]])
    if len(per_trace):
        mean_of = {"trace": "mean of traces", "predictions": int(per_trace["predictions"].sum())}
        for c in per_trace.columns[2:]:
            mean_of[c] = float(per_trace[c].mean())
        summary.append(mean_of)
    return rows, pd.DataFrame(summary)


def write_transfer_table(rows: pd.DataFrame, summary: pd.DataFrame, csv_path, md_path, title: str) -> None:
    """One CSV (summary rows first, `row` = 'summary' or 'prediction'); Markdown: the summary, then the rows."""
    both = pd.concat([summary.assign(row="summary"), rows.assign(row="prediction")], ignore_index=True)
    write_csv(both[["row"] + [c for c in both.columns if c != "row"]], csv_path)
    md = to_markdown(summary, title + " - summary: mean and median |error| per method") + "\n" \
        + to_markdown(rows, "Every prediction (step_from's graph with step_to's durations vs step_to measured)")
    write_text_atomic(md_path, md)


# ---- emulator realism: emulated vs measured ------------------------------------------------

REALISM_SUMMARY = {"n": "n", "mean_abs_err_pct": "mean_abs_error_pct", "median_abs_err_pct": "median_abs_error_pct",
                   "worst_abs_err_pct": "worst_abs_error_pct", "mean_err_pct": "mean_error_pct",
                   "spearman": "spearman", "spearman_per_model_min": "spearman_per_model_min"}
REALISM_SOURCE = "emulated vs measured (published)"


def realism_schedules(rows: pd.DataFrame) -> str:
    """The pipeline schedules a data set's rows were emulated with: '1F1B', or which rows interleaved."""
    sched = rows["schedule"].fillna("1F1B") if "schedule" in rows else pd.Series("1F1B", index=rows.index)
    inter = rows[sched != "1F1B"]
    if inter.empty:
        return "1F1B"
    chunks = sorted({s.rsplit("=", 1)[-1] for s in sched[sched != "1F1B"]})
    return (f"interleaved 1F1B on {len(inter)} of {len(rows)} rows (V = {', '.join(chunks)}: "
            + ", ".join(inter["config"]) + "), 1F1B on the rest")


def emulator_realism_table(rows: pd.DataFrame, scores: Mapping[str, Mapping]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The summary per data set and one row per configuration with a measured breakdown.

    `rows`: `lumos.emulator.realism.emulate_point` rows (dataset, config, measured_ms, emulated_ms and,
    where the breakdown was measured, `measured_{part}_ms` / `emulated_{part}_ms`); `scores`: their
    `lumos.emulator.realism.score`. Shares are percent of the iteration: measured parts over the measured
    total, emulated parts over the emulated rank-0 breakdown total; differences in percentage points.
    """
    summary = pd.DataFrame([{"dataset": ds, **{new: s[old] for old, new in REALISM_SUMMARY.items()},
                             "schedule": realism_schedules(rows[rows["dataset"] == ds])}
                            for ds, s in scores.items()])
    summary["source"] = REALISM_SOURCE
    has_parts = rows[f"measured_{COMPONENT_PARTS[0]}_ms"].notna() if f"measured_{COMPONENT_PARTS[0]}_ms" in rows \
        else pd.Series(False, index=rows.index)
    configs = []
    for _, r in rows[has_parts].iterrows():
        row = {"dataset": r["dataset"], "config": r["config"], "measured_ms": float(r["measured_ms"]),
               "emulated_ms": float(r["emulated_ms"]), "error_pct": _error(r["emulated_ms"], r["measured_ms"])}
        for p in COMPONENT_PARTS:
            m = 100.0 * r[f"measured_{p}_ms"] / r["measured_ms"]
            e = 100.0 * r[f"emulated_{p}_ms"] / r["emulated_breakdown_total_ms"]
            row.update({f"measured_{p}_share_pct": m, f"emulated_{p}_share_pct": e, f"{p}_share_diff_pts": e - m})
        row["source"] = REALISM_SOURCE
        configs.append(row)
    return summary, pd.DataFrame(configs)


def _share_cells(configs: pd.DataFrame) -> pd.DataFrame:
    """Markdown view of the per-configuration rows: one `measured / emulated (diff)` cell per part."""
    out = configs[["dataset", "config", "measured_ms", "emulated_ms", "error_pct"]].copy()
    for p in COMPONENT_PARTS:
        out[f"{p} %"] = [f"{m:.1f} / {e:.1f} ({d:+.1f})" for m, e, d in
                         zip(configs[f"measured_{p}_share_pct"], configs[f"emulated_{p}_share_pct"],
                             configs[f"{p}_share_diff_pts"])]
    return out


def write_realism_table(summary: pd.DataFrame, configs: pd.DataFrame, csv_path, md_path, title: str) -> None:
    """One CSV (`row` = 'summary' or 'configuration'); Markdown: the summary, then the configurations."""
    both = pd.concat([summary.assign(row="summary"), configs.assign(row="configuration")], ignore_index=True)
    write_csv(both[["row"] + [c for c in both.columns if c != "row"]], csv_path)
    md = to_markdown(summary, title)
    if len(configs):
        md += "\n" + to_markdown(_share_cells(configs),
                                 "Emulated vs measured per configuration (published breakdowns): iteration ms, and "
                                 "each part's share of the iteration as measured % / emulated % (difference in "
                                 "points)")
    write_text_atomic(md_path, md)


# ---- interval coverage (prediction intervals) -------------------------------------------------

COVERAGE_LEVELS = ("50", "90", "95")
COVERAGE_POOLS = {"scale-out (DP, PP, DP+PP)": ("DP", "PP", "DP+PP"), "variants": ("variant",),
                  "all predictions": ("DP", "PP", "DP+PP", "variant")}


def coverage_rows(intervals: Sequence[Mapping], actuals: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per experiment: its interval (from the fit seed's base) against the actual iteration of
    every coverage seed of its run; coverage in %, widths and errors relative to the actual mean."""
    from lumos.analysis.uncertainty import coverage_by_level   # here: it imports the simulator and numba

    rows = []
    for doc in intervals:
        act = actuals[doc["run"]]
        x = act["iteration_us"].to_numpy(dtype=float)
        iv = doc["interval"]["iteration_us"]
        cov = coverage_by_level(x, [doc["interval"]] * len(x))
        mean = float(np.mean(x))
        row = {"source": "emulated", "experiment": doc["label"], "group": doc["group"], "run": doc["run"],
               "fit_seed": doc["fit_seed"], "seeds": len(x), "samples": doc["interval"]["samples"],
               "point_ms": doc["point_us"] / 1e3, "median_ms": iv["median"] / 1e3,
               "lo90_ms": iv["90"][0] / 1e3, "hi90_ms": iv["90"][1] / 1e3,
               "width90_pct": 100 * (iv["90"][1] - iv["90"][0]) / iv["median"],
               "actual_mean_ms": mean / 1e3,
               "actual_sd_pct": 100 * float(np.std(x, ddof=1)) / mean if len(x) > 1 else float("nan"),
               "point_error_pct": 100 * (doc["point_us"] - mean) / mean,
               "abs_point_error_pct": 100 * abs(doc["point_us"] - mean) / mean,
               "median_error_pct": 100 * (iv["median"] - mean) / mean}
        row.update({f"coverage{lv}_pct": 100 * cov[lv] for lv in COVERAGE_LEVELS})
        rows.append(row)
    return pd.DataFrame(rows)


def coverage_table(per_experiment: pd.DataFrame) -> pd.DataFrame:
    """The experiments, then one pooled row per group and pool (each actual seed counts once)."""
    pooled, done = [], set()
    groups = [(g, (g,)) for g in dict.fromkeys(per_experiment["group"])] + list(COVERAGE_POOLS.items())
    for name, members in groups:
        sub = per_experiment[per_experiment["group"].isin(members)]
        seen = frozenset(sub.index)
        if sub.empty or (len(members) > 1 and sub["group"].nunique() < 2) or seen in done:
            continue
        done.add(seen)
        w = sub["seeds"].to_numpy(dtype=float)
        row = {"source": "emulated", "experiment": f"all: {name}", "group": name, "seeds": int(w.sum())}
        for col in ("width90_pct", "actual_sd_pct"):
            row[col] = float(np.average(sub[col], weights=w))
        row["abs_point_error_pct"] = float(np.average(sub["abs_point_error_pct"], weights=w))
        row.update({f"coverage{lv}_pct": float(np.average(sub[f"coverage{lv}_pct"], weights=w))
                    for lv in COVERAGE_LEVELS})
        pooled.append(row)
    return pd.concat([per_experiment, pd.DataFrame(pooled)], ignore_index=True)


def real_interval_table(docs: Mapping[str, Mapping]) -> pd.DataFrame:
    """One row per real trace from `other_iterations` documents: the interval of the replayed step
    (ms, width as % of the median) and how many of the other profiled steps fall inside it."""
    rows = []
    for trace, d in docs.items():
        iv = d["interval"]["iteration_us"]
        n = len(d["others_us"])
        rows.append({"source": "real", "trace": trace, "rank": d.get("rank", 0), "step": d["step"],
                     "steps_profiled": len(d["steps"]), "samples": d["interval"]["samples"],
                     "median_ms": iv["median"] / 1e3, "lo90_ms": iv["90"][0] / 1e3, "hi90_ms": iv["90"][1] / 1e3,
                     "width90_pct": d["width_pct_90"], "other_steps": n,
                     "inside90_pct": 100 * d["inside_90"] if d["inside_90"] is not None else float("nan")})
    return pd.DataFrame(rows)


def search_table(per_seed: pd.DataFrame) -> pd.DataFrame:
    """`lumos search`'s top layouts, predicted vs emulated (mean and spread over seeds, error), ranked
    both ways, and a last row with the Spearman correlation of the two orders (scipy; ties share
    the mean rank)."""
    from scipy.stats import spearmanr

    keys = ["predicted_rank", "tp", "pp", "dp", "micro_batch", "microbatches"]
    g = per_seed.groupby(keys, sort=True)
    df = g.agg(memory_gib_per_gpu=("memory_gib_per_gpu", "first"), predicted_ms=("predicted_us", "first"),
               emulated_ms=("emulated_us", "mean"), emulated_min_ms=("emulated_us", "min"),
               emulated_max_ms=("emulated_us", "max"), seeds=("seed", "count")).reset_index()
    for c in ("predicted_ms", "emulated_ms", "emulated_min_ms", "emulated_max_ms"):
        df[c] = df[c] / 1e3
    df["error_pct"] = 100 * (df["predicted_ms"] - df["emulated_ms"]) / df["emulated_ms"]
    df["emulated_rank"] = df["emulated_ms"].rank(method="average")
    rho = spearmanr(df["predicted_rank"], df["emulated_rank"]).statistic if len(df) > 1 else float("nan")
    last = {c: None for c in df.columns}
    last.update({"predicted_rank": "spearman", "emulated_rank": round(float(rho), 3),
                 "error_pct": float(df["error_pct"].abs().mean())})
    return pd.concat([df.astype({"predicted_rank": object}), pd.DataFrame([last])], ignore_index=True)
