"""`lumos emulate`: one emulated iteration written as per-rank Kineto traces plus a manifest."""

from __future__ import annotations

import argparse
import sys

from lumos.errors import UserError

from .flags import output_file, positive_int


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "emulate", help="emulate a Megatron GPT iteration on a GPU cluster (H100 or A100 profile); "
                        "write per-rank Kineto traces",
        description="Emulate (not measure) one training iteration. Hydra-style overrides, e.g. "
                    "model=gpt3_15b parallel.tp=2 parallel.pp=2 parallel.dp=4 seed=3 out=DIR "
                    "[ranks=stage|all [write_ranks=stage]] [trace.legacy=true] [emulator.granularity=coarse]")
    p.add_argument("overrides", nargs="*", help="key=value overrides of config/emulate.yaml")
    p.add_argument("--calibrate", nargs="?", const="table", choices=("table", "vtrain", "fig7", "selene", "all"),
                   default=None,
                   help="no value: print the calibration table (175B vs the paper's Fig. 1, 15B seed spread, "
                        "scaling); vtrain | fig7 | selene: fit the knobs calibrated on that data set and print "
                        "before/after (--write records them in config/); all: the three fits in turn")
    p.add_argument("--write", action="store_true", help="--calibrate vtrain|fig7|selene|all: record the fitted values")
    p.add_argument("--max-evals", type=positive_int, metavar="K",
                   help="--calibrate vtrain|fig7|selene|all: emulator runs each fit may use")
    p.add_argument("--realism", action="store_true",
                   help="emulate every published measurement (resources/measurements/) and print emulated vs "
                        "measured per data set: n, mean/median/worst |error|, signed mean, Spearman")
    p.add_argument("--sample", type=positive_int, metavar="N",
                   help="--realism: a stratified sample of N vTrain rows (default: all 1,440)")
    p.add_argument("--workers", type=positive_int, metavar="W", help="--realism: processes (default: every core)")
    p.add_argument("--out", type=output_file, metavar="CSV",
                   help="--realism: write every emulated vs measured row here")
    p.add_argument("--datasets", metavar="LIST", help="--realism: comma-separated, of fig1,fig7,vtrain_single,"
                                                            "sc21_table1,sc21_table2,korthikanti_2022")
    p.add_argument("--nccl-tests", action="store_true",
                   help="instead of an iteration, write what NVIDIA's nccl-tests would print on the emulated "
                        "cluster (all_reduce_perf, all_gather_perf, reduce_scatter_perf, sendrecv_perf over one "
                        "host's 2, 4, 8 GPUs and 2 and 4 hosts) into out=DIR, for `lumos predict --nccl-tests`")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary line")
    p.set_defaults(func=run, exit_without_teardown=True)


def run(args: argparse.Namespace) -> int:
    from lumos.emulator.settings import SettingsError

    if args.calibrate == "table":
        from lumos.emulator.calibrate import main as calibrate_main

        return calibrate_main(list(args.overrides))
    if args.calibrate:
        from lumos.emulator.fit import main as fit_main

        argv = [args.calibrate] + (["--write"] if args.write else [])
        argv += [f"--{k.replace('_', '-')}={v}" for k in ("max_evals", "sample", "workers") if (v := getattr(args, k))]
        return fit_main(argv)
    if args.write or args.max_evals:
        raise UserError("--write and --max-evals only go with --calibrate vtrain|fig7|selene|all")
    realism_flags = [(f"--{k}", v) for k in ("sample", "workers", "out", "datasets")
                     if (v := getattr(args, k)) is not None]
    if args.realism:
        from lumos.emulator.realism import main as realism_main

        return realism_main([str(x) for flag in realism_flags for x in flag] + list(args.overrides))
    if realism_flags:
        raise UserError(f"{', '.join(f for f, _ in realism_flags)} only go with --realism")
    try:
        from lumos.config import compose

        cfg = compose("emulate", list(args.overrides))
    except Exception as exc:  # Hydra's override errors are user errors
        if type(exc).__module__.startswith(("hydra", "omegaconf")):
            raise UserError(str(exc).splitlines()[0]) from None
        raise
    if not cfg.get("out"):
        raise UserError("missing out=DIR (where to write rank{R}.json.gz and manifest.json)")
    if args.nccl_tests:
        from lumos.emulator.nccl_tests import write_sweeps

        try:
            written = write_sweeps(cfg, cfg.out)
        except SettingsError as exc:
            raise UserError(str(exc)) from None
        if not args.quiet:
            print(f"{len(written)} emulated nccl-tests outputs in {cfg.out} (cluster {cfg.cluster.name})")
        return 0
    from lumos.emulator.emulate import emulate_config, write_result

    try:
        result = emulate_config(cfg, progress=None if not args.quiet else False)
    except SettingsError as exc:
        raise UserError(str(exc)) from None
    paths = write_result(result, cfg.out)
    if not args.quiet:
        s = result.settings
        print(f"emulated {s.model.name} tp={s.tp} pp={s.pp} dp={s.dp} seed={s.seed}: "
              f"iteration {result.iteration_us / 1e3:.1f} ms (emulated), {len(paths)} rank trace(s) in {cfg.out}",
              file=sys.stderr)
    return 0
