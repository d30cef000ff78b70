"""Prediction vs hardware: `lumos predict` from an emulated base, scored against MEASURED times.

Every other prediction table scores the predictor against the emulator, the cluster we cannot
rent. This one scores it against what was measured on hardware and published: for each published
data set with a base among (or beside) its configurations, the base is emulated with the data
set's hardware profile (the measured base's own trace was never published), every measured layout
is predicted from it, and the prediction is set beside the measurement and beside the peer's own
published error on the same runs. It is the number a user of the tool cares about.

Two errors live in one number here: the emulator's (its base is not the measured base) and the
predictor's. Table `emulator_realism` reads the first alone; table `scaleout` the second alone.

    error_pct      = 100 * (predicted - measured) / measured                  (per seed)
    {part}_error_pts = 100 * (predicted part - measured part) / measured total  (per seed)

Which layout is fastest per GPU matters more to a user choosing among them than any one error: each
data set's summary row ranks its layouts by per-GPU throughput (sequences per GPU-second), predicted
against measured (`throughput_ranking`, Spearman; the base's own layout joins where it was measured).

Both sides' four parts add up to their iteration, so a row's four part errors, in points of the
measured iteration, add up to its iteration error: the table shows where the error sits. Per
target: the mean over the base's seeds with a 95% bootstrap CI (`lumos.analysis.statistics`), as
the other tables. Per data set, a summary row: the mean |error| over its targets (and over every
target of every data set when there are several), beside the peer's own overall figure.

Data sets arrive as `DataSet`s (name, base, measured targets, the seeds' predictions, the peer's
errors), so one more published data set is one more entry in the pipeline's config, not code.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from lumos.analysis.statistics import bootstrap_mean_ci, run_spread
from lumos.trace.atomic import write_text_atomic

from .tables import COMPONENT_PARTS, format_cell, to_markdown, write_csv

__all__ = ["Measurement", "PeerError", "DataSet", "rests_on", "read_peer_errors", "prediction_row",
           "sequences_of", "throughput_ranking", "endtoend_table", "markdown_view", "write_endtoend_table"]

PARTS = ("iteration",) + COMPONENT_PARTS
PART_LABELS = {"exposed_compute": "exposed compute", "overlapped": "overlapped", "exposed_comm": "exposed comm",
               "other": "other"}
PEER_COLUMNS = ("group", "targets", "abs_error_min_pct", "abs_error_max_pct", "abs_error_mean_pct", "scope", "what")


def rests_on(measured_by: str = "published") -> str:
    """What every row of the table rests on, in the words the table prints."""
    return f"predicted from an EMULATED base vs MEASURED on hardware ({measured_by})"


@dataclass(frozen=True)
class Measurement:
    """One measured configuration: its layout (`TPxPPxDP`), iteration time and, where it was
    published, the four-part breakdown (ms)."""

    target: str
    total_ms: float
    parts_ms: Mapping[str, float] = field(default_factory=dict)
    sequences: float = math.nan   # global batch of the run, for its per-GPU throughput (nan: not known)

    @property
    def gpus(self) -> int:
        tp, pp, dp = (int(x) for x in self.target.split("x"))
        return tp * pp * dp


@dataclass(frozen=True)
class PeerError:
    """A peer's own published |error| over some targets: a range, a bound or a mean (nan where not
    published). `scope` "group": beside each of its targets; "overall": beside the summary row."""

    group: str
    targets: tuple[str, ...]
    abs_error_min_pct: float = math.nan
    abs_error_max_pct: float = math.nan
    abs_error_mean_pct: float = math.nan
    scope: str = "group"
    what: str = ""

    def text(self) -> str:
        """`DP: 0.62-2.98% (3 layouts)`, `up to 7.76%`, `3.3% mean`: what was published, no more."""
        lo, hi, mean = self.abs_error_min_pct, self.abs_error_max_pct, self.abs_error_mean_pct
        parts = []
        if np.isfinite(lo) and np.isfinite(hi):
            parts.append(f"{lo:g}-{hi:g}%")
        elif np.isfinite(hi):
            parts.append(f"up to {hi:g}%")
        if np.isfinite(mean):
            parts.append(f"{mean:g}% mean")
        return f"{self.group}: {', '.join(parts) or '-'} ({len(self.targets)} layouts)"


@dataclass(frozen=True)
class DataSet:
    """One published data set scored end to end.

    `measured`: one `Measurement` per target, in the table's order; `predictions`: one row per
    (target, seed) with `predicted_{part}_ms` for the iteration and the four parts
    (`prediction_row`); `peer_errors`: the peer's own published errors on these runs, if any.
    """

    name: str
    base: str
    measured: tuple[Measurement, ...]
    predictions: pd.DataFrame
    peer: str = ""
    peer_errors: tuple[PeerError, ...] = ()
    measured_by: str = "published"
    base_measured: Measurement | None = None   # the base's own layout, where the data set measured it
    base_ms: tuple[float, ...] = ()             # the emulated base's iteration per seed (what its replay gives)

    @property
    def targets(self) -> list[str]:
        return [m.target for m in self.measured]


class PeerErrorsError(ValueError):
    """A peer-errors file the reader cannot use (names the file and the line)."""


def read_peer_errors(path: str | Path) -> tuple[PeerError, ...]:
    """The peer's published errors: a CSV with `#` comment lines (provenance) and the columns of
    `PEER_COLUMNS`; `targets` space-separated, empty numbers where nothing was published."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(line for line in fh if not line.startswith("#"))
        if tuple(reader.fieldnames or ()) != PEER_COLUMNS:
            raise PeerErrorsError(f"{path}: header {reader.fieldnames} is not {list(PEER_COLUMNS)}")
        out = []
        for i, r in enumerate(reader, start=1):
            try:
                nums = [float(r[c]) if r[c].strip() else math.nan
                        for c in ("abs_error_min_pct", "abs_error_max_pct", "abs_error_mean_pct")]
            except ValueError:
                raise PeerErrorsError(f"{path}: data row {i}: an error is not a number: {r}") from None
            if r["scope"] not in ("group", "overall") or not r["targets"].split():
                raise PeerErrorsError(f"{path}: data row {i}: scope must be group or overall, targets non-empty: {r}")
            out.append(PeerError(r["group"], tuple(r["targets"].split()), *nums, scope=r["scope"], what=r["what"]))
    return tuple(out)


