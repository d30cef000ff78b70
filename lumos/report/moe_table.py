"""The `moe` table (emulated): MoE what-ifs predicted from emulated Mixtral-style bases against the mean of the
targets' emulated runs, and the routing interval of the base's own configuration against independent runs.

Its long data (`workflow/scripts/moe_check.py`) has one row per (target, base seed), `kind` prediction, with
the predicted and the actual-mean breakdowns (`predicted_*`, `actual_*`, us), and one row `kind` interval.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

PARTS = ("exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us")


def moe_table(data: pd.DataFrame) -> pd.DataFrame:
    """Per target: predicted and actual iteration (ms), signed and absolute error (%, mean over the bases), the
    worst component's distance (points of the actual iteration, over the bases); then the mean over every
    prediction, and the interval row."""
    pred = data[data["kind"] == "prediction"].copy()
    pred["error_pct"] = 100.0 * (pred["predicted_iteration_us"] - pred["actual_iteration_us"]) \
        / pred["actual_iteration_us"]
    pred["parts_pts"] = np.max(np.stack([100.0 * (pred[f"predicted_{p}"] - pred[f"actual_{p}"]).abs()
                                         / pred["actual_iteration_us"] for p in PARTS]), axis=0)
    rows = []
    for target, g in pred.groupby("target", sort=False):
        rows.append({"target": target, "flags": g["flags"].iloc[0], "bases": len(g),
                     "predicted_ms": round(g["predicted_iteration_us"].mean() / 1e3, 2),
                     "actual_ms": round(g["actual_iteration_us"].mean() / 1e3, 2),
                     "actual_sd_ms": round(g["actual_sd_us"].mean() / 1e3, 2),
                     "error_pct": round(g["error_pct"].mean(), 2),
                     "abs_error_pct": round(g["error_pct"].abs().mean(), 2),
                     "parts_max_pts": round(g["parts_pts"].max(), 2)})
    rows.append({"target": "all", "flags": "", "bases": int(pred["base_seed"].nunique()),
                 "predicted_ms": np.nan, "actual_ms": np.nan, "actual_sd_ms": np.nan,
                 "error_pct": round(pred["error_pct"].mean(), 2),
                 "abs_error_pct": round(pred["error_pct"].abs().mean(), 2),
                 "parts_max_pts": round(pred["parts_pts"].max(), 2)})
    out = pd.DataFrame(rows)
    iv = data[data["kind"] == "interval"]
    for _, r in iv.iterrows():
        out = pd.concat([out, pd.DataFrame([{
            "target": f"90% interval, {r['target']}", "flags": r["flags"], "bases": 1,
            "predicted_ms": f"[{r['lo_us'] / 1e3:.1f}, {r['hi_us'] / 1e3:.1f}]",
            "actual_ms": round(r["actual_iteration_us"] / 1e3, 2), "actual_sd_ms": round(r["actual_sd_us"] / 1e3, 2),
            "error_pct": np.nan, "abs_error_pct": np.nan, "parts_max_pts": np.nan,
            "covered_pct": round(100.0 * r["covered"], 1), "runs": int(r["runs"])}])], ignore_index=True)
    return out
