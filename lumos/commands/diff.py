"""`lumos diff A B`: what the difference in iteration time between two runs (or steps) costs, and why.

A's graph is replayed three times with B's durations (`lumos.analysis.transfer`):
with B's GPU op durations, with B's CPU-side durations, with all of them. The
difference T(B) - T(A) of the measured iterations then splits into parts that
add up to it exactly:

- GPU: T(A's graph, B's GPU durations) - T(A)
- CPU: T(A's graph, B's CPU durations) - T(A)
- interaction: what changing both at once adds beyond the two alone
- unexplained: T(B) - T(A's graph, all of B's durations): what durations do not
  explain (other dependencies, launch order, a different program).

Also listed: the device ops (by name) whose summed duration changed most.
`--step SA[:SB]` picks the steps (default: each trace's default step; SA for
both when SB is left out). A and B may be the same file.
"""

from __future__ import annotations

import argparse

from lumos.errors import UserError
from lumos.graph import DEFAULT_GAP_THRESHOLD_US

from .flags import ENGINE_HELP, FORMAT_HELP, check, non_negative_float, non_negative_int
from .output import emit

NAME_WIDTH = 70  # device op names (C++ templates) are cut to this many characters in the table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="attribute the iteration-time difference of two runs or steps",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="trace A (a .json/.json.gz Kineto trace of one rank)")
    p.add_argument("b", help="trace B (may be A itself, with --step SA:SB)")
    p.add_argument("--step", type=parse_steps, default=(None, None), metavar="SA[:SB]",
                   help="steps of A and B (default: each trace's default)")
    p.add_argument("--format", choices=("table", "json"), default="table", help=FORMAT_HELP)
    p.add_argument("--top", type=non_negative_int, default=5,
                   help="device ops listed by change in summed duration (default 5)")
    p.add_argument("--gap-threshold-us", type=non_negative_float, default=DEFAULT_GAP_THRESHOLD_US,
                   help="inter-thread gap rule threshold (us)")
    p.add_argument("--engine", choices=("auto", "reference", "compiled"), default="auto", help=ENGINE_HELP)
    p.add_argument("--iteration", choices=("step", "gpu"), default="step",
                   help="compare step periods (default) or the GPU spans of the steps' work")
    p.set_defaults(func=run)


@check
def parse_steps(text: str) -> tuple[int, int]:
    """--step 'SA' or 'SA:SB' -> (SA, SB) (SA for both where SB is left out): its argparse type."""
    try:
        steps = [int(s) for s in text.split(":")]
    except ValueError:
        steps = []
    if len(steps) not in (1, 2) or min(steps) < 0:
        raise argparse.ArgumentTypeError(f"takes SA or SA:SB (step numbers, integers >= 0), got {text!r}")
    return steps[0], steps[-1]


def run(args) -> int:
    from lumos.analysis.transfer import NotSameJobError, diff_attribution
    from lumos.commands.replay import load_one_rank
    from lumos.sim import SimulationError

    sa, sb = args.step
    a = load_one_rank(args.a, "A")
    b = load_one_rank(args.b, "B")
    try:
        doc = diff_attribution(a, sa, b, sb, engine=args.engine, gap_threshold_us=args.gap_threshold_us,
                               top=args.top, iteration=args.iteration)
    except NotSameJobError as exc:
        raise UserError(str(exc)) from None
    except SimulationError as exc:
        raise UserError(f"A's graph with B's durations cannot be replayed: {exc}") from None
    doc.pop("_exact", None)
    emit(doc, args.format, format_diff)
    return 0


def format_diff(doc: dict) -> str:
    a, b = doc["a"], doc["b"]
    t_a = a["iteration_us"]
    pct = (lambda us: f"{100 * us / t_a:+8.2f}") if t_a else (lambda us: f"{'-':>8}")
    same = a["trace"] == b["trace"]
    who_b = f"step {b['step']}" if same else f"{b['trace']} step {b['step']}"
    lines = [f"A = {a['trace']} step {a['step']}: {t_a / 1e3:.3f} ms;  B = {who_b}: {b['iteration_us'] / 1e3:.3f} ms",
             f"  {'B - A, explained by':<28}{'ms':>10}{'% of A':>9}"]
    labels = {"gpu": "GPU op durations", "cpu": "CPU-side durations", "interaction": "both together (interaction)",
              "unexplained": "neither (deps, launch order)"}
    for key, label in labels.items():
        us = doc["parts_us"][key]
        lines.append(f"  {label:<28}{us / 1e3:>+10.3f}{pct(us)}")
    lines.append(f"  {'total':<28}{doc['difference_us'] / 1e3:>+10.3f}{pct(doc['difference_us'])}")
    exact = "exactly" if a["replayed_us"] == t_a else f"in {a['replayed_us'] / 1e3:.3f} ms"
    lines.append(f"  {100 * doc['matched_share']:.1f}% of A's tasks matched in B; A's graph replays A {exact}")
    if doc["top_gpu_ops"]:
        lines.append("  device ops whose summed duration changed most (ms, A -> B, count):")
        for op in doc["top_gpu_ops"]:
            name = op["name"] if len(op["name"]) <= NAME_WIDTH else op["name"][:NAME_WIDTH - 3] + "..."
            lines.append(f"  {op['change_us'] / 1e3:>+10.3f}  {op['a_us'] / 1e3:.3f} -> {op['b_us'] / 1e3:.3f}"
                         f"  x{op['count_a']}->{op['count_b']}  {name}")
    return "\n".join(lines)
