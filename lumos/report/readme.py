"""Paste the pipeline's generated Markdown tables into README.md, between markers.

`python -m lumos.report.readme` replaces everything between
`<!-- tables:begin -->` and `<!-- tables:end -->` with the files in
`results/tables/*.md`, in a fixed order, so the README shows what the last
`snakemake --cores 8` produced and nothing typed by hand; between
`<!-- h200:begin -->` and `<!-- h200:end -->` it writes a narrow view of
`h200_whatif.csv` (the measured-on-hardware what-ifs); between `<!-- realism:begin -->` and
`<!-- realism:end -->` the summary block of `emulator_realism.md` (emulated vs measured per data set);
between `<!-- coverage:begin -->` and `<!-- coverage:end -->` a narrow view of `coverage.csv`; between
`<!-- endtoend:begin -->` and `<!-- endtoend:end -->` `endtoend.md` (predicted from an emulated base vs
measured on hardware).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lumos.trace.atomic import write_text_atomic

BEGIN, END = "<!-- tables:begin -->", "<!-- tables:end -->"
ORDER = ("replay_real", "replay_h200", "h200_whatif", "replay_microbench", "replay_emulated", "scaleout", "variants", "speed", "ablation", "statistics")
LINKED = {"ablation_by_trace": "Every variant on every trace",   # too long to paste: linked instead
          "transfer_real": "Every transfer prediction",
          "coverage": "Every column of the interval coverage (a narrow view is pasted under \"Prediction "
                      "intervals: do they hold?\")",
          "emulator_realism": "Emulated vs measured, per data set and per configuration (the summary is pasted "
                              "under \"Is the emulator realistic?\")",
          "endtoend": "Prediction vs hardware (pasted under \"Prediction vs hardware\")"}
SUMMARY_ONLY = ("transfer_real",)   # paste the first (summary) table, link the rest


def render(tables_dir: Path) -> str:
    parts = []
    names = [n for n in ORDER if (tables_dir / f"{n}.md").exists()]
    names += sorted(p.stem for p in tables_dir.glob("*.md") if p.stem not in ORDER + tuple(LINKED))
    for name in names:
        parts.append(f"#### `{name}`\n\n" + (tables_dir / f"{name}.md").read_text().strip() + "\n")
    for name in LINKED:
        if name in SUMMARY_ONLY and (tables_dir / f"{name}.md").exists():
            summary = (tables_dir / f"{name}.md").read_text().strip().split("\n\n**", 1)[0]
            parts.append(f"#### `{name}`\n\n" + summary.strip() + "\n\n"
                         f"{LINKED[name]}: `{tables_dir / name}.md` (and `.csv`).\n")
        elif (tables_dir / f"{name}.md").exists():
            parts.append(f"#### `{name}`\n\n{LINKED[name]}: `{tables_dir / name}.md` (and `.csv`).\n")
    return "\n".join(parts)


H200_BEGIN, H200_END = "<!-- h200:begin -->", "<!-- h200:end -->"
H200_COLUMNS = {"target": "target", "role": "role", "flags": "lumos predict flags", "base": "base",
               "clock_factor": "clock x",
                "predicted_iteration_ms": "predicted ms", "measured_iteration_ms": "measured ms (mean of 6)",
                "measured_min_ms": "min", "measured_max_ms": "max", "error_pct": "error %",
                "spread_pct": "spread %", "exposed_compute_error_pct": "compute error %",
                "other_error_pct": "other error %"}


def render_h200(tables_dir: Path) -> str:
    import pandas as pd

    from .tables import to_markdown

    df = pd.read_csv(tables_dir / "h200_whatif.csv")[list(H200_COLUMNS)].rename(columns=H200_COLUMNS)
    return to_markdown(df, "What-ifs from the H200 base, measured on hardware (one H200)").strip() + "\n"


REALISM_BEGIN, REALISM_END = "<!-- realism:begin -->", "<!-- realism:end -->"


def render_realism(tables_dir: Path) -> str:
    """The summary block (first table) of `emulator_realism.md`: emulated vs measured per data set."""
    return (tables_dir / "emulator_realism.md").read_text().strip().split("\n\n**", 1)[0].strip() + "\n"


COVERAGE_BEGIN, COVERAGE_END = "<!-- coverage:begin -->", "<!-- coverage:end -->"
COVERAGE_COLUMNS = ("experiment", "group", "point_ms", "lo90_ms", "hi90_ms", "width90_pct", "actual_mean_ms",
                    "actual_sd_pct", "point_error_pct", "coverage50_pct", "coverage90_pct", "coverage95_pct")


def render_coverage(tables_dir: Path) -> str:
    import pandas as pd

    from .tables import to_markdown

    df = pd.read_csv(tables_dir / "coverage.csv")
    title = (f"Interval coverage (emulated): each interval against the emulated actual of "
             f"{int(df['seeds'].iloc[0])} other seeds")
    return to_markdown(df[list(COVERAGE_COLUMNS)], title).strip() + "\n"


ENDTOEND_BEGIN, ENDTOEND_END = "<!-- endtoend:begin -->", "<!-- endtoend:end -->"


def render_endtoend(tables_dir: Path) -> str:
    """`endtoend.md` as written: every target and the summary, predicted vs measured on hardware."""
    return (tables_dir / "endtoend.md").read_text().strip() + "\n"


def _replace(text: str, begin: str, end: str, body: str, readme: Path) -> str:
    if begin not in text or end not in text:
        raise SystemExit(f"{readme}: markers {begin} / {end} not found")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def paste(readme: Path, tables_dir: Path) -> None:
    text = _replace(readme.read_text(), BEGIN, END, render(tables_dir), readme)
    if (tables_dir / "h200_whatif.csv").exists() and H200_BEGIN in text:
        text = _replace(text, H200_BEGIN, H200_END, render_h200(tables_dir), readme)
    if (tables_dir / "emulator_realism.md").exists() and REALISM_BEGIN in text:
        text = _replace(text, REALISM_BEGIN, REALISM_END, render_realism(tables_dir), readme)
    if (tables_dir / "coverage.csv").exists() and COVERAGE_BEGIN in text:
        text = _replace(text, COVERAGE_BEGIN, COVERAGE_END, render_coverage(tables_dir), readme)
    if (tables_dir / "endtoend.md").exists() and ENDTOEND_BEGIN in text:
        text = _replace(text, ENDTOEND_BEGIN, ENDTOEND_END, render_endtoend(tables_dir), readme)
    write_text_atomic(readme, text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", default="README.md")
    ap.add_argument("--tables", default="results/tables")
    args = ap.parse_args()
    paste(Path(args.readme), Path(args.tables))


if __name__ == "__main__":
    main()
