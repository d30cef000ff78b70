"""What every pipeline shim does: log to the rule's log file, compose and save its Hydra config, call lumos.

Shims stay a few lines each; the work is in the package, where it is tested.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
import traceback
from pathlib import Path


@contextlib.contextmanager
def logged(smk):
    """Send stdout/stderr of the job to its `log:` file, with a start line, the wall time and any traceback."""
    log_path = Path(smk.log[0])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log_path, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        print(f"[{time.strftime('%H:%M:%S')}] rule {smk.rule} wildcards {dict(smk.wildcards)}", flush=True)
        try:
            yield log
        except BaseException:
            traceback.print_exc(file=log)
            log.flush()
            raise
        finally:
            print(f"[{time.strftime('%H:%M:%S')}] done in {time.perf_counter() - t0:.2f} s", flush=True)


def compose_saved(primary: str, overrides, resolved_path, scale=None):
    """Compose one resolved config for this job and save it beside the job's outputs; `scale` multiplies
    cluster fields (a faster or slower cluster than any Hydra file describes), said in the header."""
    from lumos.config import compose, to_yaml
    from lumos.trace.atomic import write_text_atomic

    overrides = [str(o) for o in overrides]
    cfg = compose(primary, overrides)
    for key, factor in (scale or {}).items():
        cfg.cluster[key] = float(cfg.cluster[key]) * float(factor)
    header = (f"# resolved by Hydra: config {primary}, overrides {overrides}\n"
              + (f"# cluster scaled by {dict(scale)}\n" if scale else "")
              + f"# config dir {os.environ.get('LUMOS_CONFIG_DIR', '(package default)')}\n")
    write_text_atomic(resolved_path, header + to_yaml(cfg))
    print(f"config {primary} with {overrides}" + (f", cluster scaled by {dict(scale)}" if scale else ""), flush=True)
    return cfg


def compose_saved_to(primary: str, overrides, resolved_paths):
    """`compose_saved` for a batch that shares one config: composed once, a copy beside each output."""
    from lumos.trace.atomic import write_text_atomic

    paths = as_list(resolved_paths)
    cfg = compose_saved(primary, overrides, paths[0])
    for path in paths[1:]:
        write_text_atomic(path, Path(paths[0]).read_text())
    return cfg


def emulate_into(cfg, out: Path) -> str:
    """Emulate a composed config, write its rank traces and manifest under `out` (old ranks removed
    first: a rerun with fewer ranks must not leave them behind), free it; a line saying what ran."""
    import gc

    from lumos.emulator import emulate_config, write_result

    for stale in out.glob("rank*.json*"):
        stale.unlink()
    result = emulate_config(cfg, progress=False)
    write_result(result, out)
    line = (f"emulated {len(result.ranks)} ranks, iteration {result.iteration_us / 1e3:.3f} ms (emulated), "
            f"wall {result.wall_s:.2f} s")
    del result
    gc.collect()   # the next run of the batch starts without the last one's millions of objects
    return line


def run_cli(argv: list[str]) -> str:
    """Run `lumos ARGV` in this process and return what it printed on stdout; fail on a non-zero exit."""
    from lumos.cli import main

    print("lumos " + " ".join(argv), flush=True)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(list(argv))
    if rc:
        raise RuntimeError(f"lumos {argv[0]} exited with status {rc} (its message is above)")
    return buf.getvalue()


def write_json(path, doc) -> None:
    import json

    from lumos.trace.atomic import write_text_atomic

    write_text_atomic(path, json.dumps(doc, indent=1, allow_nan=True) + "\n")


def as_list(files) -> list[str]:
    """A named input/output/param as a list: one file (a str) or several."""
    return [files] if isinstance(files, str) else list(files)


def add_scriptdir(smk) -> None:
    if smk.scriptdir and smk.scriptdir not in sys.path:
        sys.path.insert(0, str(smk.scriptdir))