def prediction_row(doc: Mapping, target: str, seed: int) -> dict:
    """One `lumos predict` JSON document as a row of `DataSet.predictions` (ms); the emulated actual's
    iteration too where the prediction was also compared with one (the pipeline's sweep)."""
    row = {"target": target, "seed": int(seed)}
    row.update({f"predicted_{p}_ms": float(doc["predicted"][f"{p}_us"]) / 1e3 for p in PARTS})
    measured = doc.get("measured")
    row["emulated_iteration_ms"] = float(measured["iteration_us"]) / 1e3 if measured else math.nan
    return row


def sequences_of(doc: Mapping) -> float:
    """The global batch of the run a `lumos predict` JSON document predicts (`Measurement.sequences`):
    micro-batch size x micro-batches x DP."""
    t = doc["target"]
    return float(t["micro_batch"] * doc["microbatches"] * t["dp"])


def _peer_for(target: str, errors: Sequence[PeerError]) -> PeerError | None:
    """The narrowest group of the peer's errors that holds this target."""
    holding = [e for e in errors if e.scope == "group" and target in e.targets]
    return min(holding, key=lambda e: len(e.targets)) if holding else None


def _peer_columns(peer: PeerError | None, name: str) -> dict:
    if peer is None:
        return {"peer": name or "-", "peer_group": "-", "peer_abs_error_min_pct": math.nan,
                "peer_abs_error_max_pct": math.nan, "peer_abs_error_mean_pct": math.nan, "peer_error": "-"}
    return {"peer": name, "peer_group": peer.group, "peer_abs_error_min_pct": peer.abs_error_min_pct,
            "peer_abs_error_max_pct": peer.abs_error_max_pct, "peer_abs_error_mean_pct": peer.abs_error_mean_pct,
            "peer_error": peer.text()}


