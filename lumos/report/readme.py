"""Write the pipeline's numbers into README.md and docs/results.md, between markers.

`python -m lumos.report.readme` fills every marker block the two pages have from the files the
last `snakemake --cores 8` wrote (`results/tables/`, the replay jobs' timings under
`results/default/benchmarks/`, the paper's errors under `resources/measurements/`), so no number
inside a block is typed by hand. A block is `<!-- NAME:begin -->` ... `<!-- NAME:end -->`; what
is between is replaced, what is around is kept. The blocks:

README.md, the front page:
- `headline`: the headline table, one row per claim, each number computed from a named column of
  a named csv (`lumos.report.headline`).

docs/results.md, every table:
- `tables`: the files `results/tables/*.md` in a fixed order (`ORDER`; the long ones linked, `LINKED`);
- `h200`: a narrow view of `h200_whatif.csv` (the measured-on-hardware what-ifs; its interval
  columns too when the table has them);
- `realism`: the summary block of `emulator_realism.md` (emulated vs measured per data set);
- `coverage`: a narrow view of `coverage.csv`;
- `endtoend`: `endtoend.md` (predicted from an emulated base vs measured on hardware);
- `fig7`: our error per scale-out configuration beside the paper's (`headline.fig7_comparison`).

A block whose source file is missing is left as it is. `--readme` and `--results` name the pages
(either may be left out with an empty string); a page without any known block is an error.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from lumos.trace.atomic import write_text_atomic

from .headline import Sources, fig7_comparison, headline_table

BEGIN, END = "<!-- tables:begin -->", "<!-- tables:end -->"
ORDER = ("replay_real", "replay_h200", "h200_whatif", "replay_microbench", "replay_emulated", "scaleout", "variants", "speed", "sharded_dp", "fsdp_cpu_whatif", "ablation", "statistics")
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
                "steps_from": "profiled steps from", "clock_factor": "clock x",
                "predicted_iteration_ms": "predicted ms", "measured_iteration_ms": "measured ms (mean of 6)",
                "measured_min_ms": "min", "measured_max_ms": "max", "error_pct": "error %",
                "spread_pct": "spread %", "exposed_compute_error_pct": "compute error %",
                "other_error_pct": "other error %"}
# Shown after "predicted ms" when the table has them (the prediction's 90% interval, and the share of
# the target's measured iterations inside it); a table without them renders as before.
H200_INTERVAL_COLUMNS = {"predicted_lo90_ms": "90% lo ms", "predicted_hi90_ms": "90% hi ms",
                         "width90_pct": "90% width %", "measured_in_90_pct": "measured inside 90% %"}


def render_h200(tables_dir: Path) -> str:
    """A narrow view of `h200_whatif.csv`, its columns read by name (extra columns are ignored)."""
    import pandas as pd

    from .tables import to_markdown

    df = pd.read_csv(tables_dir / "h200_whatif.csv")
    names = {}
    for col, label in H200_COLUMNS.items():
        if col not in df.columns and col == "steps_from":   # a table from before --other-recordings
            continue
        names[col] = label
        if col == "predicted_iteration_ms":
            names.update({c: n for c, n in H200_INTERVAL_COLUMNS.items() if c in df.columns})
    view = df[list(names)].rename(columns=names)
    return to_markdown(view, "What-ifs from the H200 base, measured on hardware (one H200)").strip() + "\n"


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


HEADLINE_BEGIN, HEADLINE_END = "<!-- headline:begin -->", "<!-- headline:end -->"
FIG7_BEGIN, FIG7_END = "<!-- fig7:begin -->", "<!-- fig7:end -->"


# name -> (the file it needs, relative to the tables directory, or None; how it renders)
BLOCKS: dict[str, tuple[str | None, Callable[[Sources], str]]] = {
    "headline": (None, headline_table),
    "tables": (None, lambda s: render(s.tables)),
    "h200": ("h200_whatif.csv", lambda s: render_h200(s.tables)),
    "realism": ("emulator_realism.md", lambda s: render_realism(s.tables)),
    "coverage": ("coverage.csv", lambda s: render_coverage(s.tables)),
    "endtoend": ("endtoend.md", lambda s: render_endtoend(s.tables)),
    "fig7": ("scaleout.csv", fig7_comparison),
}


def _replace(text: str, begin: str, end: str, body: str, page: Path) -> str:
    if begin not in text or end not in text:
        raise SystemExit(f"{page}: markers {begin} / {end} not found")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def paste(page: Path, tables_dir: Path, *, benchmarks: Path = Sources.benchmarks,
          paper_errors: Path = Sources.paper_errors) -> list[str]:
    """Fill every known block `page` has (whose source exists); return the names filled."""
    src = Sources(Path(tables_dir), Path(benchmarks), Path(paper_errors))
    text = page.read_text()
    present = [name for name in BLOCKS if f"<!-- {name}:begin -->" in text]
    if not present:
        raise SystemExit(f"{page}: no marker block of {sorted(BLOCKS)} found")
    filled = []
    for name in present:
        needs, fn = BLOCKS[name]
        if needs is None or (src.tables / needs).exists():
            text = _replace(text, f"<!-- {name}:begin -->", f"<!-- {name}:end -->", fn(src), page)
            filled.append(name)
    write_text_atomic(page, text)
    return filled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", default="README.md", help="the front page (block headline); '' to skip")
    ap.add_argument("--results", default="docs/results.md", help="the full tables (every other block); '' to skip")
    ap.add_argument("--tables", default=str(Sources.tables))
    ap.add_argument("--benchmarks", default=str(Sources.benchmarks), help="the pipeline's job timings")
    ap.add_argument("--paper-errors", default=str(Sources.paper_errors))
    args = ap.parse_args()
    for page in (args.readme, args.results):
        if page:
            filled = paste(Path(page), Path(args.tables), benchmarks=Path(args.benchmarks),
                           paper_errors=Path(args.paper_errors))
            print(f"{page}: {', '.join(filled) or 'nothing'} filled")


if __name__ == "__main__":
    main()
