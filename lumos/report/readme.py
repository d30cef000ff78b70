"""Paste the pipeline's generated Markdown tables into README.md, between markers.

`python -m lumos.report.readme` replaces everything between
`<!-- tables:begin -->` and `<!-- tables:end -->` with the files in
`results/tables/*.md`, in a fixed order, so the README shows what the last
`snakemake --cores 8` produced and nothing typed by hand.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lumos.trace.atomic import write_text_atomic

BEGIN, END = "<!-- tables:begin -->", "<!-- tables:end -->"
ORDER = ("replay_real", "replay_microbench", "replay_emulated", "scaleout", "variants", "ablation", "statistics")
LINKED = ("ablation_by_trace",)  # too long to paste: linked instead


def render(tables_dir: Path) -> str:
    parts = []
    names = [n for n in ORDER if (tables_dir / f"{n}.md").exists()]
    names += sorted(p.stem for p in tables_dir.glob("*.md") if p.stem not in ORDER + LINKED)
    for name in names:
        parts.append(f"#### `{name}`\n\n" + (tables_dir / f"{name}.md").read_text().strip() + "\n")
    for name in LINKED:
        if (tables_dir / f"{name}.md").exists():
            parts.append(f"#### `{name}`\n\nEvery variant on every trace: `{tables_dir / name}.md` (and `.csv`).\n")
    return "\n".join(parts)


def paste(readme: Path, tables_dir: Path) -> None:
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{readme}: markers {BEGIN} / {END} not found")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    write_text_atomic(readme, f"{head}{BEGIN}\n{render(tables_dir)}\n{END}{tail}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", default="README.md")
    ap.add_argument("--tables", default="results/tables")
    args = ap.parse_args()
    paste(Path(args.readme), Path(args.tables))


if __name__ == "__main__":
    main()