def _ci(prefix: str, values) -> dict:
    ci = bootstrap_mean_ci(values)
    return {f"{prefix}_mean": ci.mean, f"{prefix}_lo": ci.lo, f"{prefix}_hi": ci.hi}


def _target_row(ds: DataSet, m: Measurement) -> dict:
    pred = ds.predictions[ds.predictions["target"] == m.target]
    if pred.empty:
        raise ValueError(f"data set {ds.name}: no prediction of target {m.target}")
    p = pred["predicted_iteration_ms"].to_numpy(dtype=float)
    err = 100.0 * (p - m.total_ms) / m.total_ms
    row = {"row": "target", "dataset": ds.name, "base": ds.base, "target": m.target, "n": len(p)}
    row.update(_ci("predicted_iteration_ms", p))
    row["predicted_iteration_cv_pct"] = run_spread(p).cv_pct
    row["measured_iteration_ms"] = m.total_ms
    row.update(_ci("error_pct", err))
    row.update(_ci("abs_error_pct", np.abs(err)))
    row["worst_abs_error_pct"] = math.nan
    l1 = np.zeros(len(p))
    for part in COMPONENT_PARTS:
        pp = pred[f"predicted_{part}_ms"].to_numpy(dtype=float)
        row[f"predicted_{part}_ms_mean"] = float(np.mean(pp))
        if part in m.parts_ms:
            pts = 100.0 * (pp - m.parts_ms[part]) / m.total_ms
            row[f"measured_{part}_ms"] = float(m.parts_ms[part])
            row[f"{part}_error_pts_mean"] = float(np.mean(pts))
            l1 += np.abs(pts)
        else:
            row[f"measured_{part}_ms"] = math.nan
            row[f"{part}_error_pts_mean"] = math.nan
            l1[:] = math.nan
    row["component_l1_pts_mean"] = float(np.mean(l1))
    row["emulated_iteration_ms_mean"] = float(pred["emulated_iteration_ms"].mean()) \
        if "emulated_iteration_ms" in pred and pred["emulated_iteration_ms"].notna().any() else math.nan
    row.update(_peer_columns(_peer_for(m.target, ds.peer_errors), ds.peer))
    row["rests_on"] = rests_on(ds.measured_by)
    return row


def throughput_ranking(ds: DataSet) -> tuple[float, int]:
    """(Spearman, layouts): the data set's layouts ranked by per-GPU throughput (sequences per GPU-second,
    `sequences / (iteration x GPUs)`), predicted against measured: the order a user choosing among them
    would act on. The targets at their predicted iteration (mean over seeds), and the base's own layout
    where the data set measured it, at the emulated base's iteration (which its replay reproduces).
    Spearman needs 3 layouts with a known batch (nan below)."""
    layouts = []
    for m in ds.measured:
        p = ds.predictions.loc[ds.predictions["target"] == m.target, "predicted_iteration_ms"]
        layouts.append((m, float(p.mean()) if len(p) else math.nan))
    if ds.base_measured is not None and ds.base_ms:
        layouts.append((ds.base_measured, float(np.mean(ds.base_ms))))
    pairs = [(m.sequences / (t * m.gpus), m.sequences / (m.total_ms * m.gpus)) for m, t in layouts]
    pairs = [p for p in pairs if all(np.isfinite(p))]
    if len(pairs) < 3:
        return math.nan, len(pairs)
    ranks = pd.DataFrame(pairs).rank()
    return float(np.corrcoef(ranks[0], ranks[1])[0, 1]), len(pairs)


def _summary_row(rows: pd.DataFrame, dataset: str, base: str, peer: PeerError | None, peer_name: str,
                 measured_by: str) -> dict:
    row = {c: math.nan for c in rows.columns}
    row.update({"row": "summary", "dataset": dataset, "base": base, "target": f"mean over {len(rows)} layouts",
                "n": len(rows), "error_pct_mean": float(rows["error_pct_mean"].mean()),
                "abs_error_pct_mean": float(rows["abs_error_pct_mean"].mean()),
                "worst_abs_error_pct": float(rows["abs_error_pct_mean"].max()),
                "component_l1_pts_mean": float(rows["component_l1_pts_mean"].mean())})
    row.update(_peer_columns(peer, peer_name))
    row["rests_on"] = rests_on(measured_by)
    return row


def endtoend_table(datasets: Sequence[DataSet]) -> pd.DataFrame:
    """One row per (data set, target), each data set's summary row after its targets, and, with
    several data sets, one summary over every target. An empty list gives an empty table."""
    blocks = []
    for ds in datasets:
        rows = pd.DataFrame([_target_row(ds, m) for m in ds.measured])
        overall = next((e for e in ds.peer_errors if e.scope == "overall"), None)
        summary = _summary_row(rows, ds.name, ds.base, overall, ds.peer, ds.measured_by)
        summary["throughput_spearman"], summary["throughput_layouts"] = throughput_ranking(ds)
        blocks.append(pd.concat([rows, pd.DataFrame([summary])], ignore_index=True))
    if not blocks:
        return pd.DataFrame(columns=["row", "dataset", "base", "target", "n"])
    out = pd.concat(blocks, ignore_index=True)
    if len(blocks) > 1:
        targets = out[out["row"] == "target"]
        kinds = sorted({ds.measured_by for ds in datasets})
        every = _summary_row(targets, "all", "-", None, "", ", ".join(kinds))
        every["peer"] = "-"
        out = pd.concat([out, pd.DataFrame([every])], ignore_index=True)
    return out


# ---- writing -----------------------------------------------------------------------------------

def markdown_view(table: pd.DataFrame) -> pd.DataFrame:
    """The table as it reads in Markdown: CIs folded into the mean, each part as
    `predicted / measured (error in points)`, the peer's published error, what the row rests on."""
    out = pd.DataFrame({"dataset": table["dataset"], "base": table["base"], "target": table["target"],
                        "n": table["n"]})
    out["predicted_ms [95% CI]"] = [_folded(r, "predicted_iteration_ms") for _, r in table.iterrows()]
    out["measured_ms"] = [format_cell(v, "measured_iteration_ms") for v in table["measured_iteration_ms"]]
    out["error_pct [95% CI]"] = [_folded(r, "error_pct") for _, r in table.iterrows()]
    out["abs_error_pct"] = [format_cell(v, "abs_error_pct") for v in table["abs_error_pct_mean"]]
    out["per-GPU throughput order: Spearman (layouts)"] = [_ranking_cell(r) for _, r in table.iterrows()]
    for part in COMPONENT_PARTS:
        out[f"{PART_LABELS[part]} ms: predicted / measured (pts)"] = [_part_cell(r, part) for _, r in table.iterrows()]
    out["peer's published abs_error_pct"] = [
        "-" if r["peer_error"] == "-" else f"{r['peer_error']}, {r['peer']}" for _, r in table.iterrows()]
    out["rests on"] = table["rests_on"]
    return out


def _ranking_cell(r) -> str:
    rho = r.get("throughput_spearman", math.nan)
    if not np.isfinite(rho):
        return "-"
    return f"{rho:.2f} ({int(r['throughput_layouts'])})"


def _part_cell(r, part: str) -> str:
    pts = r[f"{part}_error_pts_mean"]
    if not np.isfinite(pts):
        return "-"
    return f"{r[f'predicted_{part}_ms_mean']:.1f} / {r[f'measured_{part}_ms']:.1f} ({pts:+.2f})"


def _folded(r, base: str) -> str:
    m = r[f"{base}_mean"]
    if not np.isfinite(m):
        return "-"
    lo, hi = r.get(f"{base}_lo", math.nan), r.get(f"{base}_hi", math.nan)
    cell = format_cell(m, base)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return cell
    return f"{cell} [{format_cell(lo, base)}, {format_cell(hi, base)}]"


def write_endtoend_table(table: pd.DataFrame, csv_path, md_path, title: str) -> None:
    """CSV: every column at full precision (`row` = target or summary); Markdown: `markdown_view`."""
    write_csv(table, csv_path)
    md = to_markdown(markdown_view(table), title) if len(table) else f"**{title}**\n\n(no data set configured)\n"
    write_text_atomic(md_path, md)
